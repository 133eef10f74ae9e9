"""One run's bad values never cost another run a line, and never stop the daemon.

A poisoned run beside a healthy one, on real SQLite: through real ``watch --once``, ``status`` and
``diagnose`` subprocesses, each under a timeout (before, some of these configs looped forever in the
scaler forecast, and the others made every ingest pass raise and roll back: the healthy run got 0
lines), and through a watcher driven in process with a fold made to fail (the isolation itself: the
run is set aside once, with its reason, and every other run goes on).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.watch.conftest import stored_steps
from zerodoctor.rulebook import engine as rule_engine
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.signals import numerics
from zerodoctor.store.status import collect

HEALTHY_STEPS = 300
POISON_STEPS = 60
TIMEOUT_S = 120  # a pass over these few hundred lines takes ~2 s; the old code never ended

# name → (fp16 values of its run_start, the rule diagnose names it with; None: DeepSpeed runs it as is)
POISONS = {
    "hysteresis-0": ({"hysteresis": 0}, "ZD623"),
    "hysteresis-negative": ({"hysteresis": -1}, "ZD623"),
    "hysteresis-fractional": ({"hysteresis": 1.5}, "ZD623"),
    "hysteresis-float-huge": ({"hysteresis": 1e30}, "ZD623"),
    "hysteresis-int-huge": ({"hysteresis": 10 ** 30}, None),
    "hysteresis-nan": ({"hysteresis": math.nan}, "ZD623"),
    "min-scale-negative": ({"min_loss_scale": -1}, "ZD623"),
    "min-scale-nan": ({"min_loss_scale": math.nan}, "ZD623"),
    "window-0": ({"loss_scale_window": 0}, "ZD623"),
    "power-null": ({"initial_scale_power": None}, "ZD623"),
    "min-scale-string": ({"min_loss_scale": "1"}, "ZD601"),
}


def _write_run(runs: Path, name: str, fp16: dict, steps: list[int]) -> None:
    """A run_start with these fp16 values, then steps, every fourth one an overflow (the scaler replays them)."""
    run_dir = runs / name
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [{"v": 1, "t": 1000.0, "run": name, "rank": 0, "kind": "run_start", "world_size": 1, "precision": "fp16",
              "config": {"train_batch_size": 8, "fp16": {"enabled": True, **fp16}}}]
    lines += [{"v": 1, "t": 1001.0 + i, "run": name, "rank": 0, "kind": "step", "step": step, "loss": 1.0,
               "samples": 8, "micro_batches": 1, "overflow": i % 4 == 3, "loss_scale": 65536.0}
              for i, step in enumerate(steps)]
    with open(run_dir / "rank-0.jsonl", "a") as f:
        f.writelines(json.dumps(line, allow_nan=True) + "\n" for line in lines)


def _poisoned_runs(runs: Path) -> None:
    _write_run(runs, "healthy", {}, list(range(1, HEALTHY_STEPS + 1)))
    for name, (fp16, _) in POISONS.items():
        _write_run(runs, name, fp16, list(range(1, POISON_STEPS + 1)))
    # a step number at int64's very bottom: the store's first read window asked for the step below it
    _write_run(runs, "step-int64-min", {}, [-2 ** 63, *range(1, POISON_STEPS)])


def test_poisoned_runs_beside_a_healthy_one_cost_it_nothing_in_watch_status_and_diagnose(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _poisoned_runs(runs)
    watched = run_cli("watch", "--once", str(runs), timeout=TIMEOUT_S)
    assert watched.returncode == 0, watched.stderr
    assert "Traceback" not in watched.stderr and "set aside" not in watched.stderr, watched.stderr
    stored = stored_steps(runs / "zerodoctor.db")
    assert sorted(s for r, _, s in stored if r == "healthy") == list(range(1, HEALTHY_STEPS + 1))
    for name in [*POISONS, "step-int64-min"]:  # every run's lines stored once, poisoned or not
        assert len([s for r, _, s in stored if r == name]) == POISON_STEPS, name

    status = run_cli("status", "--format", "json", "--db", str(runs / "zerodoctor.db"), timeout=TIMEOUT_S)
    assert status.returncode == 0, status.stderr
    by_run = {r["run"]: r for r in json.loads(status.stdout)["runs"]}
    assert not [name for name, r in by_run.items() if "set_aside" in r]  # every run judged, none set aside
    for name, (_, rule) in POISONS.items():
        assert (rule is None) or rule in {f["rule"] for f in by_run[name]["findings"]}, (name, by_run[name])

    diagnosed = run_cli("diagnose", "--format", "json", *(str(runs / name) for name in POISONS), timeout=TIMEOUT_S)
    assert diagnosed.returncode == 1, diagnosed.stderr  # error findings, not exit 3 (a bug)
    found = {(f["run"], f["rule"]) for f in json.loads(diagnosed.stdout)["findings"]}
    assert {(name, rule) for name, (_, rule) in POISONS.items() if rule} <= found
    lowest = run_cli("diagnose", "--format", "json", "--fail-on", "never", str(runs / "step-int64-min"),
                     timeout=TIMEOUT_S)
    assert lowest.returncode == 0, lowest.stderr


@pytest.fixture
def poisoned_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The numerics fold fails on the run named "poison" (a bug, or a value nothing validated)."""
    fold_steps = numerics.Fold.add_steps

    def add_steps(self, block, view):
        if view.name == "poison":
            raise RuntimeError("boom in the fold")
        return fold_steps(self, block, view)

    monkeypatch.setattr(numerics.Fold, "add_steps", add_steps)


