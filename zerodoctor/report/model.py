"""Report: what one diagnosis produced — inputs read, findings, rules not judged, lines kept aside."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerodoctor.rulebook.finding import Finding, Unevaluated
from zerodoctor.sources.rejects import Rejected


@dataclass
class InputSummary:
    path: str
    format: str
    events: int
    quarantined: int


@dataclass
class Report:
    inputs: list[InputSummary] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unevaluated: list[Unevaluated] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
