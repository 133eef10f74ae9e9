"""Events: step columns → steps merged across ranks, and totals per rank: the arithmetic on ``Columns``
that a stored run (``store/steps.py``, on its chunks) and a run folded in memory (``signals/held.py``,
``diagnose`` without a store) share, so both hand the folds the same steps. No SQL here: the one-shot
path imports this and never SQLAlchemy.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

from zerodoctor.events.columns import Columns

if TYPE_CHECKING:  # numpy (~100 ms) is imported where arrays are made: a run without steps never needs it
    import numpy as np

def merge(cols: Columns, fields: dict[str, Any]) -> dict[str, Any]:
    """One row per step, in step order: ``step``, ``t`` (the latest) and each ``name → merge`` over its ranks
    (``ranks``: not merged, the values by rank, a ``ByRank``), of the field ``name`` or, for ``name → (field,
    merge)``, of ``field`` under another name (one field merged two ways: the plots' mean loss beside a plugin's worst).

    A merge over ranks none of which reported the field is None.

    Rows come in step order from a probe's files (every rank's step i, then step i + 1): then nothing is
    reordered, and what several merges share (a field's column and mask, the group sizes) is found once.
    """
    import numpy as np

    steps = cols.values["step"]
    order = None if len(steps) < 2 or (steps[1:] >= steps[:-1]).all() else np.argsort(steps, kind="stable")
    if order is not None:
        steps = steps[order]
    starts = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]])
    groups = _Groups(starts, len(steps))
    out: dict[str, Any] = {"step": steps[starts].tolist(),
                           "t": np.maximum.reduceat(_ordered(cols.values["t"], order), starts).tolist()}
    ordered: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    done: dict[tuple[str, str], list[Any]] = {}  # a plot's series is often a signal's merge under another name
    for name, spec in fields.items():
        field, how = (name, spec) if isinstance(spec, str) else spec
        if field not in ordered:
            ordered[field] = (_ordered(cols.column(field), order), _ordered(cols.mask(field), order))
        values, mask = ordered[field]
        if how == "ranks":
            out[name] = _by_rank(values, mask, _ordered(cols.values["rank"], order), groups)
        elif (field, how) in done:
            out[name] = done[field, how].copy()  # a list of its own, as each merge had
        else:
            out[name] = done[field, how] = ([None] * len(starts) if mask is not None and not mask.any()
                                            else _reduce(values, mask, groups, how))
    return out


class _Groups:
    """The rows of each step among the ordered rows: where each begins, and (found when first asked) how many."""

    __slots__ = ("starts", "rows", "_sizes", "_bounds")

    def __init__(self, starts: np.ndarray, rows: int) -> None:
        self.starts, self.rows = starts, rows
        self._sizes: np.ndarray | None = None
        self._bounds: list[int] | None = None

    def sizes(self) -> np.ndarray:
        import numpy as np

        if self._sizes is None:
            self._sizes = np.diff(np.r_[self.starts, self.rows])
        return self._sizes

    def bounds(self) -> list[int]:
        """``starts`` and the end of the last group, as a list (a ``ByRank``'s)."""
        if self._bounds is None:
            self._bounds = [*self.starts.tolist(), self.rows]
        return self._bounds


def _by_rank(values: np.ndarray, mask: np.ndarray | None, ranks: np.ndarray, groups: _Groups) -> ByRank:
    """Each group's values by rank (the ``ranks`` merge: a fold that compares ranks step by step, over a
    window of its own), the ranks that did not report the field left out."""
    import numpy as np

    if mask is None:
        return ByRank(ranks, values, groups.bounds())
    kept = np.zeros(len(mask) + 1, dtype=np.int64)  # a group's bounds among the kept values
    np.cumsum(mask, out=kept[1:])  # (np.r_ to prepend the 0 took ten times as long)
    return ByRank(ranks[mask], values[mask], [*kept[groups.starts].tolist(), int(kept[-1])])


class ByRank(Sequence[dict[int, Any]]):
    """A ``ranks`` merge's column: per step, a dict rank → value, built when a fold reads that step.

    A fold that compares ranks reads a window of each rank's last steps, a few of a block's thousands:
    a dict per step and field built up front cost a third of a 1M-event ``diagnose``'s main process.
    Slices share the arrays, as the plain columns' lists are sliced into blocks.
    """

    __slots__ = ("_ranks", "_values", "_bounds")

    def __init__(self, ranks: np.ndarray, values: np.ndarray, bounds: list[int]) -> None:
        self._ranks, self._values, self._bounds = ranks, values, bounds  # step i's rows: bounds[i]:bounds[i + 1]

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def ranks(self) -> set[int]:
        """The ranks with a value at some step."""
        return set(self._ranks[self._bounds[0]:self._bounds[-1]].tolist())

    @overload
    def __getitem__(self, i: int) -> dict[int, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> ByRank: ...

    def __getitem__(self, i: int | slice) -> dict[int, Any] | ByRank:
        if isinstance(i, slice):
            start, stop, stride = i.indices(len(self))
            if stride != 1:
                raise ValueError("a ByRank column is sliced in steps of 1")
            return ByRank(self._ranks, self._values, self._bounds[start:max(start, stop) + 1])
        if not -len(self) <= i < len(self):
            raise IndexError("step index out of range")
        a, b = self._bounds[i % len(self)], self._bounds[i % len(self) + 1]
        return dict(zip(self._ranks[a:b].tolist(), self._values[a:b].tolist()))


def _ordered(values: np.ndarray | None, order: np.ndarray | None) -> np.ndarray | None:
    return values if values is None or order is None else values[order]


def _reduce(values: np.ndarray, mask: np.ndarray | None, groups: _Groups, how: str) -> list[Any]:
    """``how`` of each group of ``values``, None where the mask has no value."""
    import numpy as np

    starts = groups.starts
    if values.dtype == bool:
        values = values.astype(np.int64)
    floating = values.dtype == np.float64
    if how == "max":
        fill = -np.inf if floating else np.iinfo(np.int64).min
        result = np.maximum.reduceat(values if mask is None else np.where(mask, values, fill), starts)
    elif how == "min":
        fill = np.inf if floating else np.iinfo(np.int64).max
        result = np.minimum.reduceat(values if mask is None else np.where(mask, values, fill), starts)
    else:
        total = np.add.reduceat(values if mask is None else np.where(mask, values, 0), starts)
        if how == "mean":
            counts = groups.sizes() if mask is None else np.add.reduceat(mask.astype(np.int64), starts)
            result = total / np.maximum(counts, 1)
        else:
            result = total
    out = result.tolist()
    if mask is not None:
        present = np.logical_or.reduceat(mask, starts)
        for i in np.flatnonzero(~present).tolist():
            out[i] = None
    return out


def add_totals(old: dict[str, Any], new: dict[str, Any], aggregates: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """One rank's totals over two sets of its rows (``steps``, first/last step and time, each aggregate)."""
    out = {"steps": old["steps"] + new["steps"], "first_step": min(old["first_step"], new["first_step"]),
           "last_step": max(old["last_step"], new["last_step"]), "last_t": max(old["last_t"], new["last_t"])}
    for key in ("max_id", "late"):
        if key in old or key in new:
            out[key] = (max if key == "max_id" else operator.add)(old.get(key, 0), new.get(key, 0))
    for name, (_, agg) in aggregates.items():
        a, b = old.get(name), new.get(name)
        out[name] = (b if a is None else a if b is None else
                     a + b if agg == "sum" else max(a, b) if agg == "max" else min(a, b))
    return out
