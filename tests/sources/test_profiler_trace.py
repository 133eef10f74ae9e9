"""Profiler traces: the exposed-time arithmetic on traces built from ops with known overlap, the same figures
checked against an independent sweep on real traces (HTA's NCCL traces, a real gloo ZeRO-3 CPU run), and
the reader's streaming: pieces of any size, gzip, a cut-short file, a broken one."""

from __future__ import annotations

import bisect
import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, diagnose_json
from tests.sources.trace_builder import event as _x
from tests.sources.trace_builder import write_trace as _write
from zerodoctor.sources.batches import detect_format, make_parser, read_batches
from zerodoctor.sources.chrome_trace import TraceFormatError, TraceReader

HTA = ROOT / "tests" / "fixtures" / "traces" / "hta"
ZD302 = ROOT / "tests" / "fixtures" / "rules" / "ZD302"
US = 1e-6


def _read(path: Path) -> tuple[list[dict], list[str]]:
    parser = make_parser("chrome-trace", run_id="t", path=path)
    batches = list(read_batches(path, parser))
    return [e for b in batches for e in b.events], [r.reason for b in batches for r in b.rejected]


def test_two_overlapping_ops_on_two_streams_give_known_exposed_and_idle_time(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000),
        _x("gpu_user_annotation", "ProfilerStep#1", 100, 1000, tid=7, pid=0),
        _x("kernel", "ampere_sgemm_128x64", 100, 200, tid=7, pid=0),  # streams 7 and 8 overlap: counted once
        _x("kernel", "elementwise_kernel", 250, 150, tid=8, pid=0),
        _x("kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 350, 300, tid=20, pid=0,
           **{"Collective name": "_allgather_base", "In msg nelems": 1000, "Out msg nelems": 2000, "dtype": "Float"}),
        _x("kernel", "ampere_sgemm_128x64", 600, 100, tid=7, pid=0),
        _x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 900, 50, tid=9, pid=0),
        _x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 700, 200),
        _x("user_annotation", "Optimizer.step#AdamW.step", 950, 100),
    ]
    (step,), rejected = _read(_write(tmp_path / "rank.json.gz", events, baseTimeNanoseconds=1_700_000_000_000_000_000))
    assert rejected == []
    assert step["rank"] == 3 and step["step"] == 1 and step["timeline"] == "device"
    assert step["t"] == pytest.approx(1_700_000_000 + 100 * US)
    # window: the GPU's ProfilerStep#1, [100, 1100); compute [100, 400) + [600, 700); comm [350, 650)
    expected = {"window_s": 1000, "compute_s": 400, "comm_s": 300, "exposed_comm_s": 200, "copy_s": 50,
                "idle_s": 350, "idle_dataloader_s": 200, "idle_optimizer_s": 100, "dataloader_s": 200,
                "optimizer_s": 50}
    assert {k: step[k] for k in expected} == pytest.approx({k: v * US for k, v in expected.items()})
    assert step["collectives"] == {"all_gather": pytest.approx({"count": 1, "total_s": 300 * US,
                                                                 "exposed_s": 200 * US, "bytes": 8000})}
    assert step["exposed_top"] == [pytest.approx({"op": "all_gather", "bytes": 8000, "dur_s": 300 * US,
                                                  "exposed_s": 200 * US, "at_s": 250 * US})]


def test_host_trace_counts_nested_aten_ops_once_and_a_collective_s_own_copies_as_communication(tmp_path: Path) -> None:
    events = [
        _x("Trace", "PyTorch Profiler (0)", 0, 400, tid="PyTorch Profiler", pid="Spans"),
        _x("cpu_op", "aten::linear", 0, 100), _x("cpu_op", "aten::mm", 10, 80),  # nested: 100 µs, not 180
        _x("cpu_op", "PreBackwardFunctionForModuleBackward", 100, 200),  # Python waiting: not compute
        _x("user_annotation", "gloo:all_gather", 150, 100, tid=2),  # gloo's worker thread
        _x("cpu_op", "aten::copy_", 160, 10, tid=2),  # the collective's own copy
        _x("cpu_op", "aten::add", 200, 20),  # the main thread computes during 20 µs of it
    ]
    (step,), _ = _read(_write(tmp_path / "rank-1.json", events))
    assert "step" not in step and step["timeline"] == "host"
    expected = {"window_s": 400, "compute_s": 120, "comm_s": 100, "exposed_comm_s": 80, "idle_s": 200,
                "host_gap_s": 100}  # no operator at all in [300, 400)
    assert {k: step[k] for k in expected} == pytest.approx({k: v * US for k, v in expected.items()})


