"""Signals: the vocabulary — a named number with a unit and a one-line doc.

A signal is either a scalar for the run or a ``StepSeries`` (one value per optimizer
step, merged across ranks). Rules use a series as its ``summary`` in a plain condition
and step by step in a ``for: N steps`` hold.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence


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


def ratio(num: Sequence[float | None], den: Sequence[float | None]) -> list[float | None]:
    """Element-wise num/den, ``None`` wherever either side is missing or den is not positive."""
    return [n / d if n is not None and d is not None and d > 0 else None for n, d in zip(num, den)]


def nested(config: dict[str, Any] | None, path: str, default: Any = None) -> Any:
    """``nested(cfg, "zero_optimization.offload_param.device")`` without KeyErrors."""
    node: Any = config or {}
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node

