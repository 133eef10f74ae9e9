"""Every rule's message, fix titles and phrase read well with any subset of their evidence missing.

A rule fires on whatever the run happened to show: a console log may hold only the exception,
a probe run every number. For every rule, each signal its message or a fix title reads is given
a plausible value or taken away (all combinations, or a fixed sample of 400 for large sets; a bool
also as False), except those the condition guarantees when it is true. The text must never show
a hole ("n/a", "None", a brace or bracket) or the scars of a clause left out (double spaces, a
space before a comma, empty parentheses, a dangling separator). A phrase (rules/phrases.yaml) is read
the same way over its record's fields, each heartbeat phase in turn.
"""

from __future__ import annotations

import itertools
import random
import re
from typing import Any

import pytest

from zerodoctor.pipeline import rules_from
from zerodoctor.rulebook.expr import MissingSignal
from zerodoctor.events import Heartbeat
from zerodoctor.rulebook.loader import PHRASES, Rule, builtin_rules_dir, load_phrases
from zerodoctor.rulebook.template import Template
from zerodoctor.signals import catalog

RULES = rules_from()
CATALOG = catalog()
SAMPLE = 400
_MISSING = object()
_HOLES = re.compile(r"n/a|None|[{}\[\]]|  | [,;:.)]|(^|\s)\(\s*\)|[,;:]\s*[,;:]|[,;:(]$|^[,;: ]")
# A Python repr a message quotes as the library prints it (torch.Size([0]), tensor([])) is content, not a scar.
_QUOTED_REPR = re.compile(r"\w+\(\[[^\[\]]*\]\)")


class _Scars:
    """What a left-out field or clause leaves behind, outside the reprs a message quotes."""

    @staticmethod
    def search(text: str) -> re.Match | None:
        return _HOLES.search(_QUOTED_REPR.sub("repr", text))


_SCARS = _Scars()
# plausible values by unit: what a signal of that unit looks like to a template
_BY_UNIT: dict[str, Any] = {
    "bytes": 1_610_612_736, "keys": {"optimizer.params.lr": 1e-4, "zero_optimisation": 3},
    "name": "ALLREDUCE", "text": "expandable_segments:True", "ratio": 0.25, "lr": 3e-4, "GB": 12.5,
}
# plausible records, by field: what a phrase's record looks like (a list where each value is tried)
_STATE = {"phase": "collective", "op": "all_reduce", "seq": 50, "group": "1", "outer": "backward",
          "since_t": 1764579220.0, "for_s": 81.0}
_FIELDS: dict[str, list[Any]] = {
    "rank": [1], "quiet_s": [65.0], "phase": list(Heartbeat.model_fields["phase"].annotation.__args__),
    "op": ["all_reduce"], "seq": [50], "group": ["1"], "outer": ["backward"], "since_t": [1764579220.0],
    "for_s": [81.0], "head": [51], "beat": [_STATE], "timeout_s": [1800.0], "call": [32], "tensor": ["a scalar"],
    "desc": ["TENSOR_MODEL_PARALLEL_GROUP"], "groups": [5],
    "step_s": [1.2], "mark": ["measured", "assumed"], "now_s": [24.1], "missing": ["model parameters, step time"],
}
_RECORDS = {"hang.fr_lags": [{"rank": 1, "group": "0", "seq": 30, "op": "nccl:all_reduce", "head": 31, "beat": _STATE}],
            "hang.timed_out": {"op": "ALLREDUCE", "seq": 4127, "timeout_s": 1800.0},
            "mismatch.first": {"rank": 2, "op": "ALLREDUCE", "call": 32, "tensor": "a scalar"},
            "mismatch.other": {"rank": 3, "op": "ALLREDUCE", "call": 33, "tensor": "a scalar"},
            **{f"price.{name}": {"step_s": 1.2, "mark": "measured", "now_s": 24.1}
               for name in ("no_offload", "optimizer_only", "stage2", "stage2_offload", "overlap")}}
_KINDS = {"hang.recovered_kind": ["rank", "collective", "silent"]}  # names a template tells apart
BOOK: dict[str, Template] = {}
assert not load_phrases(builtin_rules_dir() / PHRASES, BOOK)


def _value(name: str) -> Any:
    if name.endswith("_ranks"):  # a list of ranks; run.world_size is a count in the same unit
        return [0, 1, 3]
    if CATALOG[name].unit == "records":
        return _RECORDS.get(name, [{"rank": 1, **_STATE}, {"rank": 0, **_STATE, "phase": "user"}])
    return _BY_UNIT.get(CATALOG[name].unit, 8)


