"""The fp16 scaler's verdict on two held-out shapes: a scale pinned at its floor that still overflows, and an
overflow streak long after calibration.

The logs are DeepSpeed's own format strings, not pastes: FP16_Optimizer._update_scale (runtime/fp16/
fused_optimizer.py, verbose, 0.1.0-0.19) prints ``"\\nGrad overflow on iteration {cur_iter}"`` and ``"Reducing
dynamic loss scale from {prev_scale} to {cur_scale}"``, the new scale ``max(cur_scale / scale_factor,
min_loss_scale)``: at min_loss_scale 1 it says "from 1 to 1" and never raises.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import console_log, findings_by_rule
from zerodoctor.pipeline import rules_from
from zerodoctor.sources import deepspeed


def _overflows(first_iteration: int, scales: list[str]) -> list[str]:
    lines: list[str] = []
    for i, (tried, reduced) in enumerate(zip(scales, scales[1:])):
        lines += ["", f"Grad overflow on iteration {first_iteration + i}",
                  f"Reducing dynamic loss scale from {tried} to {reduced}"]
    return lines


@pytest.fixture(scope="module")
def rules():
    return rules_from()


def _findings(tmp_path: Path, rules, lines: list[str]) -> dict[str, str]:
    return {rule: f.message for rule, f in findings_by_rule(console_log(tmp_path, lines), rules).items()}


def test_a_scale_pinned_at_1_that_still_overflows_is_a_collapse_at_the_floor(tmp_path: Path, rules) -> None:
    """Before: "collapsing toward min_loss_scale: the run aborts after 1 more overflow", of a scaler that has
    reached its floor and does not abort."""
    found = _findings(tmp_path, rules, _overflows(1203, ["4.0", "2.0", "1", "1", "1", "1"]))
    assert "pinned at its floor of 1" in found.get("ZD201", ""), found
    assert "aborts" not in found["ZD201"]


def test_an_overflow_streak_past_step_1000_is_a_collapse_not_calibration(tmp_path: Path, rules) -> None:
    """Five halvings in consecutive steps from 1203 on, from the default initial scale 2^16: before, "5
    overflows while the dynamic loss scale calibrated" (ZD202, info), as if the run had just begun."""
    scales = [f"{65536.0 / 2 ** i}" for i in range(6)]
    found = _findings(tmp_path, rules, _overflows(1203, scales))
    assert "ZD202" not in found, found
    assert "collapsing" in found.get("ZD201", ""), found


def test_the_same_halvings_at_the_start_are_calibration(tmp_path: Path, rules) -> None:
    """The streak's twin from iteration 0: the scaler finding its scale, which stays calibration."""
    scales = [f"{65536.0 / 2 ** i}" for i in range(6)]
    found = _findings(tmp_path, rules, _overflows(0, scales))
    assert "ZD201" not in found and "ZD202" in found, found


# A real paste, not a format string: the user's ZeRO-2 run as DeepSpeed#1593's description quotes it, the
# "[deepscale] " tag of stage2.py's line left out.
PR_1593 = "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1"


def test_one_overflow_at_scale_1_quoted_without_its_tag_is_a_collapse(tmp_path: Path, rules) -> None:
    """Before: nothing read (the reader wanted the tag) and, once read, no verdict from one overflow (three
    were needed at the floor): the held-out 11 miss. At 1 the first overflow already says every step is skipped."""
    found = _findings(tmp_path, rules, [PR_1593])
    assert "pinned at its floor of 1" in found.get("ZD201", ""), found


def test_apex_untagged_overflow_line_is_not_read_as_deepspeeds() -> None:
    """apex's fp16_utils prints "OVERFLOW! Skipping step. Attempted loss scale: A, reducing to B" with no rank (the
    amp reader's line): the DeepSpeed reader takes an untagged line only with ZeRO's "Rank N", or one overflow would
    be read twice."""
    apex = "OVERFLOW! Skipping step. Attempted loss scale: 1, reducing to 1"
    assert deepspeed._OVERFLOW.search(apex) is None
    assert deepspeed._OVERFLOW.search("[deepspeed] " + apex) is not None
    assert deepspeed._OVERFLOW.search(PR_1593) is not None
