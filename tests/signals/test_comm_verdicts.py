"""comm.step_verdict (signals/comms.py) on event lines: ZD303 words collectives that dominate the step, and
leaves the shares others explain to them (ZD301's stage-3 all-gathers, a straggler's wait, the CPU accelerator's
loopback copies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.signals.test_offload_verdict import _findings, _offload

STEP = {"step_time_s": 0.2, "fwd_s": 0.04, "bwd_s": 0.14, "optim_s": 0.02, "comm_s": 0.14}


def _comm(op: str, seconds: float, size: int = 3_000_000_000) -> list[dict[str, Any]]:
    return [{"v": 1, "t": 1100.0, "run": "o", "rank": r, "kind": "comm", "op": op, "step": 30, "count": 30,
             "bytes": size, "total_s": seconds} for r in (0, 1)]


def test_dominant_collectives_are_named_with_their_bus_bandwidth(tmp_path: Path) -> None:
    found, _ = _findings(tmp_path, _offload(2), STEP, _comm("all_reduce", 3.0))
    # 3 GB in 3 s a rank: algbw 1 GB/s, all-reduce busbw × 2(n-1)/n = 1 GB/s at n = 2
    assert found["ZD303"].message == ("collectives take 70% of each step, all_reduce 100% of their time at 1 GB/s of "
                                      "bus bandwidth")
    assert [f.config_patch for f in found["ZD303"].fixes] == [{"zero_optimization": {"overlap_comm": True}}]


def test_small_calls_are_called_latency_bound(tmp_path: Path) -> None:
    found, _ = _findings(tmp_path, _offload(2), STEP, _comm("all_reduce", 3.0, size=30 * 20_000))
    assert ("all_reduce 100% of their time in calls of 19.53 KiB on average: calls that small pay their latency, "
            "not their bytes") in found["ZD303"].message


def test_without_per_op_timings_the_comms_logger_is_named(tmp_path: Path) -> None:
    found, _ = _findings(tmp_path, _offload(2, overlap_comm=True), STEP)
    assert "DeepSpeed's comms logger" in found["ZD303"].message and not found["ZD303"].fixes


def test_shares_other_rules_explain_are_left_to_them(tmp_path: Path) -> None:
    found, unevaluated = _findings(tmp_path, _offload(3), STEP, _comm("all_gather_into_tensor", 3.0))
    assert "ZD301" in found and "ZD303" not in found and "ZD303" not in unevaluated
    found, unevaluated = _findings(tmp_path, {**_offload(2), "env": {"DS_ACCELERATOR": "cpu"}}, STEP,
                                   _comm("all_reduce", 3.0))
    assert "ZD303" not in found and "ZD303" not in unevaluated
    found, unevaluated = _findings(tmp_path, _offload(2), {**STEP, "comm_s": 0.05}, _comm("all_reduce", 1.0))
    assert "ZD303" not in found and "ZD303" not in unevaluated