def test_a_run_whose_view_fails_is_set_aside_once_and_every_other_run_goes_on(
        tmp_path: Path, make_watcher, poisoned_fold, caplog: pytest.LogCaptureFixture) -> None:
    runs = tmp_path / "runs"
    _write_run(runs, "healthy", {"min_loss_scale": 0.5}, list(range(1, 101)))  # ZD605 fires on it
    _write_run(runs, "poison", {}, list(range(1, 101)))
    watcher = make_watcher()
    with caplog.at_level(logging.WARNING):
        for more in (range(101, 201), range(201, 301)):  # two passes (and a restart below): said once
            watcher.discover()
            while watcher.ingest():
                pass
            watcher.judge(force=True)
            _write_run(runs, "healthy", {}, list(more))
            _write_run(runs, "poison", {}, list(more))
    said = [r.getMessage() for r in caplog.records if "poison" in r.getMessage()]
    assert len(said) == 1 and "set aside" in said[0] and "RuntimeError: boom in the fold" in said[0], said
    stored = stored_steps(runs / "zerodoctor.db")
    assert sorted(s for r, _, s in stored if r == "healthy") == list(range(1, 201))
    assert sorted(s for r, _, s in stored if r == "poison") == list(range(1, 201))  # its rows are kept
    with watcher.engine.connect() as conn:
        status = {s.run: s for s in collect(conn)}
    assert status["poison"].set_aside == "RuntimeError: boom in the fold"
    assert status["healthy"].set_aside is None and "ZD605" in {f["rule"] for f in status["healthy"].findings}

    # A restart keeps it aside (said once more, not folded again) and still stores its lines.
    caplog.clear()
    again = make_watcher()
    with caplog.at_level(logging.WARNING):
        again.discover()
        while again.ingest():
            pass
        again.judge(force=True)
    assert [r.getMessage() for r in caplog.records if "poison" in r.getMessage()] == [
        "run poison stays set aside (not judged; its events are stored): RuntimeError: boom in the fold"]
    assert sorted(s for r, _, s in stored_steps(runs / "zerodoctor.db") if r == "poison") == list(range(1, 301))


def test_a_run_whose_judgement_fails_is_set_aside_and_shown_in_status(
        tmp_path: Path, make_watcher, monkeypatch: pytest.MonkeyPatch) -> None:
    evaluate = rule_engine.evaluate

    def failing(rules, values, name, ranks):
        if name == "poison":
            raise ZeroDivisionError("boom in a rule")
        return evaluate(rules, values, name, ranks)

    monkeypatch.setattr(rule_engine, "evaluate", failing)
    runs = tmp_path / "runs"
    _write_run(runs, "healthy", {"min_loss_scale": 0.5}, list(range(1, 51)))
    _write_run(runs, "poison", {}, list(range(1, 51)))
    make_watcher().once()
    shown = run_cli("status", "--db", str(runs / "zerodoctor.db"), timeout=TIMEOUT_S)
    assert shown.returncode == 0, shown.stderr
    assert "set aside: not judged, its view failed (ZeroDivisionError: boom in a rule)" in shown.stdout
    assert "ZD605" in shown.stdout


def test_diagnose_reports_a_run_set_aside_beside_the_findings_of_the_others(tmp_path: Path, poisoned_fold,
                                                                            rules) -> None:
    runs = tmp_path / "runs"
    _write_run(runs, "healthy", {"min_loss_scale": 0.5}, list(range(1, 101)))
    _write_run(runs, "poison", {}, list(range(1, 101)))
    report = diagnose([runs / "healthy", runs / "poison"], rules=rules)
    assert {(f.run, f.rule) for f in report.findings} >= {("healthy", "ZD605")}
    assert report.set_aside == {"poison": "RuntimeError: boom in the fold"}
    assert sum(i.events for i in report.inputs) == 2 * 101
