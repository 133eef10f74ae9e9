"""Signals: the vocabulary — a named number with a unit and a one-line doc — and step windows.

A signal is either a scalar for the run or a ``StepSeries`` (one value per optimizer
step, merged across ranks, over the last ``WINDOW`` steps). Rules use a series as its
``summary`` in a plain condition and step by step in a ``for: N steps`` hold.

A signal module never sees the run's steps as a list: the run view (``signals/view.py``) hands
each rank-merged step once, in step order and in blocks of columns, to the module's ``Fold``; a
per-step signal is kept as a window of the last ``WINDOW`` steps. The helpers below work on a
block's columns at once: a fold's cost is then a few list operations per block, not per step.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

from zerodoctor.events.columns import Steps
from zerodoctor.messages.deferred import deferred
from zerodoctor.signals.view import WINDOW


_NOT_A_NOUN = ("at ", "per ", "a ", "those ")  # a head that leans on the clause it was cut from
_CLAUSE = deferred(r" \(|, |; | — |: | \| ")


@dataclass(frozen=True)
class Signal:
    """A named number: its unit, a one-line doc, where it can come from — the inputs that show it
    (``signals/inputs.py``; none: any log that printed it) and the switch that shows it in a console log —
    and its ``label``, the few words that name it in a finding's evidence ("skipped share of the last 100
    steps: 23%"). A signal whose doc does not start with such words declares its label; by default it is
    the doc's head (``head_of_doc``).

    A verdict (a judgement with several outcomes) is a signal whose ``values`` name every outcome it can
    take: a rule words each one (``verdict:`` and ``messages:``, docs/rules.md), and the loader refuses
    a message for an outcome the signal never gives."""

    name: str
    unit: str
    doc: str
    per_step: bool = False
    shown_by: tuple[str, ...] = ()
    switch: str | None = None
    values: tuple[str, ...] = ()
    guarantees: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (value, signals it is only given with)
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", head_of_doc(self.name, self.doc))


def head_of_doc(name: str, doc: str) -> str:
    """The head of ``doc``, a few words (``ZeRO stage 0-3`` → ``ZeRO stage``): its clause before a
    parenthesis, comma or semicolon. A doc that is a list of values (``fp16, bf16 or fp32``) or whose head
    leans on what was cut gives way to the signal's name (``run precision``)."""
    head = _CLAUSE.split(doc, maxsplit=1)[0]
    head = re.sub(r" \d+-\d+$", "", head)
    if re.fullmatch(r"[a-z0-9_.]+_[a-z0-9_.]+", head):  # a config key says what it is
        return head
    if len(head.split()) < 2 or " or " in head or "|" in doc.split(" (")[0] or head.startswith(_NOT_A_NOUN):
        return name.replace(".", " ").replace("_", " ")
    return head


def verdict(name: str, doc: str, values: tuple[str, ...], guarantees: dict[str, tuple[str, ...]] | None = None,
            **where: Any) -> Signal:
    """A verdict signal: one of ``values``, the outcomes a rule may word one by one. ``guarantees`` names, per
    value, the signals the module always gives with it: that value's message may read them outside a clause."""
    return Signal(name, "verdict", doc, values=values, guarantees=tuple((guarantees or {}).items()), **where)


def shown_by(*inputs: str, switch: str | None = None) -> Callable[..., Signal]:
    """A maker of the signals that come from ``inputs`` and are shown in a console log by ``switch``."""
    return partial(Signal, shown_by=inputs, switch=switch)


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
    """A fold's window: columns ``[steps, values, values, …]`` (JSON lists) of the last ``WINDOW`` steps."""

    @staticmethod
    def tail(block: Steps, *names: str) -> list[list[Any]]:
        """The block's last ``WINDOW`` steps of these columns: all of a block that a window can keep."""
        return [block.columns[name][-WINDOW:] for name in names]

    @staticmethod
    def extend(window: list[list[Any]], columns: Sequence[Sequence[Any]]) -> None:
        """Append the same steps to every column (a block's ``tail``: its older steps could not stay)."""
        if not window:
            window.extend([] for _ in columns)
        for kept, new in zip(window, columns):
            kept.extend(new[-WINDOW:])
        if len(window[0]) > 2 * WINDOW:  # trimmed in halves: amortised O(1), never more than 2 × WINDOW held
            for kept in window:
                del kept[:-WINDOW]

    @staticmethod
    def series(window: list[list[Any]], column: int) -> StepSeries | None:
        """Column ``column`` of the last ``WINDOW`` steps as a series over their steps."""
        if not window:
            return None
        return StepSeries.of(window[0][-WINDOW:], window[column][-WINDOW:])


def last_known(values: Sequence[Any], count: int) -> list[int]:
    """Indexes of the last ``count`` values that are not None, oldest first (a look past the tail only
    when Nones are in it)."""
    start = max(len(values) - count, 0)
    found = [i for i in range(start, len(values)) if values[i] is not None]
    if len(found) < count and start:
        found = [i for i, v in enumerate(values) if v is not None][-count:]
    return found


def ratios(nums: Sequence[float | None], dens: Sequence[float | None]) -> list[float | None]:
    """num/den step by step, ``None`` where either side is missing or den is not positive."""
    return [n / d if n is not None and d is not None and d > 0 else None for n, d in zip(nums, dens)]


def nested(config: dict[str, Any] | None, path: str, default: Any = None) -> Any:
    """``nested(cfg, "zero_optimization.offload_param.device")`` without KeyErrors."""
    node: Any = config or {}
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node
