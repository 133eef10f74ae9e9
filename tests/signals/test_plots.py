"""The plot series a run's view keeps (signals/plots.py): bounded buckets covering every step once, extremes
kept, every mark unbucketed, ranks merged per step as the signals merge them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ingested_series
from zerodoctor.signals import plots

RANKS = 4
STEPS = 3000
OVERFLOWS = {17, 18, 1234, 2999}
SPIKE = 2222  # one step whose loss is far above the rest


def _step(rank: int, n: int) -> dict:
    return {"v": 1, "t": 1000.0 + n, "run": "r", "rank": rank, "kind": "step", "step": n,
            "loss": (50.0 if n == SPIKE else 2.0) + rank, "loss_scale": 2.0 ** 16 / (2 if rank == 3 else 1),
            "overflow": n in OVERFLOWS, "step_time_s": 1.0 + rank / 10, "comm_s": 0.1 * (RANKS - rank),
            "grad_norm": float("nan") if n == 77 and rank == 0 else 1.0, "mem_allocated_bytes": 10 * 2**30 + n}


@pytest.fixture
def rows() -> list[dict]:
    out = [_step(r, n) for n in range(1, STEPS + 1) for r in range(RANKS)]
    out.append({"v": 1, "t": 9000.0, "run": "r", "rank": 2, "kind": "oom", "step": STEPS + 1,
                "requested_bytes": 2 << 30, "reserved_bytes": 70 << 30})
    return out


def _series_of(tmp_path: Path, rows: list[dict], points: int, monkeypatch: pytest.MonkeyPatch) -> plots.RunSeries:
    monkeypatch.setattr(plots, "POINTS", points)
    return ingested_series(tmp_path, rows, "r")


def test_buckets_are_bounded_and_cover_every_step(tmp_path, rows, monkeypatch) -> None:
    series = _series_of(tmp_path, rows, 100, monkeypatch)
    assert 50 < len(series.lo) <= 100  # the width doubles as the run grows: between half and all of POINTS
    assert (series.first_step, series.last_step, series.steps) == (1, STEPS, STEPS)
    assert series.lo[0] == 1 and series.hi[-1] == STEPS
    assert all(hi + 1 == lo for hi, lo in zip(series.hi, series.lo[1:]))  # no step in two buckets, none lost


def test_extremes_survive_bucketing_and_ranks_merge_per_step(tmp_path, rows, monkeypatch) -> None:
    series = _series_of(tmp_path, rows, 100, monkeypatch)
    spike = next(i for i, (lo, hi) in enumerate(zip(series.lo, series.hi)) if lo <= SPIKE <= hi)
    mean_loss = sum(2.0 + r for r in range(RANKS)) / RANKS
    assert series.buckets["loss_max"][spike] == pytest.approx(mean_loss + 48.0)  # the spike, ranks averaged
    assert series.buckets["loss_min"][spike] == pytest.approx(mean_loss)
    assert set(series.buckets["loss_scale_min"]) == {2.0 ** 15}  # the lowest rank's scale for each step
    assert series.buckets["mem_allocated_bytes_max"][-1] == 10 * 2**30 + STEPS


def test_every_mark_is_kept_unbucketed(tmp_path, rows, monkeypatch) -> None:
    series = _series_of(tmp_path, rows, 10, monkeypatch)
    assert [s for s, _ in series.overflows] == sorted(OVERFLOWS)
    assert {scale for _, scale in series.overflows} == {2.0 ** 15}
    assert series.nonfinite == [77]
    assert [(o["rank"], o["step"], o["requested_bytes"]) for o in series.ooms] == [(2, STEPS + 1, 2 << 30)]


def test_per_rank_collective_time_shows_the_rank_that_waits_least(tmp_path, rows, monkeypatch) -> None:
    series = _series_of(tmp_path, rows, plots.POINTS, monkeypatch)
    per_step = {r["rank"]: r["comm_s"] / r["steps"] for r in series.ranks}
    assert per_step == pytest.approx({r: 0.1 * (RANKS - r) for r in range(RANKS)})
    assert series.means["step_time_s"] == pytest.approx(1.3)  # slowest rank's time per step


def test_a_short_run_is_one_bucket_per_step(tmp_path, rows, monkeypatch) -> None:
    series = _series_of(tmp_path, rows, STEPS * 2, monkeypatch)
    assert series.lo == series.hi == list(range(1, STEPS + 1))


def test_steps_folded_a_few_at_a_time_draw_what_one_fold_of_them_all_draws(monkeypatch) -> None:
    """A live watch hands the fold a step or two per pass, diagnose thousands at once: the buckets,
    once the width has doubled many times over, must be the same."""
    import random

    from zerodoctor.events.columns import Steps

    monkeypatch.setattr(plots, "POINTS", 16)
    steps = list(range(5, 5 + 1000))
    columns = {name: [None] * len(steps) for name in plots.STEP_FIELDS}
    columns.update(step=steps, plot_loss=[float((s * 7919) % 101) for s in steps],
                   plot_overflow=[s % 97 == 0 for s in steps],
                   plot_mem_allocated_bytes=[s * 1000 if s % 3 else None for s in steps])
    whole, pieces = plots.Fold(), plots.Fold()
    whole.add_steps(Steps(columns), None)
    rng, at = random.Random(7), 0
    while at < len(steps):
        size = rng.choice([1, 1, 2, 3, 17, 64])
        pieces.add_steps(Steps({k: v[at:at + size] for k, v in columns.items()}), None)
        at += size
    assert pieces.dump() == whole.dump()
    assert whole.width == 64 and len(whole.n) == 16 and sum(whole.n) == 1000
    lows = [lo for lo, n in zip(whole.lo, whole.n) if n]
    assert lows[0] == 5 and whole.hi[len(lows) - 1] == 1004
    assert max(whole.maxs["loss"]) == 100.0 and whole.totals["mem_allocated_bytes"][1] == 667



def test_a_restarted_watch_draws_what_it_drew_before(tmp_path, rows) -> None:
    """The plots fold is not saved with the view (it would triple each save): a pipeline that loads the
    saved view folds the run's steps again for its first page, and draws exactly what the first drew."""
    import json

    from zerodoctor.pipeline import Pipeline, rules_from
    from zerodoctor.store.db import open_engine

    path = tmp_path / "r" / "rank-0.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    engine = open_engine(tmp_path / "store.db")
    first = Pipeline(engine, rules_from())
    first.ingest([(path, "jsonl")], jobs=1)
    before = first.series("r")
    again = Pipeline(engine, rules_from())
    assert again.view("r").behind == {"zerodoctor.signals.plots"}
    assert again.series("r") == before and before.steps == STEPS
    engine.dispose()


