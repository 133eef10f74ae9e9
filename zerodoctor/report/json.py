"""Report: a ``Report`` → the findings JSON contract of DESIGN.md."""

from __future__ import annotations

from typing import Any

from zerodoctor import __version__
from zerodoctor.report.model import Report


def to_json(report: Report) -> dict[str, Any]:
    out = {
        "zerodoctor": __version__,
        "inputs": [{"path": i.path, "format": i.format, "events": i.events, "quarantined": i.quarantined}
                   for i in report.inputs],
        "findings": [f.to_json() for f in report.findings],
        "unevaluated": [u.to_json() for u in report.unevaluated],
    }
    if report.set_aside:  # only when it happens: a run set aside is a bug to report, not a usual field
        out["set_aside"] = [{"run": run, "reason": why} for run, why in report.set_aside.items()]
    if report.dropped:  # only when the probe had to: its writer fell behind, these events are not in the run
        out["dropped_events"] = [{"run": run, "count": count} for run, count in report.dropped.items()]
    return out
