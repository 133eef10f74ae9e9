"""Conditions: what the loader accepts evaluates, missing signals are named, and what a true condition guarantees."""

from __future__ import annotations

import pytest

from zerodoctor.rulebook.expr import FUNCTIONS, Condition, ExprError, MissingSignal, patch

KNOWN = {"run.precision", "run.zero_stage", "fp16.overflow_rate"}


def _resolve(values: dict):
    def resolve(name: str):
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


def test_a_true_condition_guarantees_what_it_read_on_every_path() -> None:
    cond = Condition("run.zero_stage == 3 and (fp16.overflow_rate > 0.5 or run.precision == 'fp16')", KNOWN)
    # "or" may stop at its first operand: only that one is certainly read when the whole is true
    assert cond.guaranteed == {"run.zero_stage", "fp16.overflow_rate"}
    assert Condition("not run.zero_stage or run.precision", KNOWN).guaranteed == {"run.zero_stage"}
    assert Condition("run.precision if run.zero_stage else fp16.overflow_rate", KNOWN).guaranteed == {"run.zero_stage"}


def test_forbidden_constructs_and_unknown_names_are_refused_with_their_code() -> None:
    for text, code in (("fp16.overflow_rate.__class__", "RL203"), ("open('x')", "RL203"),
                       ("run.zero_stage; run.precision", "RL201"), ("run.nope > 1", "RL202"),
                       ("[x for x in run.zero_stage]", "RL203"), ("round(run.zero_stage, ndigits=2)", "RL203")):
        with pytest.raises(ExprError) as err:
            Condition(text, KNOWN)
        assert err.value.code == code, text


def test_evaluating_does_not_widen_the_function_whitelist() -> None:
    before = dict(FUNCTIONS)
    Condition("run.zero_stage == 3", KNOWN).evaluate(_resolve({"run.zero_stage": 3}))
    assert before == FUNCTIONS  # simpleeval adds list/dict/… to the dict it is handed


def test_arithmetic_on_a_value_the_run_lacks_is_a_missing_signal_not_a_crash() -> None:
    with pytest.raises(MissingSignal):
        Condition("fp16.overflow_rate / run.zero_stage > 1", KNOWN).evaluate(
            _resolve({"fp16.overflow_rate": 0.5, "run.zero_stage": 0}))


def test_patch_nests_dotted_keys_into_a_merge_patch() -> None:
    assert patch({"optimizer.params.lr": 1e-4, "optimizer.params.eps": 1e-8, "train_batch_size": 32}) == {
        "optimizer": {"params": {"lr": 1e-4, "eps": 1e-8}}, "train_batch_size": 32}
