"""Watch says a finding again when its numbers move far from what it said (and the notifiers deliver it
again), never for a drift; it says a run when first seen and when every rank has ended or crashed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tests.conftest import run_cli
from zerodoctor.store.db import open_engine
from zerodoctor.watch import changes
from zerodoctor.watch.daemon import Watcher

LEAK = 16 * 2**20
BASE = 2 * 2**30


class Inbox:
    name = "inbox"

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send(self, finding: dict) -> None:
        self.sent.append(finding)


def _write(run_dir: Path, lines: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        with open(run_dir / f"rank-{rank}.jsonl", "a") as f:
            f.writelines(json.dumps({"v": 1, "run": "c", "rank": rank, **line}) + "\n"
                         for line in lines if line.get("rank", rank) == rank)


def _start() -> list[dict]:
    return [{"t": 1000.0, "kind": "run_start", "world_size": 2, "zero_stage": 2, "precision": "bf16", "host": "node-a",
             "host_memory_bytes": 64 * 2**30}]


def _climb(steps: range, per_step: int, at: int = 0) -> list[dict]:
    """Heartbeats whose RSS grows ``per_step`` a step, from ``at`` bytes above BASE at the first step."""
    return [line for step in steps for line in (
        {"t": 1000.0 + step, "kind": "step", "step": step, "step_time_s": 1.0},
        {"t": 1000.5 + step, "kind": "heartbeat", "phase": "user", "since_t": 1000.0 + step, "last_step": step,
         "rss_bytes": BASE + at + (step - steps[0]) * per_step})]


def _judge(watcher: Watcher) -> None:
    watcher.discover()
    while watcher.ingest():
        pass
    watcher.judge(force=True)


def test_a_forecast_that_moves_by_half_or_more_is_said_again_and_delivered_again_a_drift_is_not(tmp_path, rules):
    runs = tmp_path / "runs"
    runs.mkdir()
    said: list[tuple[str, str | None]] = []
    inbox = Inbox()
    watcher = Watcher(open_engine(runs / "zerodoctor.db"), [runs], rules,
                      lambda finding, config, change: said.append((finding.rule, change)), notifiers=[inbox])
    try:
        _write(runs / "c", _start() + _climb(range(1, 41), LEAK))
        _judge(watcher)
        assert said == [("ZD404", None)]
        _write(runs / "c", _climb(range(41, 45), LEAK, at=40 * LEAK))  # the same climb, a few steps on
        _judge(watcher)
        assert said == [("ZD404", None)]  # the forecast drifted by a few steps: nothing new to say
        watcher.notify()
        watcher.deliveries.join(timeout=10)
        assert len(inbox.sent) == 1

        _write(runs / "c", _climb(range(45, 200), 8 * LEAK, at=44 * LEAK))  # the leak grows 8x
        _judge(watcher)
        assert [rule for rule, _ in said] == ["ZD404", "ZD404"]
        change = said[1][1]
        assert change is not None and "32.00 MiB" in change, change  # what it said before: 2 ranks x 16 MiB a step
        watcher.notify()
        watcher.deliveries.join(timeout=10)
        assert len(inbox.sent) == 2 and inbox.sent[1]["evidence"]["creep.host_bytes_per_step"] > 4 * 2 * LEAK
    finally:
        watcher.close()
        watcher.engine.dispose()

    restarted: list = []
    again = Watcher(open_engine(runs / "zerodoctor.db"), [runs], rules,
                    lambda finding, config, change: restarted.append(finding.rule))
    try:
        _write(runs / "c", _climb(range(200, 204), 8 * LEAK, at=44 * LEAK + 155 * 8 * LEAK))
        _judge(again)
        assert restarted == []  # what was said is kept in the store: a restart does not repeat it
    finally:
        again.close()
        again.engine.dispose()


def test_a_run_is_said_when_first_seen_and_when_its_ranks_have_ended(tmp_path, rules, caplog):
    runs = tmp_path / "runs"
    runs.mkdir()
    watcher = Watcher(open_engine(runs / "zerodoctor.db"), [runs], rules, lambda *_: None)
    steps = [{"t": 1000.0 + s, "kind": "step", "step": s, "step_time_s": 1.0} for s in range(1, 41)]
    try:
        with caplog.at_level(logging.INFO, logger="zerodoctor.watch"):
            _write(runs / "c", _start() + steps[:20])
            _judge(watcher)
            _write(runs / "c", steps[20:])
            _judge(watcher)
            _write(runs / "c", [{"t": 1041.0, "kind": "run_end", "rank": 0, "exit_code": 0}])
            _judge(watcher)
            _write(runs / "c", [{"t": 1042.0, "kind": "run_end", "rank": 1, "exit_code": 1}])
            _judge(watcher)
    finally:
        watcher.close()
        watcher.engine.dispose()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run c:")]
    assert lines == ["run c: running at step 20 — 2 ranks, ZeRO-2, bf16",
                     "run c: crashed (exit code 1) at step 40 — 2 ranks, ZeRO-2, bf16"]


def test_severity_and_numbers_decide_whether_a_finding_is_said_again():
    said = changes.said_of({"severity": "warning", "evidence": {"x.rate": 10.0, "x.flag": True, "x.n": None}})
    assert said == {"severity": "warning", "evidence": {"x.rate": 10.0}}
    assert changes.change(said, {"severity": "error", "evidence": {"x.rate": 10.0}}) == "was WARNING"
    assert changes.change(said, {"severity": "warning", "evidence": {"x.rate": 19.0}}) is None
    assert changes.change(said, {"severity": "warning", "evidence": {"x.rate": 5.0}}) == "was x.rate=10"
    assert changes.change(said, {"severity": "warning", "evidence": {"x.rate": -1.0}}) is not None
    assert changes.change(said, {"severity": "warning", "evidence": {}}) is None  # a number gone says nothing
    assert changes.change(None, {"severity": "warning", "evidence": {"x.rate": 99.0}}) is None


def test_an_acknowledged_finding_is_not_said_again_and_status_marks_it(tmp_path, rules):
    runs = tmp_path / "runs"
    runs.mkdir()
    said: list[tuple[str, str | None]] = []
    watcher = Watcher(open_engine(runs / "zerodoctor.db"), [runs], rules,
                      lambda finding, config, change: said.append((finding.rule, change)))
    try:
        _write(runs / "c", _start() + _climb(range(1, 41), LEAK))
        _judge(watcher)
        assert said == [("ZD404", None)]
        db = str(runs / "zerodoctor.db")
        assert run_cli("ack", "c", "ZD999", "--db", db).returncode == 2  # no such finding: nothing acknowledged
        done = run_cli("ack", "c", "zd404", "--db", db)
        assert done.returncode == 0 and "acknowledged ZD404 of run c" in done.stdout, done.stderr
        _write(runs / "c", _climb(range(41, 200), 8 * LEAK, at=40 * LEAK))  # the leak grows 8x
        _judge(watcher)
        assert said == [("ZD404", None)]  # before the ack this was said again (the test above)
    finally:
        watcher.close()
        watcher.engine.dispose()
    shown = run_cli("status", "--db", db)
    assert "ZD404" in shown.stdout and "(acknowledged)" in shown.stdout, shown.stdout
    report = json.loads(run_cli("status", "--db", db, "--format", "json").stdout)
    assert report["runs"][0]["findings"][0]["acknowledged"] is True


def test_a_run_directory_of_thousands_of_ranks_is_one_short_tailing_line(tmp_path, rules, caplog):
    run_dir = tmp_path / "runs" / "big"
    run_dir.mkdir(parents=True)
    for rank in range(1200):
        (run_dir / f"rank-{rank}.jsonl").write_text("")
    watcher = Watcher(open_engine(tmp_path / "zerodoctor.db"), [tmp_path / "runs"], rules, lambda *_: None)
    try:
        with caplog.at_level(logging.INFO, logger="zerodoctor.watch"):
            watcher.discover()
    finally:
        watcher.close()
        watcher.engine.dispose()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tailing")]
    assert said == [f"tailing {run_dir}: 1,200 files: rank-0.jsonl, rank-1.jsonl, rank-2.jsonl … rank-1199.jsonl"]