def test_without_gpu_annotations_a_step_is_the_span_of_the_kernels_its_cpu_range_launched(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#3", 0, 500), _x("user_annotation", "ProfilerStep#4", 500, 500),
        _x("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=5),
        _x("cuda_runtime", "cudaLaunchKernel", 400, 5, correlation=6),
        _x("cuda_runtime", "cudaLaunchKernel", 700, 5, correlation=7),
        _x("kernel", "gemm", 600, 100, tid=7, pid=0, correlation=5),  # runs after its CPU step ended
        _x("kernel", "gemm", 800, 100, tid=7, pid=0, correlation=6),
        _x("kernel", "gemm", 950, 100, tid=7, pid=0, correlation=7),
    ]
    steps, _ = _read(_write(tmp_path / "t.json", events))
    assert [(s["step"], round(s["window_s"] / US), round(s["idle_s"] / US)) for s in steps] == [(3, 300, 100),
                                                                                               (4, 100, 0)]


def _sweep(ranges: dict[str, list[tuple[float, float]]], lo: float, hi: float) -> dict[str, float]:
    """An independent count of the same figures: walk the boundaries in time order with a counter per kind."""
    marks = sorted((t, d, kind) for kind, rs in ranges.items() for s, e in rs for t, d in ((s, 1), (e, -1)))
    count = dict.fromkeys(ranges, 0)
    out = {"compute": 0.0, "comm": 0.0, "exposed": 0.0, "idle": 0.0}
    last = lo
    for t, d, kind in [*marks, (hi, 0, "compute")]:
        t = min(max(t, lo), hi)
        span = t - last
        out["compute"] += span * (count["compute"] > 0)
        out["comm"] += span * (count["comm"] > 0)
        out["exposed"] += span * (count["comm"] > 0 and count["compute"] == 0)
        out["idle"] += span * (not any(count.values()))
        count[kind] += d
        last = t
    return out


def test_real_nccl_trace_figures_match_an_independent_sweep() -> None:
    """HTA's test trace of a 2-rank NCCL job (tests/fixtures/traces/hta, MIT): kernels on 2 streams."""
    path = HTA / "nccl_data.json.gz"
    steps, rejected = _read(path)
    assert rejected == [] and [s["step"] for s in steps] == [4, 5, 6]
    raw = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    kernels = [e for e in raw if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len({e["tid"] for e in kernels}) == 2  # compute and NCCL on streams of their own
    ranges = {"compute": [], "comm": [], "copy": []}
    for e in kernels:
        kind = "copy" if e["cat"] != "kernel" else "comm" if e["name"].startswith("nccl") else "compute"
        ranges[kind].append((e["ts"], e["ts"] + e["dur"]))
    # no GPU-side step marks in this trace: a step is the span of the kernels its CPU range launched
    cpu = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in raw
           if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
    launched = {e["args"]["correlation"]: e["ts"] for e in raw if e.get("cat") == "cuda_runtime"}
    windows = {}
    for number, (lo, hi) in cpu.items():
        mine = [e for e in kernels if lo <= launched.get(e["args"].get("correlation"), -1) < hi]
        windows[number] = (min(e["ts"] for e in mine), max(e["ts"] + e["dur"] for e in mine))
    for step in steps:
        want = _sweep(ranges, *windows[step["step"]])
        got = {"compute": step["compute_s"], "comm": step["comm_s"], "exposed": step["exposed_comm_s"],
               "idle": step["idle_s"]}
        assert got == pytest.approx({k: v * US for k, v in want.items()}, rel=1e-9, abs=1e-9)
        assert 0 < step["exposed_comm_s"] < step["comm_s"]  # partly hidden: the arithmetic is exercised


def test_real_cpu_trace_with_partial_overlap_matches_an_independent_sweep() -> None:
    """A real 2-rank gloo ZeRO-3 run on CPU with a 1000-element prefetch bucket (tests/fixtures/traces/
    cpu-zero3-prefetch-1000): some all-gathers run on gloo's thread while the main thread computes."""
    path = ROOT / "tests" / "fixtures" / "traces" / "cpu-zero3-prefetch-1000" / "rank-0.pt.trace.json.gz"
    steps, rejected = _read(path)
    assert rejected == [] and [s["step"] for s in steps] == [3, 4, 5]
    raw = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    comm = [e for e in raw if e.get("cat") == "user_annotation" and e["name"].startswith("gloo:")]

    def in_own_collective(op: dict) -> bool:
        middle = op["ts"] + op["dur"] / 2
        return any(c["tid"] == op["tid"] and c["ts"] <= middle < c["ts"] + c["dur"] for c in comm)

    ranges = {"comm": [(c["ts"], c["ts"] + c["dur"]) for c in comm],
              "compute": [(e["ts"], e["ts"] + e["dur"]) for e in raw
                          if e.get("cat") == "cpu_op" and e["name"].startswith("aten::") and not in_own_collective(e)]}
    windows = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in raw
               if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
    for step in steps:
        want = _sweep(ranges, *windows[step["step"]])
        got = {"compute": step["compute_s"], "comm": step["comm_s"], "exposed": step["exposed_comm_s"],
               "idle": step["idle_s"]}
        assert got == pytest.approx({k: v * US for k, v in want.items()}, rel=1e-9, abs=1e-9)
        gather = step["collectives"]["all_gather"]
        assert 0 < gather["exposed_s"] < 0.95 * gather["total_s"]  # really partly hidden


def test_real_gloo_zero3_trace_is_read_the_same_in_any_pieces_and_gzipped_or_not(tmp_path: Path) -> None:
    """A real 2-rank gloo ZeRO-3 run on CPU, profiled by ``zerodoctor run --profile 5-7``."""
    path = ZD302 / "fires.run" / "rank-0.pt.trace.json.gz"
    whole, rejected = _read(path)
    assert rejected == [] and [s["step"] for s in whole] == [5, 6, 7]
    assert all(s["timeline"] == "host" and s["collectives"]["all_gather"]["count"] > 0 for s in whole)
    plain = tmp_path / "rank-0.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    assert detect_format(plain) == detect_format(path) == "chrome-trace"
    assert [{**s, "file": path.name} for s in _read(plain)[0]] == whole
    parser = make_parser("chrome-trace", run_id="t", path=path)
    data = plain.read_bytes()
    for i in range(0, len(data), 7):  # pieces cut inside keys, numbers, strings and multi-byte characters
        parser.feed(data[i:i + 7])
    assert parser.finish() == whole


def test_kineto_s_layout_read_in_blocks_gives_what_any_other_layout_gives_event_by_event(tmp_path: Path) -> None:
    """The block decoding (Kineto's indented events) and the event-by-event reading agree on a real trace."""
    path = HTA / "nccl_data.json.gz"
    blocks, _ = _read(path)
    minified = tmp_path / "nccl_data.json"  # one line, no Kineto layout: read event by event
    minified.write_text(json.dumps(json.loads(gzip.decompress(path.read_bytes())), separators=(",", ":")))
    assert [{**s, "file": path.name} for s in _read(minified)[0]] == blocks
    seen: dict[str, list[tuple]] = {"kineto": [], "minified": []}
    for layout, data in (("kineto", gzip.decompress(path.read_bytes())), ("minified", minified.read_bytes())):
        reader = TraceReader(lambda e, out=seen[layout]: out.append(
            tuple(e.get(k) for k in ("ph", "cat", "name", "ts", "dur", "tid", "args"))))
        for i in range(0, len(data), 1 << 16):
            reader.feed(data[i:i + (1 << 16)])
        assert reader.finish()
    assert seen["kineto"] == seen["minified"] and len(seen["kineto"]) == 40573


def test_a_trace_cut_short_keeps_the_steps_it_holds_and_says_so(tmp_path: Path) -> None:
    data = gzip.decompress((HTA / "nccl_data.json.gz").read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) * 9 // 10])
    steps, rejected = _read(cut)
    assert steps and len(rejected) == 1 and "cut short" in rejected[0]


def test_broken_json_is_one_reason_naming_where_and_no_crash(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"schemaVersion": 1, "traceEvents": [\n{"ph": "X", "cat": "kernel", oops}\n]}')
    steps, rejected = _read(bad)
    assert steps == [] and len(rejected) == 1 and "invalid JSON at character" in rejected[0]
    with pytest.raises(TraceFormatError, match="not a JSON object or array"):
        TraceReader(lambda e: None).feed(b"hello")


def test_an_events_file_that_mentions_a_trace_is_still_an_events_file(tmp_path: Path) -> None:
    lines = tmp_path / "rank-0.jsonl"
    lines.write_text('{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "log", "message": "m", '
                     '"data": {"traceEvents": 1}}\n')
    assert detect_format(lines) == "jsonl"


def test_the_bare_array_format_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps([_x("cpu_op", "aten::mm", 0, 10), _x("cpu_op", "aten::mm", 20, 10)]))
    assert detect_format(path) == "chrome-trace"
    (step,), rejected = _read(path)
    assert rejected == [] and step["compute_s"] == pytest.approx(20 * US) and step["window_s"] == pytest.approx(30 * US)


def test_diagnose_reads_a_folder_of_traces_alone() -> None:
    """TensorBoard's plugin folder holds only traces: they are the run, whatever their names."""
    out = diagnose_json(ROOT / "tests" / "fixtures" / "rules" / "ZD802" / "fires.traces")
    assert [i["format"] for i in out["inputs"]] == ["chrome-trace", "chrome-trace"]
    assert sum(i["events"] for i in out["inputs"]) == 4 and not any(i["quarantined"] for i in out["inputs"])


def test_lanes_keep_each_row_of_a_rank_under_2000_ranges_bridging_the_narrowest_gaps_first(tmp_path: Path) -> None:
    """3 steps of 3,000 kernels apart by 16-60 µs (wider than 1/4000 of the window): each step keeps its share
    of 2,000 ranges per row, every kernel inside a drawn range, and no gap wider than ``lanes_merge_s`` bridged."""
    events, kernels, t = [], [], 0.0
    for number in (1, 2, 3):
        start = t
        for i in range(3000):
            kernels.append((t, t + 10))
            events.append(_x("kernel", "gemm", t, 10, tid=7, pid=0))
            t += 10 + 16 + (i * 37 % 45)
        events.append(_x("user_annotation", f"ProfilerStep#{number}", start, t - start))
    steps, _ = _read(_write(tmp_path / "many.json", events))
    assert [s["step"] for s in steps] == [1, 2, 3]
    drawn = []
    for step in steps:
        lo = step["lanes_from_s"]  # exact: this trace has no base time, so every step's t is the file's mtime
        compute = step["lanes"]["compute"]
        assert 600 < len(compute) // 2 <= 2000 // 3 and len(step["lanes"]["idle"]) // 2 <= 2000 // 3
        assert step["lanes_merge_s"] > 16 * US
        gaps = [b - a for a, b in zip(compute[1:-1:2], compute[2::2])]
        assert min(gaps) > step["lanes_merge_s"] - 1e-7  # only gaps up to the tolerance were bridged
        drawn += [(lo + a, lo + b) for a, b in zip(compute[0::2], compute[1::2])]
    starts = [a for a, _ in drawn]
    for s, e in kernels:  # every kernel is inside a drawn range
        a, b = drawn[bisect.bisect_right(starts, s * US + 1e-7) - 1]
        assert a - 1e-7 <= s * US and e * US <= b + 1e-7
