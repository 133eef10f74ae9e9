"""Conditions and templates: what the loader accepts evaluates, and missing signals are named."""

from __future__ import annotations

import pytest

from zerodoctor.rulebook.expr import Condition, ExprError, MissingSignal, Template, render

KNOWN = {"run.precision", "run.zero_stage", "fp16.overflow_rate"}


def _resolve(values: dict):  # noqa: ANN202
    def resolve(name: str):  # noqa: ANN202
        if values.get(name) is None:
            raise MissingSignal(name)
        return values[name]
    return resolve


def test_literal_lists_and_tuples_evaluate() -> None:
    cond = Condition("run.precision in ['fp16', 'bf16'] and run.zero_stage in (2, 3)", KNOWN)
    assert cond.signals == ["run.precision", "run.zero_stage"]
    assert cond.evaluate(_resolve({"run.precision": "fp16", "run.zero_stage": 3}))
    assert not cond.evaluate(_resolve({"run.precision": "fp32", "run.zero_stage": 3}))


def test_short_circuit_does_not_need_the_right_hand_signal() -> None:
    cond = Condition("run.zero_stage == 3 and fp16.overflow_rate > 0.5", KNOWN)
    assert cond.evaluate(_resolve({"run.zero_stage": 2})) is False
    with pytest.raises(MissingSignal) as missing:
        cond.evaluate(_resolve({"run.zero_stage": 3}))
    assert missing.value.name == "fp16.overflow_rate"


def test_template_formats_numbers_and_marks_missing_values() -> None:
    assert render("{fp16.overflow_rate:.0%} at stage {run.zero_stage}", _resolve({"fp16.overflow_rate": 0.25})) \
        == "25% at stage n/a"
    with pytest.raises(ExprError) as err:
        Template("{fp16.overflow_rate.__class__}", KNOWN)
    assert err.value.code == "RL204"