def test_a_restarted_watch_draws_the_same_timeline(tmp_path) -> None:
    """The timeline's lanes come from ``trace`` events, folded by the unsaved plots fold: after a load the
    fold takes them again from the store (before: steps only, and the timeline of a restarted watch was
    gone), once, not twice. A real 2-rank gloo ZeRO-3 run's traces (the ZD302 fixture)."""
    from tests.conftest import ROOT
    from zerodoctor.pipeline import Pipeline, rules_from
    from zerodoctor.store.db import open_engine

    run = ROOT / "tests" / "fixtures" / "rules" / "ZD302" / "fires.run"
    engine = open_engine(tmp_path / "store.db")
    first = Pipeline(engine, rules_from())
    first.ingest([(run / f"rank-{r}.pt.trace.json.gz", "chrome-trace") for r in (0, 1)], jobs=1)
    before = first.series("fires.run")
    assert [(kept["rank"], kept["step"]) for kept in before.lanes] == [(r, s) for r in (0, 1) for s in (5, 6, 7)]
    again = Pipeline(engine, rules_from())
    assert again.view("fires.run").behind == {"zerodoctor.signals.plots"}
    assert again.series("fires.run").lanes == before.lanes
    assert again.series("fires.run").lanes == before.lanes  # asked again: not folded twice
    engine.dispose()


def test_the_fold_keeps_at_most_2000_timeline_ranges_a_row_per_rank_dropping_the_oldest_steps() -> None:
    """A rank profiled again (another trace file, another window) must not grow the page without bound."""
    fold = plots.Fold()
    row = [float(i) for i in range(2 * 1500)]  # 1,500 ranges
    for t, rank in ((1.0, 0), (2.0, 0), (3.0, 1), (4.0, 0)):
        fold.event({"rank": rank, "t": t, "step": 5, "file": f"r{rank}-{t}.json", "lanes_from_s": 0.0,
                    "timeline": "host", "lanes": {"compute": row, "idle": row[:2]}})
    fold.event({"rank": 0, "t": 5.0, "step": 6, "file": "old.json", "timeline": "host"})  # stored before lanes
    assert [(kept["rank"], kept["t"]) for kept in fold.lanes] == [(1, 3.0), (0, 4.0)]
