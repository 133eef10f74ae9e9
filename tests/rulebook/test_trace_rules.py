"""Rules on profiler traces: ZD301 weighs the exposed all-gather time a trace shows, not the total; a run
without a trace is told how to get one, a run with one is not."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import ROOT, diagnose_json
from tests.sources.trace_builder import event, write_trace

ZD301_FIRES = ROOT / "tests" / "fixtures" / "rules" / "ZD301" / "fires.jsonl"
NCCL = {"Collective name": "_allgather_base", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 21, "dtype": "BFloat16"}


def _zd301_with_trace(tmp_path: Path, compute_from_us: float) -> dict:
    """ZD301's firing fixture (all-gathers 50% of 60% of each step, by the probe's clock) with a trace of the
    same run: in each of two steps an all-gather kernel over [0, 500) µs and compute from ``compute_from_us``."""
    run = tmp_path / "fixture"  # the run the fixture's lines name
    run.mkdir()
    shutil.copy(ZD301_FIRES, run / "rank-0.jsonl")
    events = []
    for n, base in ((1, 0), (2, 1000)):
        events += [event("gpu_user_annotation", f"ProfilerStep#{n}", base, 1000, tid=7, pid=0),
                   event("kernel", "ncclDevKernel_AllGather_RING_LL", base, 500, tid=20, pid=0, **NCCL),
                   event("kernel", "sm90_xmma_gemm_bf16", base + compute_from_us, 1000 - compute_from_us, tid=7, pid=0)]
    write_trace(run / "rank-0.pt.trace.json.gz", events)
    return diagnose_json(run)


def test_zd301_is_silent_when_the_trace_shows_the_all_gathers_hidden(tmp_path: Path) -> None:
    out = _zd301_with_trace(tmp_path, compute_from_us=0)  # compute covers the whole gather: nothing exposed
    assert "ZD301" not in {f["rule"] for f in out["findings"]}
    assert "ZD301" not in {u["rule"] for u in out["unevaluated"]}


def test_zd301_fires_on_exposed_all_gathers_and_says_what_the_trace_shows(tmp_path: Path) -> None:
    out = _zd301_with_trace(tmp_path, compute_from_us=500)  # the gather runs alone: 50% of the step exposed
    (finding,) = [f for f in out["findings"] if f["rule"] == "ZD301"]
    assert "all-gathers leave 50% of each profiled step with no compute beside them" in finding["message"]
    assert finding["evidence"]["comm.allgather_step_fraction"] == 0.5


def test_a_run_without_a_trace_is_told_how_to_profile_and_one_with_a_trace_is_not() -> None:
    without = diagnose_json(ROOT / "samples" / "zero3-30m")
    (zd302,) = [u for u in without["unevaluated"] if u["rule"] == "ZD302"]
    assert "zerodoctor run --profile" in zd302["hint"]
    traces_only = diagnose_json(ROOT / "tests" / "fixtures" / "rules" / "ZD802" / "fires.traces")
    (zd302,) = [u for u in traces_only["unevaluated"] if u["rule"] == "ZD302"]
    assert "run.zero_stage" in zd302["missing"] and "--profile" not in (zd302.get("hint") or "")
