"""A fix is offered whole or not at all: no "n/a" in its text, no key deleted by a missing value."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.pipeline import rules_from

RULES = rules_from()
INPUTS = (sorted((ROOT / "tests/fixtures/logs").glob("*.log"))
          + sorted((ROOT / "tests/fixtures/rules").glob("*/*.jsonl"))
          + sorted((ROOT / "tests/fixtures/rules").glob("*/*.log")))


def _nulls(patch: object, path: str = "") -> list[str]:
    if isinstance(patch, dict):
        return [p for k, v in patch.items() for p in ([f"{path}{k}"] if v is None else _nulls(v, f"{path}{k}."))]
    return []


def _allowed_nulls(code: str, patch: dict) -> set[str]:
    """Keys a rule's YAML itself deletes (``offload_param: null``), or every key of a patch a signal
    computes whole (a rename deletes the misspelt key): the only deletions allowed."""
    rule = next(r for r in RULES if r.code == code)
    if any(isinstance(f.config_patch, str) for f in rule.spec.fixes):
        return set(_nulls(patch))
    return {p for f in rule.spec.fixes if isinstance(f.config_patch, dict) for p in _nulls(f.config_patch)}


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixes_have_no_blanks_and_delete_only_what_the_rule_says(path: Path) -> None:
    for finding in diagnose([path], rules=RULES).findings:
        for fix in finding.fixes:
            assert "n/a" not in fix.title and "n/a" not in (fix.action or ""), (finding.rule, fix.title)
            assert set(_nulls(fix.config_patch or {})) <= _allowed_nulls(finding.rule, fix.config_patch or {}), fix


def test_the_lr_fix_is_dropped_when_the_log_never_showed_an_lr() -> None:
    report = diagnose([ROOT / "tests/fixtures/logs/deepspeed_collapse_min_scale_wrapped.log"], rules=RULES)
    zd201, = [f for f in report.findings if f.rule == "ZD201"]
    assert zd201.fixes, "the bf16 fix needs no signal and stays"
    assert not [f for f in zd201.fixes if "optimizer" in (f.config_patch or {})]
