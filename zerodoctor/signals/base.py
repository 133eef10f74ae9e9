"""Signals: the vocabulary — a named number with a unit and a one-line doc — and step windows.

A signal is either a scalar for the run or a ``StepSeries`` (one value per optimizer
step, merged across ranks, over the last ``WINDOW`` steps). Rules use a series as its
``summary`` in a plain condition and step by step in a ``for: N steps`` hold.

A signal module never sees the run's steps as a list: the run view (``runview.py``) hands
each rank-merged step once, in step order, to the module's ``Fold``; a per-step signal is
kept as a window of the last ``WINDOW`` steps.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from zerodoctor.runview import WINDOW



@dataclass(frozen=True)
class Signal:
    name: str
    unit: str
    doc: str
    per_step: bool = False


@dataclass(frozen=True)
class StepSeries:
    """Values of one signal per optimizer step, and the number that stands for them all."""

    steps: Sequence[int]
    values: Sequence[float | None]
    summary: float | None

    @classmethod
    def of(cls, steps: Sequence[int], values: Sequence[float | None]) -> StepSeries | None:
        """Build a series summarised by its median; ``None`` when no step has a value."""
        present = [v for v in values if v is not None]
        if not present:
            return None
        return cls(steps, values, statistics.median(present))


class StepWindow:
    """A fold's window: a list of ``[step, value, value, …]`` entries, the last ``WINDOW`` of them kept."""

    @staticmethod
    def push(window: list[list[Any]], entry: list[Any]) -> None:
        window.append(entry)
        if len(window) > 2 * WINDOW:  # trimmed in halves: amortised O(1), never more than 2 × WINDOW held
            del window[:-WINDOW]

    @staticmethod
    def series(window: list[list[Any]], column: int) -> StepSeries | None:
        """Column ``column`` of the last ``WINDOW`` entries as a series over their steps."""
        recent = window[-WINDOW:]
        return StepSeries.of([e[0] for e in recent], [e[column] for e in recent])


def ratio(num: float | None, den: float | None) -> float | None:
    """num/den, ``None`` where either side is missing or den is not positive."""
    return num / den if num is not None and den is not None and den > 0 else None


def nested(config: dict[str, Any] | None, path: str, default: Any = None) -> Any:
    """``nested(cfg, "zero_optimization.offload_param.device")`` without KeyErrors."""
    node: Any = config or {}
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node