def _states(name: str, guaranteed: set[str]) -> list[Any]:
    present = [True, False] if CATALOG[name].unit == "bool" else _KINDS.get(name, [_value(name)])
    return present if name in guaranteed else [*present, _MISSING]


def _combinations(names: list[str], guaranteed: set[str]) -> list[dict[str, Any]]:
    choices = [_states(n, guaranteed) for n in names]
    total = 1
    for c in choices:
        total *= len(c)
    if total <= SAMPLE:
        combos = list(itertools.product(*choices))
    else:
        rng = random.Random(0)
        combos = [tuple(c[0] for c in choices), tuple(c[-1] for c in choices)]
        combos += [tuple(rng.choice(c) for c in choices) for _ in range(SAMPLE)]
    return [{n: v for n, v in zip(names, combo) if v is not _MISSING} for combo in combos]


def _resolver(values: dict[str, Any]):
    def resolve(name: str) -> Any:
        if name not in values:
            raise MissingSignal(name)
        return values[name]
    return resolve


def _texts(rule: Rule) -> list[tuple[str, Any, set[str]]]:
    """(what, template, signals guaranteed) for the message and each fix title."""
    out = [(what if what == "message" else f"message for {what}", text, rule.guaranteed_for(what))
           for what, text in rule.texts().items()]
    for i, fix in enumerate(rule.fixes):
        when = set(fix.when.guaranteed) if fix.when else set()
        out.append((f"fix {i} title", fix.title, rule.guaranteed | when))
    return out


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_no_subset_of_the_evidence_leaves_a_hole(rule: Rule) -> None:
    for what, template, guaranteed in _texts(rule):
        names = template.signals
        for values in _combinations(names, guaranteed):
            try:
                text = template.render(_resolver(values))
            except MissingSignal:
                assert not what.startswith("message"), f"{rule.code} {what} needs a missing signal: {values}"
                continue  # a fix title with a blank: the fix is not offered
            assert text and not _SCARS.search(text), f"{rule.code} {what} with {sorted(values)}:\n  {text!r}"


@pytest.mark.parametrize("name", BOOK)
def test_no_subset_of_a_records_fields_leaves_a_hole_in_its_phrase(name: str) -> None:
    phrase = BOOK[name]
    fields = phrase.signals
    assert set(fields) <= set(_FIELDS), f"give {sorted(set(fields) - set(_FIELDS))} plausible values here"
    choices = [[*_FIELDS[f], _MISSING] for f in fields]
    rng = random.Random(0)
    records = [tuple(c[0] for c in choices)] + [tuple(rng.choice(c) for c in choices) for _ in range(SAMPLE)]
    records += [tuple(phase if f == "phase" else c[0] for f, c in zip(fields, choices)) for phase in _FIELDS["phase"]]
    shown = 0
    for combo in records:
        values = {f: v for f, v in zip(fields, combo) if v is not _MISSING}
        try:
            text = phrase.render(_resolver(values))
        except MissingSignal:
            continue  # a record without a field the phrase needs: the clause around the list is left out
        shown += 1
        assert text and not _SCARS.search(text), f"phrase {name} with {values}:\n  {text!r}"
    assert shown > len(_FIELDS["phase"])


def test_the_check_catches_a_hole() -> None:
    """The scan above fails a message that would print a missing value or an empty clause's scars."""
    for bad in ("3 overflows (n/a after calibration)", "scale now None", "ranks [0, 1]", "a  b", "a , b", "a ()",
                "stuck; ; more", "skipped:"):
        assert _SCARS.search(bad), bad
    assert not _SCARS.search("the loss scale hit min_loss_scale 1 and DeepSpeed aborted the run (engine.step())")
    assert not _SCARS.search("the weights are empty (torch.Size([0]) / tensor([]))") and _SCARS.search("size ([0] )")


def test_a_log_holding_only_the_min_scale_exception_reads_whole(tmp_path) -> None:
    """Issue 11's case: ZD201 on the exception alone printed "n/a overflows (n/a after …), scale now n/a; n/a"."""
    from tests.conftest import ROOT
    from zerodoctor.pipeline.diagnose import diagnose

    real = (ROOT / "tests/fixtures/logs/deepspeed_collapse_min_scale_wrapped.log").read_text().splitlines()
    log = tmp_path / "exception-only.log"
    log.write_text("\n".join(line for line in real if line.startswith("[rank")) + "\n")  # its traceback lines only
    zd201, = [f for f in diagnose([log], rules=RULES).findings if f.rule == "ZD201"]
    assert zd201.message == ("the fp16 loss scale hit min_loss_scale 1 and DeepSpeed aborted the run "
                             "('Current loss scale already at minimum')")
    assert zd201.evidence_strength == "text: the 'loss scale already at minimum' exception only"
