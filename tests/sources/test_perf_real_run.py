"""A real 2-rank CPU DeepSpeed run's performance output, read three ways that must agree.

``tests/fixtures/perf/zero2-cpu/`` and ``zero3-cpu/`` are what ``tests/fixtures/perf/record.py`` wrote (DeepSpeed
0.19.8, torch 2.13 CPU, gloo, ZeRO-2 and ZeRO-3, two micro-batches a step, ``wall_clock_breakdown``, the comms logger
and ``csv_monitor`` on): its console (the timers of every step, the comms logger's summary) and DeepSpeed
Monitor's CSV files. The console's timers print ms with two decimals, the CSV files the same timers unrounded:
each step's phase split from the one must be the other's.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from tests.conftest import parsed
from tests.sources.test_perf_families import events_of
from zerodoctor.sources.batches import make_parser, read_batches, run_files, run_id_for

PERF = Path(__file__).resolve().parents[1] / "fixtures" / "perf"
RUN = PERF / "zero2-cpu"
PHASES = ("fwd_s", "bwd_s", "optim_s", "comm_s")


def _csv_steps(run: Path) -> dict[int, dict]:
    ((path, fmt),) = run_files(run / "csv")
    assert fmt == "csv-monitor" and run_id_for(path) == run.name.removesuffix("-cpu")
    batches = list(read_batches(path, make_parser(fmt, run_id_for(path), path=path)))
    return {e["step"]: e for e in parsed(batches) if e["kind"] == "step"}


@pytest.mark.parametrize("run", [PERF / "zero2-cpu", PERF / "zero3-cpu"], ids=lambda p: p.name)
def test_the_console_and_the_monitor_agree_step_by_step(run: Path) -> None:
    """ZeRO-3's optimizer line (optimizer_step alone) and its init_optimizer_state line add no step."""
    console = {e["step"]: e for e in events_of(run / "console.log") if e["kind"] == "step"}
    monitor = _csv_steps(run)
    assert len(monitor) == 6 and sorted(monitor) == list(range(1, 7))
    assert sorted(console) == sorted(monitor)
    # the console's comm_s adds ZeRO's optimizer all-gather (its own line, before the step's last), which the
    # monitor does not write
    allgathers = [float(ms) / 1000 for ms in re.findall(r"optimizer_allgather: ([\d.]+)",
                                                         (run / "console.log").read_text())] or [0.0] * 6
    assert len(allgathers) == 6
    for step, row in monitor.items():
        for field in PHASES:
            extra = allgathers[step - 1] if field == "comm_s" else 0.0
            assert math.isclose(console[step][field], row[field] + extra, abs_tol=2e-5), (step, field)
        assert row["step_time_s"] == sum(row[k] for k in ("fwd_s", "bwd_s", "optim_s"))
        assert row["lr"] == 0.001


def test_the_comms_logger_summary_becomes_comm_events() -> None:
    """log_summary's table: one event per (op, size) row, "256.0 B" and "0B" sizes included. DeepSpeed 0.19.8
    prints sums of running totals (``dsblocks.CommsTable``): the all-reduce's 18 calls "took" 1,741.6 ms of a run
    whose steps took some 400 ms; read back, 2 Σ / (N + 1), they took 183 ms, and the timers' ``bwd_allreduce``
    (the same all-reduces, timed by the engine) sum to 180.4 ms over the 6 steps."""
    comm = [e for e in events_of(RUN / "console.log") if e["kind"] == "comm"]
    per_op: dict[str, list[int]] = {}
    for e in comm:
        totals = per_op.setdefault(e["op"], [0, 0])
        totals[0] += e["count"]
        totals[1] += e["bytes"]
    assert per_op == {"broadcast": [4, 2 * 256 + 2 * 16 * 1024], "all_reduce": [18, 6 * 4 + 12 * int(32.5 * 1024)],
                      "all_gather_into_tensor": [6, 6 * int(16.25 * 1024)], "log_summary_barrier": [1, 0]}
    all_reduce = sum(e["total_s"] for e in comm if e["op"] == "all_reduce")
    assert all_reduce == pytest.approx(2 * (657.21 + 1084.39) / 19 / 1000)
    timed = sum(map(float, re.findall(r"\| bwd_allreduce: ([\d.]+)", (RUN / "console.log").read_text())))
    assert timed == pytest.approx(180.41) and all_reduce == pytest.approx(timed / 1000, rel=0.05)
