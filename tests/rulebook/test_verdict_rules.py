"""Signals decide, rules word: ``requires:`` and ``verdict:`` + ``messages:`` load strictly and judge as documented.

The catalogue here is the real one plus one made-up verdict signal (``test.verdict``), so the contract is
tried apart from any shipped rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zerodoctor import signals
from zerodoctor.rulebook.engine import evaluate
from zerodoctor.rulebook.loader import RuleLoadError, load_rules
from zerodoctor.signals.base import verdict

CATALOG = {**signals.catalog(), "test.verdict": verdict("test.verdict", "how it went", ("capacity", "leak", "none"))}
DOC = "doc: |\n  ## What it does\n  x\n\n  ## Why is this bad?\n  y\n"
HEAD = "code: ZD499\nname: verdict-rule\ncategory: memory\nseverity: error\n"
GOOD = HEAD + (
    "when: memory.oom_count > 0\n"
    "requires: [memory.oom_requested_bytes]\n"
    "verdict: test.verdict\n"
    "messages:\n"
    "  capacity: 'full asking for {memory.oom_requested_bytes:bytes}[ at step {memory.oom_step}]'\n"
    "  leak: 'a leak[ of {creep.device_bytes_per_step:bytes} a step]'\n"
) + DOC


def _load(tmp_path: Path, text: str) -> list:
    folder = tmp_path / "memory"
    folder.mkdir(exist_ok=True)
    (folder / "ZD499-verdict-rule.yaml").write_text(text)
    return load_rules([tmp_path], CATALOG)


def _errors(tmp_path: Path, text: str) -> set[tuple[int, str]]:
    with pytest.raises(RuleLoadError) as caught:
        _load(tmp_path, text)
    return {(e.line, e.code) for e in caught.value.errors}


def test_the_verdict_picks_the_message_and_a_value_without_one_is_silent(tmp_path: Path) -> None:
    rule, = _load(tmp_path, GOOD)
    base = {"memory.oom_count": 1, "memory.oom_requested_bytes": 64 * 2**20}
    found, unevaluated = evaluate([rule], {**base, "test.verdict": "capacity"}, "run", [0])
    assert [f.message for f in found] == ["full asking for 64.00 MiB"] and not unevaluated
    assert "test.verdict" not in found[0].evidence  # the message words the verdict; it is no evidence line
    assert "memory.oom_requested_bytes" in found[0].evidence  # a required number is shown, as a condition's is
    found, _ = evaluate([rule], {**base, "test.verdict": "leak", "creep.device_bytes_per_step": 3 * 2**20}, "run", [0])
    assert [f.message for f in found] == ["a leak of 3.00 MiB a step"]
    assert evaluate([rule], {**base, "test.verdict": "none"}, "run", [0]) == ([], [])


def test_a_required_signal_missing_makes_the_rule_unevaluated_only_where_the_condition_holds(tmp_path: Path) -> None:
    rule, = _load(tmp_path, GOOD)
    found, unevaluated = evaluate([rule], {"memory.oom_count": 1, "test.verdict": "capacity"}, "run", [0])
    assert not found and [u.missing for u in unevaluated] == [("memory.oom_requested_bytes",)]
    found, unevaluated = evaluate([rule], {"memory.oom_count": 1, "memory.oom_requested_bytes": 1}, "run", [0])
    assert not found and [u.missing for u in unevaluated] == [("test.verdict",)]
    assert evaluate([rule], {"memory.oom_count": 0}, "run", [0]) == ([], [])  # no OOM: nothing to judge


def test_every_error_of_a_verdict_rule_is_reported_at_once_with_its_line(tmp_path: Path) -> None:
    text = HEAD + (
        "when: memory.oom_count > 0\n"                                              # 5
        "requires: [memory.oom_nope]\n"                                             # 6  unknown signal
        "verdict: test.verdict\n"                                                   # 7
        "messages:\n"                                                               # 8
        "  capasity: 'full'\n"                                                      # 9  not a value of the verdict
        "  leak: 'a[ b {memory.oom_step}][ c {memory.oom_step}][ d {memory.oom_step}]'\n"  # 10 three clauses
        "  none: 'x[if memory.oom_step > 1: y]'\n"                                  # 11 a guarded clause
        "  capacity: 'x[ y[ {memory.oom_step}]] {memory.oom_step}'\n"               # 12 nested, and a hole
    ) + DOC
    assert _errors(tmp_path, text) == {(6, "RL202"), (9, "RL207"), (10, "RL208"), (11, "RL208"), (12, "RL208"),
                                       (12, "RL206")}


def test_a_verdict_must_be_a_verdict_signal_and_the_two_message_forms_exclude_each_other(tmp_path: Path) -> None:
    no_verdict = GOOD.replace("verdict: test.verdict", "verdict: memory.oom_count")
    assert (7, "RL207") in _errors(tmp_path, no_verdict)
    both = GOOD.replace("messages:\n", "message: 'x'\nmessages:\n")
    assert (9, "RL103") in _errors(tmp_path, both)
    alone = GOOD.replace("verdict: test.verdict\n", "")
    assert (7, "RL102") in _errors(tmp_path, alone)
    neither = HEAD + "when: memory.oom_count > 0\n" + DOC
    assert (1, "RL102") in _errors(tmp_path, neither)
