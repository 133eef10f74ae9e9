"""Real CPU DeepSpeed runs' console logs (``samples/<scenario>/console.log``) read as plain text.

Where the console shows the fault, diagnosing the log alone reaches the category the events
reach; where it cannot (a batch the loader fed, step timings), nothing is claimed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.pipeline import rules_from

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
RULES = rules_from()


@pytest.mark.parametrize(("scenario", "category"), [
    ("fp16-min-scale", "fp16_overflow"),
    ("fp16-static-65536", "fp16_overflow"),
    ("fragmentation-oom", "fragmentation_oom"),
    ("healthy-zero2", None),
])
def test_console_log_alone_reaches_the_category(scenario: str, category: str | None) -> None:
    console = SAMPLES / scenario / "console.log"
    if not console.is_file():
        pytest.skip(f"{console} not recorded")
    report = diagnose([console], rules=RULES, input_format="text")
    errors = {f.category for f in report.findings if f.severity == "error"}
    assert errors == ({category} if category else set()), [f.message for f in report.findings]
    assert all(f.evidence_strength and f.evidence_strength.startswith("text:") for f in report.findings)
