"""Store series: SQL-side downsampling keeps the size bounded, the extremes in each bucket,
every overflow, non-finite step and OOM, ranks merged per step and per-rank collective time."""

from __future__ import annotations

from pathlib import Path

import pytest

from zerodoctor.sources.batches import Batch
from zerodoctor.store import files as stored_files
from zerodoctor.store.db import open_engine
from zerodoctor.store.ingest import Ingestor
from zerodoctor.store.series import read_series

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
def run(tmp_path: Path):
    engine = open_engine(tmp_path / "store.db")
    source = tmp_path / "rank-0.jsonl"
    source.write_text("")
    ingestor = Ingestor()
    rows = [_step(r, n) for n in range(1, STEPS + 1) for r in range(RANKS)]
    rows.append({"v": 1, "t": 9000.0, "run": "r", "rank": 2, "kind": "oom", "step": STEPS + 1,
                 "requested_bytes": 2 << 30, "reserved_bytes": 70 << 30})
    with engine.begin() as conn:
        file_id = stored_files.register(conn, source, "jsonl")["id"]
        ingestor.add(conn, file_id, Batch.of(rows, end=1, last_line=len(rows)))
        run_id = ingestor.run_id(conn, "r")
    yield engine, run_id
    engine.dispose()


def test_buckets_are_bounded_and_cover_every_step(run) -> None:
    engine, run_id = run
    with engine.connect() as conn:
        series = read_series(conn, run_id, points=100)
    assert len(series.lo) == 100
    assert (series.first_step, series.last_step, series.steps) == (1, STEPS, STEPS)
    assert series.lo[0] == 1 and series.hi[-1] == STEPS
    assert all(hi + 1 == lo for hi, lo in zip(series.hi, series.lo[1:]))  # no step in two buckets, none lost


def test_extremes_survive_bucketing_and_ranks_merge_per_step(run) -> None:
    engine, run_id = run
    with engine.connect() as conn:
        series = read_series(conn, run_id, points=100)
    spike = next(i for i, (lo, hi) in enumerate(zip(series.lo, series.hi)) if lo <= SPIKE <= hi)
    mean_loss = sum(2.0 + r for r in range(RANKS)) / RANKS
    assert series.buckets["loss_max"][spike] == pytest.approx(mean_loss + 48.0)  # the spike, ranks averaged
    assert series.buckets["loss_min"][spike] == pytest.approx(mean_loss)
    assert set(series.buckets["loss_scale_min"]) == {2.0 ** 15}  # the lowest rank's scale for each step
    assert series.buckets["mem_allocated_bytes_max"][-1] == 10 * 2**30 + STEPS


def test_every_mark_is_kept_unbucketed(run) -> None:
    engine, run_id = run
    with engine.connect() as conn:
        series = read_series(conn, run_id, points=10)
    assert [s for s, _ in series.overflows] == sorted(OVERFLOWS)
    assert {scale for _, scale in series.overflows} == {2.0 ** 15}
    assert series.nonfinite == [77]
    assert [(o["rank"], o["step"], o["requested_bytes"]) for o in series.ooms] == [(2, STEPS + 1, 2 << 30)]


def test_per_rank_collective_time_shows_the_rank_that_waits_least(run) -> None:
    engine, run_id = run
    with engine.connect() as conn:
        series = read_series(conn, run_id)
    per_step = {r["rank"]: r["comm_s"] / r["steps"] for r in series.ranks}
    assert per_step == pytest.approx({r: 0.1 * (RANKS - r) for r in range(RANKS)})
    assert series.means["step_time_s"] == pytest.approx(1.3)  # slowest rank's time per step


def test_a_short_run_is_one_bucket_per_step(run) -> None:
    engine, run_id = run
    with engine.connect() as conn:
        series = read_series(conn, run_id, points=STEPS * 2)
    assert series.lo == series.hi == list(range(1, STEPS + 1))
