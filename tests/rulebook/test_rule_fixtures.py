"""Every rule on its fixtures: it fires on ``fires.*`` and is judged silent on ``silent.*``.

Like ``promtool test rules``: the fixtures are data, discovered by parametrize; a rule with no
fixtures fails here, so none can ship untested. The whole findings of each fixture (message,
evidence, steps, ranks, every fix's patch) are pinned in ``tests/snapshots/rules/``, reviewed
like ruff's snapshots: a message with a hole or a wrong step changes a snapshot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.pipeline import rules_from
from zerodoctor.rulebook.loader import builtin_rules_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rules"
ALL_RULES = rules_from()
# The core's rules; an installed plugin tests its own rules with its own fixtures.
RULES = [r for r in ALL_RULES if builtin_rules_dir() in r.path.parents]


def _fixture(code: str, case: str) -> Path:
    found = sorted((FIXTURES / code).glob(f"{case}.*"))
    assert found, f"rule {code} has no {case} fixture under {FIXTURES / code}"
    return found[0]


@pytest.mark.parametrize("code", [r.code for r in RULES])
def test_rule_fires_on_its_fixture(code: str, snapshot) -> None:
    report = diagnose([_fixture(code, "fires")], rules=ALL_RULES)
    snapshot(f"rules/{code}-fires", [f.to_json() for f in report.findings])
    fired = [f for f in report.findings if f.rule == code]
    assert fired, f"{code} did not fire; unevaluated: {[u for u in report.unevaluated if u.rule == code]}"
    finding = fired[0]
    assert finding.message and "n/a" not in finding.message, finding.message
    assert all(fix.title and "n/a" not in fix.title for fix in finding.fixes), finding.fixes


@pytest.mark.parametrize("code", [r.code for r in RULES])
def test_rule_is_judged_silent_on_its_fixture(code: str, snapshot) -> None:
    report = diagnose([_fixture(code, "silent")], rules=ALL_RULES)
    snapshot(f"rules/{code}-silent", [f.to_json() for f in report.findings])
    assert code not in {f.rule for f in report.findings}
    assert code not in {u.rule for u in report.unevaluated}, "silent must mean judged, not skipped"
