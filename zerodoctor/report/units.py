"""Report: a finding's evidence (signal name → value) → short labels, units and formatted numbers.

``fp16.recent_overflow_rate=0.2308`` reads as "skipped share of the last 100 steps: 23%": the
label is the one the signal declares (``Signal.label``: the whole doc stays in ``rules show``,
``--explain`` and JSON), the unit says how to print the value
(bytes as PyTorch prints them, GB figures in the same binary units, ratios as %, seconds as ms/s,
a count with its word, a rank as "rank 6"). The numbers themselves come from ``zerodoctor/messages/units.py``,
which templates use too. JSON keeps the signal names and raw values; only text, Markdown and HTML use this.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from zerodoctor import signals
from zerodoctor.signals.base import Signal
from zerodoctor.messages.units import GB, format_bytes, format_count, format_int_list, format_large, format_seconds

SHOW_ITEMS = 8
# counts: the label names what is counted ("steps skipped for overflow: 9"), so the number stands alone, whole
_COUNTS = {"steps", "overflows", "events", "retries", "heartbeats", "allocations", "micro-batches", "episodes", "lines",
           "processes", "collectives", "buffers", "tokens"}
_PLAIN = {"step", "scale", "stage", "code", "SeqNum", "log2", "lr", "name", "text", "patch", "arch", "frame",
          "keys", "values", "samples", "records"}


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Signal]:
    return signals.catalog()


def quantity(value: Any, unit: str) -> str:
    """One value in its unit, the way a person writes it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if unit in ("rank", "ranks") and _ints(value):
        items = [value] if isinstance(value, int) else list(value)
        if unit == "rank":
            return f"rank {format_int_list(items)}"
        if isinstance(value, int):  # a count of ranks: the label says so ("ranks in the job: 2")
            return str(value)
        return format_int_list(items[:64]) + (f", … {len(items) - 64} more" if len(items) > 64 else "")
    if isinstance(value, dict):  # a value per key (a misspelt key's match, a key's value): "key → value", never a dict
        return "; ".join(f"{k} → {quantity(v, unit)}" for k, v in value.items())
    if unit == "family":  # a crash family said in words: "missing shared library", not its identifier
        return str(value).replace("_", " ")
    if isinstance(value, (list, tuple)):
        shown = ", ".join(quantity(v, unit) for v in value[:SHOW_ITEMS])
        return shown + (f", … {len(value) - SHOW_ITEMS} more" if len(value) > SHOW_ITEMS else "")
    if not isinstance(value, (int, float)):
        return str(value)
    if unit == "bytes":
        return format_bytes(value)
    if unit == "GB":  # the ZeRO paper's 10^9 bytes, printed in the units every other size is printed in
        return format_bytes(value * GB)
    if unit == "ratio":
        return f"{value:.0%}" if abs(value) >= 0.01 or value == 0 else f"{value:.2%}"
    if unit == "s":
        return format_seconds(value)
    if unit in ("elements", "parameters"):
        return f"{format_large(value)} {unit}"
    if unit in _COUNTS:
        return format_count(value, "").strip()
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _ints(value: Any) -> bool:
    items = value if isinstance(value, (list, tuple)) else [value]
    return bool(items) and all(isinstance(v, int) and not isinstance(v, bool) for v in items)


def label_of(name: str) -> str:
    """A signal as a person reads it: the catalogue's label ("model parameters", not run.params)."""
    signal = _catalog().get(name)
    return signal.label if signal else name


def evidence_items(evidence: dict[str, Any]) -> list[str]:
    """Each evidence entry as "label: value unit"; a name outside the catalogue stays ``name=value``."""
    out = []
    for name, value in evidence.items():
        signal = _catalog().get(name)
        if signal is None:
            out.append(f"{name}={quantity(value, '')}")
        else:
            unit = "" if signal.unit in _PLAIN else signal.unit
            out.append(f"{signal.label}: {quantity(value, unit)}")
    return out
