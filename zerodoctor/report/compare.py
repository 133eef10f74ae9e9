"""Report: two diagnosed runs → what differs: config keys, per-step numbers side by side, rules that fire in one only.

Each finding that fires in one run only is tied to the config keys that differ and that its
own fixes touch, which is usually the explanation ("fp16.enabled: absent → true").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerodoctor.report.model import Report
from zerodoctor.rulebook.finding import Finding
from zerodoctor.signals.plots import RunSeries

class _Absent:
    """A key one config does not set (JSON leaves it out; text says "absent")."""

    def __repr__(self) -> str:
        return "absent"


ABSENT = _Absent()

# (label, unit, how to read it off a run's series)
NUMBERS = (
    ("step time", "s", lambda s: s.means.get("step_time_s")),
    ("  forward", "s", lambda s: s.means.get("fwd_s")),
    ("  backward", "s", lambda s: s.means.get("bwd_s")),
    ("  optimizer", "s", lambda s: s.means.get("optim_s")),
    ("  collectives", "s", lambda s: s.means.get("comm_s")),
    ("collectives / step time", "ratio", lambda s: _share(s.means.get("comm_s"), s.means.get("step_time_s"))),
    ("steps skipped (overflow)", "ratio", lambda s: len(s.overflows) / s.steps if s.steps else None),
    ("memory peak allocated", "bytes", lambda s: _top(s, "mem_peak_bytes")),
    ("memory reserved (max)", "bytes", lambda s: _top(s, "mem_reserved_bytes")),
    ("samples per step (all ranks)", "samples", lambda s: s.means.get("samples")),
    ("steps recorded", "steps", lambda s: s.steps or None),
    ("OOMs", "events", lambda s: len(s.ooms) or None),
)


def _share(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _top(series: RunSeries, column: str) -> float | None:
    return max((v for v in series.buckets.get(column + "_max", []) if v is not None), default=None)


@dataclass
class Side:
    label: str  # what the user passed
    run: str | None
    findings: list[Finding]
    config: dict[str, Any]
    series: RunSeries


@dataclass
class OnlyIn:
    side: str  # "a" or "b"
    finding: Finding
    keys: list[str]  # differing config keys its fixes touch


@dataclass
class Comparison:
    a: Side
    b: Side
    config: list[tuple[str, Any, Any]] = field(default_factory=list)
    numbers: list[tuple[str, str, float | None, float | None]] = field(default_factory=list)
    only: list[OnlyIn] = field(default_factory=list)
    both: list[str] = field(default_factory=list)  # rules that fire in both


def side(label: str, report: Report) -> Side:
    """The run of a report with the most steps (a directory or log normally holds one)."""
    names = list(dict.fromkeys([*report.configs, *(f.run for f in report.findings)]))
    run = max(names, key=lambda n: report.series[n].steps if n in report.series else -1, default=None)
    return Side(label, run, [f for f in report.findings if f.run == run], report.configs.get(run) or {},
                report.series.get(run) or RunSeries())


def compare(a: Side, b: Side) -> Comparison:
    flat_a, flat_b = flatten(a.config), flatten(b.config)
    out = Comparison(a, b)
    out.config = [(k, flat_a.get(k, ABSENT), flat_b.get(k, ABSENT)) for k in sorted({*flat_a, *flat_b})
                  if flat_a.get(k, ABSENT) != flat_b.get(k, ABSENT)]
    out.numbers = [(label, unit, read(a.series), read(b.series)) for label, unit, read in NUMBERS
                   if read(a.series) is not None or read(b.series) is not None]
    rules_a, rules_b = {f.rule for f in a.findings}, {f.rule for f in b.findings}
    differing = [k for k, _, _ in out.config]
    for name, s, others in (("a", a, rules_b), ("b", b, rules_a)):
        out.only += [OnlyIn(name, f, _touched(f, differing)) for f in s.findings if f.rule not in others]
    out.both = sorted(rules_a & rules_b)
    return out


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _touched(finding: Finding, differing: list[str]) -> list[str]:
    """Differing keys in a section (``fp16``, ``zero_optimization``…) that the finding's fixes patch."""
    sections = {k.split(".")[0] for fix in finding.fixes for k in flatten(fix.config_patch or {})}
    return [k for k in differing if k.split(".")[0] in sections]


def to_json(c: Comparison) -> dict[str, Any]:
    def run(s: Side) -> dict[str, Any]:
        return {"input": s.label, "run": s.run, "steps": s.series.steps, "findings": [f.rule for f in s.findings]}

    return {"a": run(c.a), "b": run(c.b),
            "config": [{"key": k, **{side: v for side, v in (("a", va), ("b", vb)) if v is not ABSENT}}
                       for k, va, vb in c.config],
            "numbers": [{"name": label.strip(), "unit": unit, "a": va, "b": vb} for label, unit, va, vb in c.numbers],
            "only": [{"in": o.side, "config_keys": o.keys, **o.finding.to_json()} for o in c.only],
            "both": c.both}
