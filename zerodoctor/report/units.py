"""Report: a finding's evidence (signal name → value) → words and units, from the signal catalogue.

``fp16.recent_overflow_rate=0.2308`` reads as "skipped share of the last 50 steps: 23%":
the signal's doc says what it is, its unit how to print it (bytes as PyTorch prints them, ratios as %,
seconds as ms or s). JSON keeps the signal names; only text and Markdown use this.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from zerodoctor import signals
from zerodoctor.signals.base import Signal
from zerodoctor.units import format_bytes

SHOW_ITEMS = 8
_LARGE = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))
# units whose number says it all next to the doc ("steps skipped for overflow: 9")
_COUNTS = {"steps", "step", "overflows", "events", "retries", "ranks", "keys", "samples", "micro-batches", "scale",
           "stage", "code", "SeqNum", "log2", "lr", "name", "text", "patch"}


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Signal]:
    return signals.catalog()


def quantity(value: Any, unit: str) -> str:
    """One value in its unit, the way a person writes it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        shown = ", ".join(quantity(v, unit) for v in value[:SHOW_ITEMS])
        return shown + (f", … {len(value) - SHOW_ITEMS} more" if len(value) > SHOW_ITEMS else "")
    if not isinstance(value, (int, float)):
        return str(value)
    if unit == "bytes":
        return format_bytes(value)
    if unit == "ratio":
        return f"{value:.0%}" if abs(value) >= 0.01 or value == 0 else f"{value:.2%}"
    if unit == "s":
        return f"{value * 1000:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"
    if unit in ("elements", "parameters"):
        big = next((f"{value / size:.3g}{name}" for size, name in _LARGE if abs(value) >= size), f"{value:g}")
        return f"{big} {unit}"
    if unit == "GB":
        return f"{value:.3g} GB"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def evidence_items(evidence: dict[str, Any]) -> list[str]:
    """Each evidence entry as "what it is: value unit"; a name outside the catalogue stays ``name=value``."""
    out = []
    for name, value in evidence.items():
        signal = _catalog().get(name)
        if signal is None:
            out.append(f"{name}={quantity(value, '')}")
        else:
            unit = "" if signal.unit in _COUNTS else signal.unit
            out.append(f"{signal.doc}: {quantity(value, unit)}")
    return out
