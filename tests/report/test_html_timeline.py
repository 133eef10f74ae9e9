"""The profiled window's timeline as the HTML page carries it: ranges and idle gaps from a trace built of ops
with known overlap, read by the real CLI (``diagnose --format html``), taken back out of the page's data."""

from __future__ import annotations

import json
import re
from itertools import accumulate
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.sources.trace_builder import event as _x
from tests.sources.trace_builder import write_trace

BASE_NS = 1_700_000_000_000_000_000
US = 1e-6


def _page_timeline(directory: Path, tmp_path: Path) -> dict:
    page = tmp_path / "page.html"
    proc = run_cli("diagnose", str(directory), "--format", "html", "-o", str(page), "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    data = re.search(r'<script type="application/json" id="zd-data">(.*?)</script>', page.read_text(), re.S)
    (run,) = json.loads(data.group(1))["runs"]
    return next(spec for spec in run["plots"] if spec["id"] == "timeline")


def _seconds(spec: dict, row: dict) -> list[float]:
    """A row's ranges as ``assets/plots.js`` reads them: whole ticks, each from the one before."""
    return [t * spec["tick"] for t in accumulate(row["ranges"])]


def _flat(pairs_us: list[tuple[float, float]], shift_us: float = 0) -> list[float]:
    """Ranges in µs as the page carries them: flat ``[start, end, …]`` in seconds."""
    return [(t + shift_us) * US for pair in pairs_us for t in pair]


def test_two_overlapping_ops_on_two_streams_give_the_page_its_ranges_and_idle_gaps(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000),
        _x("gpu_user_annotation", "ProfilerStep#1", 100, 1000, tid=7, pid=0),  # the window: [100, 1100) µs
        _x("kernel", "ampere_sgemm_128x64", 100, 200, tid=7, pid=0),  # streams 7 and 8 overlap: one range
        _x("kernel", "elementwise_kernel", 250, 150, tid=8, pid=0),
        _x("kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 350, 300, tid=20, pid=0),
        _x("kernel", "ampere_sgemm_128x64", 600, 100, tid=7, pid=0),
        _x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 900, 50, tid=9, pid=0),
    ]
    run = tmp_path / "run"
    run.mkdir()
    for rank, late_us in ((0, 0), (1, 1000)):  # rank 1's clock reads its window 1 ms later
        write_trace(run / f"rank-{rank}.pt.trace.json.gz", events, distributedInfo={"rank": rank},
                    baseTimeNanoseconds=BASE_NS + late_us * 1000)
    spec = _page_timeline(run, tmp_path)

    kinds = ["compute", "communication", "memcpy", "idle"]
    assert [row["label"] for row in spec["rows"]] == [f"rank {r} · {k}" for r in (0, 1) for k in kinds]
    assert spec["title"].startswith("Profiled window per rank, GPU streams")
    # seconds from rank 0's window start; the idle gaps are where no stream runs anything
    want = {"compute": [(0, 300), (500, 600)], "communication": [(250, 550)], "memcpy": [(800, 850)],
            "idle": [(600, 800), (850, 1000)]}
    for row in spec["rows"]:
        shift = 1000 if row["label"].startswith("rank 1") else 0
        expected = _flat(want[row["label"].split(" · ")[1]], shift)
        assert _seconds(spec, row) == pytest.approx(expected, abs=5e-7), row["label"]  # unix t: 0.24 µs apart
    assert spec["xmax"] == pytest.approx(2000 * US, abs=5e-7)
    assert [(m["row"], m["rows"], m["label"]) for m in spec["steps"]] == [(0, 4, "step 1"), (4, 4, "step 1")]


def test_a_cpu_only_trace_has_host_rows_and_no_memcpy_row(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#2", 0, 400),
        _x("cpu_op", "aten::mm", 0, 100),
        _x("user_annotation", "gloo:all_gather", 150, 100, tid=2),
        _x("cpu_op", "aten::add", 200, 20),
    ]
    run = tmp_path / "run"
    run.mkdir()
    write_trace(run / "rank-0.pt.trace.json.gz", events, distributedInfo={"rank": 0}, baseTimeNanoseconds=BASE_NS)
    spec = _page_timeline(run, tmp_path)
    assert spec["title"].startswith("Profiled window per rank, host threads (a CPU-only trace)")
    want = {"rank 0 · compute": [(0, 100), (200, 220)], "rank 0 · communication": [(150, 250)],
            "rank 0 · idle": [(100, 150), (250, 400)]}
    assert [row["label"] for row in spec["rows"]] == list(want)
    for row in spec["rows"]:
        assert _seconds(spec, row) == pytest.approx(_flat(want[row["label"]]), abs=5e-7), row["label"]


def test_a_trace_event_stored_before_lanes_existed_still_loads_and_draws_no_timeline(tmp_path: Path) -> None:
    """docs/events.md's ``trace`` example as it stood before ``lanes`` (step 5 of HTA's real NCCL trace)."""
    old = ('{"v": 1, "t": 1716423322.6449, "run": "nccl-ddp", "rank": 0, "kind": "trace", "step": 5, "timeline": '
           '"device", "file": "nccl_data.json.gz", "window_s": 0.213533, "compute_s": 0.0384294, "comm_s": 0.0123, '
           '"exposed_comm_s": 0.0105396, "copy_s": 0.000867436, "idle_s": 0.163804}')
    events = tmp_path / "rank-0.jsonl"
    events.write_text(old + "\n")
    page = tmp_path / "page.html"
    proc = run_cli("diagnose", str(events), "--format", "html", "-o", str(page), "--fail-on", "never")
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "ZD802" in text  # the trace was read: its idle share fires the rule
    assert '-timeline"' not in text and "Profiled window per rank" not in text
