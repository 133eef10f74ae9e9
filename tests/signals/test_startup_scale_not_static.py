"""A start-up overflow is not a static loss scale: the same halving printed by several ranks is one step, and a
scale a log shows once cannot show that it stays put.

The logs are the libraries' format strings, not pastes. DeepSpeed 0.3.12-0.8.2 ``runtime/zero/stage1.py``,
``stage2.py`` and ``runtime/fp16/fused_optimizer.py`` (29853c3ee, #833) log with ``logger.info`` on every rank
``"[deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted loss scale: {}, reducing to {}"``,
the words the same under the static ``LossScaler`` (whose "reducing to" repeats the scale). Megatron-LM's
``training.py`` ``training_log`` prints ``' loss scale: {:.1f} |'`` and ``' number of skipped iterations: {:3d} |'``
on its iteration line; its ``DynamicGradScaler`` starts at ``--initial-loss-scale`` 2^32 with hysteresis 2, so ten
skipped start-up iterations leave 2^23.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zerodoctor.pipeline import rules_from
from zerodoctor.sources.batches import make_parser, read_batches
from tests.conftest import console_log, findings_by_rule, parsed

STAGE1 = ("[2021-03-18 04:21:58,423] [INFO] [stage1.py:633:step] [deepspeed] fp16 dynamic loss scale overflow! "
          "Skipping step. Attempted loss scale: {a}, reducing to {b}")
MEGATRON = (" iteration {i:8d}/ 1000000 | consumed samples: {s:12d} | elapsed time per iteration (ms): 356.2 | "
            "learning rate: 0.000E+00 | global batch size:     4 | loss scale: {scale:.1f} | number of skipped "
            "iterations: {k:3d} | number of nan iterations:   0 |")


@pytest.fixture(scope="module")
def rules():
    return rules_from()


def _run(tmp_path: Path, rules, lines: list[str]):
    path = console_log(tmp_path, lines)
    events = parsed(list(read_batches(path, make_parser("text", "t"))))
    return events, {rule: f.message for rule, f in findings_by_rule(path, rules).items()}


def test_one_halving_printed_by_three_ranks_is_one_dynamic_step(tmp_path: Path, rules) -> None:
    """Before: three steps, all skipped, at a 'static loss_scale of 131072' (ZD203, an error)."""
    events, found = _run(tmp_path, rules, [STAGE1.format(a="131072.0", b="65536.0")] * 3)
    steps = [e for e in events if e["kind"] == "step"]
    assert [(s["step"], s["overflow"], s["loss_scale"]) for s in steps] == [(1, True, 131072.0)]
    assert any(e.get("what") == "dynamic_loss_scaler" for e in events)
    assert "ZD203" not in found, found


def test_a_scale_pinned_at_its_floor_repeats_and_each_line_is_a_step(tmp_path: Path, rules) -> None:
    """"1.0, reducing to 1" again and again is one rank skipping step after step (the collapse ZD201 names)."""
    lines = [STAGE1.format(a=a, b=b) for a, b in [("4.0", "2.0"), ("2.0", "1.0"), ("1.0", "1"), ("1", "1"),
                                                  ("1", "1"), ("1", "1")]]
    events, _ = _run(tmp_path, rules, lines)
    assert len([e for e in events if e["kind"] == "step"]) == 6


def test_the_same_line_twice_with_another_step_between_is_two_steps(tmp_path: Path, rules) -> None:
    """A halving repeated after the scale grew back (a step line between them) is a second overflow."""
    lines = [STAGE1.format(a="131072.0", b="65536.0"),
             "[2021-03-18 04:22:58,423] [INFO] [logging.py:60:log_dist] [Rank 0] step=10, skipped=1, lr=[0.0001], "
             "mom=[(0.9, 0.999)]",
             STAGE1.format(a="131072.0", b="65536.0")]
    events, _ = _run(tmp_path, rules, lines)
    assert len([e for e in events if e["kind"] == "step" and e.get("overflow")]) == 2


def test_megatron_first_line_after_start_up_halvings_is_not_a_static_scale(tmp_path: Path, rules) -> None:
    """Before: 'with a static loss_scale of 8.38861e+06, 100% of the steps (1) overflowed' (ZD203)."""
    _, found = _run(tmp_path, rules, [MEGATRON.format(i=10, s=40, scale=8388608.0, k=10)])
    assert "ZD203" not in found, found


def test_megatron_lines_that_keep_one_scale_through_skips_are_a_static_scale(tmp_path: Path, rules) -> None:
    """The same scale on every line while most iterations are skipped: a constant scaler (--loss-scale)."""
    lines = [MEGATRON.format(i=10 * n, s=40 * n, scale=65536.0, k=10) for n in range(1, 5)]
    _, found = _run(tmp_path, rules, lines)
    assert "static loss_scale of 65536" in found.get("ZD203", ""), found
