"""ZD201 says what this run's scaler does at min_loss_scale, never an abort the run's optimizer cannot make.

DeepSpeed has two dynamic scalers. ZeRO's ``DynamicLossScaler.update_scale`` (runtime/fp16/loss_scaler.py, stages
1-3) raises "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run." there since 0.6.5
(``raise_error_at_min_scale``, on by default; absent in 0.6.4). ``FP16_Optimizer._update_scale`` and
``FP16_UnfusedOptimizer._update_scale`` (fused_optimizer.py, unfused_optimizer.py: stage 0) set ``max(cur_scale /
scale_factor, min_loss_scale)`` in every version from 0.3 to 0.19 and never raise, printing ``"\\nGrad overflow on
iteration {cur_iter}"`` and ``"Reducing dynamic loss scale from {prev_scale} to {cur_scale}"``; ZeRO's prints
``"[deepspeed] OVERFLOW! Rank {} Skipping step. Attempted loss scale: {}, reducing to {}"`` (``[deepscale]`` up to
0.6.0). The log lines below are built from those format strings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from zerodoctor.pipeline import rules_from
from zerodoctor.pipeline.diagnose import diagnose

FIXTURE = ROOT / "tests" / "fixtures" / "rules" / "ZD201" / "fires.jsonl"
HALVINGS = [f"{65536.0 / 2 ** i:g}" for i in range(6)]


@pytest.fixture(scope="module")
def rules():
    return rules_from()


def _collapse(tmp_path: Path, rules, text: str, name: str = "console.log", fmt: str = "text") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    found = {f.rule: f.message for f in diagnose([path], rules=rules, input_format=fmt).findings}
    assert "ZD201" in found, found
    return found["ZD201"]


def test_fp16_optimizers_lines_say_it_skips_on_at_the_floor(tmp_path: Path, rules) -> None:
    lines = []
    for i, (tried, reduced) in enumerate(zip(HALVINGS, HALVINGS[1:])):
        lines += ["", f"Grad overflow on iteration {1203 + i}",
                  f"Reducing dynamic loss scale from {tried} to {reduced}"]
    message = _collapse(tmp_path, rules, "\n".join(lines) + "\n")
    assert "does not abort there but skips every step that still overflows" in message, message


def test_zeros_lines_claim_neither_without_the_config(tmp_path: Path, rules) -> None:
    lines = [f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {tried}, reducing to {reduced}"
             for tried, reduced in zip(HALVINGS, HALVINGS[1:])]
    lines = [f"[2024-03-01 10:{i:02d}:00,100] [INFO] [loss_scaler.py:183:update_scale] {line}"
             for i, line in enumerate(lines)]
    message = _collapse(tmp_path, rules, "\n".join(["step=1200, skipped=0, lr=[0.0001]", *lines]) + "\n")
    assert "does not abort" not in message, message


def _fixture_with(tmp_path: Path, rules, **start: object) -> str:
    events = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    for e in events:
        if e["kind"] == "run_start":
            for key, value in start.items():
                if key == "zero":
                    e["config"] = {**e["config"], "zero_optimization": {"stage": value}}
                else:
                    e[key] = value
    return _collapse(tmp_path, rules, "".join(json.dumps(e) + "\n" for e in events), "rank-0.jsonl", "jsonl")


def test_a_stage_0_run_is_never_told_it_aborts(tmp_path: Path, rules) -> None:
    """The fixture's config has no zero_optimization: stage 0, FP16_Optimizer. Before: "the run aborts after 1 more
    overflow in a row"."""
    message = _fixture_with(tmp_path, rules)
    assert "abort" in message and "aborts after" not in message, message
    assert "does not abort there" in message


def test_a_zero_2_run_aborts_at_the_minimum(tmp_path: Path, rules) -> None:
    message = _fixture_with(tmp_path, rules, zero=2, versions={"deepspeed": "0.19.8"})
    assert "the run aborts after 1 more overflow in a row" in message, message


def test_zero_before_0_6_5_skips_on_too(tmp_path: Path, rules) -> None:
    message = _fixture_with(tmp_path, rules, zero=2, versions={"deepspeed": "0.6.4"})
    assert "does not abort there" in message, message


def test_a_real_stage_0_run_pinned_at_the_floor_skips_on_and_never_aborts(rules) -> None:
    """A real 2-rank run (DeepSpeed 0.19.8, torch 2.13, fp16 through the test-only shim, no zero_optimization:
    FP16_Optimizer): ``zerodoctor run -- torchrun --nproc_per_node 2 samples/train.py --config ds_config.json --steps
    40 --loss-mult 1e9 --loss-mult-from 20 --cpu-fp16-shim``. From step 21 every step overflows; the scale halves from
    256 to 1 and stays there, and the run ends its 40 steps with exit code 0, 20 of them skipped: no abort."""
    report = diagnose([ROOT / "tests" / "fixtures" / "runs" / "fp16-stage0-floor"], rules=rules)
    (collapse,) = [f for f in report.findings if f.rule == "ZD201"]
    assert "pinned at its floor" in collapse.message and "abort" not in collapse.message, collapse.message
