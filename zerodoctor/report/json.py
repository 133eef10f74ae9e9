"""Report: a ``Report`` → the findings JSON contract of DESIGN.md."""

from __future__ import annotations

from typing import Any

from zerodoctor import __version__
from zerodoctor.report.model import Report


def to_json(report: Report) -> dict[str, Any]:
    return {
        "zerodoctor": __version__,
        "inputs": [{"path": i.path, "format": i.format, "events": i.events, "quarantined": i.quarantined}
                   for i in report.inputs],
        "findings": [f.to_json() for f in report.findings],
        "unevaluated": [u.to_json() for u in report.unevaluated],
    }
