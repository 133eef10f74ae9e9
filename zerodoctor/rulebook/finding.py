"""Rules: what a fired rule produces — the findings contract of DESIGN.md."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITY_ORDER = {"info": 0, "warning": 1, "error": 2}


@dataclass
class Fix:
    title: str
    safety: str
    config_patch: dict[str, Any] | None = None
    env: dict[str, str] | None = None
    action: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Finding:
    rule: str
    name: str
    category: str
    severity: str
    message: str
    run: str
    evidence: dict[str, Any] = field(default_factory=dict)
    steps: list[int] | None = None
    ranks: list[int] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)
    evidence_strength: str | None = None  # set for console-log runs: what the log could and could not show

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["fixes"] = [f.to_json() for f in self.fixes]
        if self.evidence_strength is None:
            del body["evidence_strength"]
        return body


@dataclass(frozen=True)
class Unevaluated:
    rule: str
    run: str
    missing: tuple[str, ...]
    hint: str | None = None  # the switch that would show the missing signals
    lacks: tuple[str, ...] = ()  # the inputs the run lacks that the missing signals come from (rulebook/hints.py)
    console_log: bool = False  # the run was read from console logs only: what the report calls its inputs
    unexplained: tuple[str, ...] = ()  # missing signals whose inputs the run has (too few steps, a value not printed)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"rule": self.rule, "run": self.run, "missing": list(self.missing)}
        if self.lacks:
            body["lacks"] = list(self.lacks)
        if self.hint:
            body["hint"] = self.hint
        return body


@dataclass
class Judgement:
    """One run judged: what fired, what could not be judged, and the facts fixes need."""

    run: str
    findings: list[Finding] = field(default_factory=list)
    unevaluated: list[Unevaluated] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    world_size_stated: int | None = None
    set_aside: str | None = None  # why the run was not judged (its view failed); its rows are stored all the same
    rules: int = 0  # the rules it was judged by (those in ``unevaluated`` could not judge it)

    @property
    def in_progress(self) -> bool:
        """The run still runs (``hang.in_progress``): a live watch judges it again on its timer, since
        silence is what the hang rules judge and a rank that hangs writes nothing."""
        return bool(self.values.get("hang.in_progress"))
