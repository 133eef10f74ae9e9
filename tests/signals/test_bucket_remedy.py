"""ZD303's bucket remedy (signals/comms.py): offered only where the run shows the bucket cutting its collective's
calls, never for a bucket already at ZD622's aim, and the patch is one DeepSpeed's own parser accepts.

Event lines built by hand in the probe's schema (docs/design.md, Events): a ZeRO-2 run of 8 ranks whose steps are
70% collectives, its reduce-scatters in calls of one bucket each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zerodoctor.config import deepspeed_validate
from zerodoctor.fixes.patch import merge_patch
from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose

RULES = rules_from()
STEP = {"step_time_s": 1.0, "comm_s": 0.7, "fwd_s": 0.1, "bwd_s": 0.8, "optim_s": 0.1}


def _config(bucket: int) -> dict[str, Any]:
    return {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "fp16": {"enabled": True}, "zero_optimization": {"stage": 2, "reduce_bucket_size": bucket}}


def _zd303(tmp_path: Path, *, params: int, bucket: int, call_bytes: int) -> Any:
    lines = [{"v": 1, "t": 1000.0, "run": "b", "rank": r, "kind": "run_start", "world_size": 8, "zero_stage": 2,
              "params": params, "precision": "fp16", "config": _config(bucket)} for r in range(8)]
    lines += [{"v": 1, "t": 1000.0 + i, "run": "b", "rank": r, "kind": "step", "step": i, **STEP}
              for i in range(1, 31) for r in range(8)]
    lines += [{"v": 1, "t": 1031.0, "run": "b", "rank": 0, "kind": "comm", "op": "reduce_scatter_tensor",
               "count": 3000, "bytes": 3000 * call_bytes, "total_s": 18.0}]
    path = tmp_path / "b.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return next(f for f in diagnose([path], rules=RULES).findings if f.rule == "ZD303")


def test_calls_that_fill_a_small_bucket_get_a_larger_one_that_deepspeed_accepts(tmp_path: Path) -> None:
    """1e9 parameters, reduce_bucket_size 200k elements (400 KB in fp16), calls of 400 KB: the bucket cuts them.
    ZD622's aim, 1% of the model, is 10M elements."""
    finding = _zd303(tmp_path, params=1_000_000_000, bucket=200_000, call_bytes=400_000)
    assert "calls of 390.62 KiB on average" in finding.message
    fix = next(f for f in finding.fixes if f.title.startswith("Raise reduce_bucket_size"))
    assert fix.title.startswith("Raise reduce_bucket_size from 200k elements to about 100 collectives a step: "
                                "reduce_scatter_tensor's calls fill their bucket")
    assert fix.config_patch == {"zero_optimization": {"reduce_bucket_size": 10_000_000}}
    if deepspeed_validate.available():
        verdict = deepspeed_validate.validate(merge_patch(_config(200_000), fix.config_patch), 8)
        assert verdict is not None and verdict.accepted, verdict


@pytest.mark.parametrize(("params", "call_bytes", "why"), [
    (10_000_000, 400_000, "the bucket is already at 1% of the model (100k elements)"),
    (1_000_000_000, 1_000, "calls of 1 KB are far below a 400 KB bucket: not its doing"),
])
def test_no_bucket_is_offered_where_the_run_does_not_show_it_cutting_the_calls(
        tmp_path: Path, params: int, call_bytes: int, why: str) -> None:
    finding = _zd303(tmp_path, params=params, bucket=200_000, call_bytes=call_bytes)
    assert finding.message.startswith("collectives take 70% of each step"), why
    assert not [f for f in finding.fixes if f.title.startswith("Raise")], why
