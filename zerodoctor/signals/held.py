"""Run view, without a store: a run's step rows held in memory until their step is finished → merged steps
and per-rank totals, as ``store/steps.py`` gives them from stored chunks.

``diagnose`` without ``--db`` folds each run straight from the batches it reads: a batch's step columns
are held here, each rank's totals taken as they arrive, and once a step is finished (``RunView.settle``)
its rows are merged across ranks by the same arithmetic (``events/merges.py``), handed to the folds and
let go. What is held is the steps still waiting for a lagging rank (at most ``MAX_PENDING`` steps past
the slowest), never the run.
"""

from __future__ import annotations

from typing import Any, Iterator

from zerodoctor.events.columns import Columns, Steps
from zerodoctor.events.merges import add_totals, merge


class HeldSteps:
    """One run's step rows not yet handed to its folds, and the per-rank totals not yet taken."""

    def __init__(self) -> None:
        self.parts: list[Columns] = []
        self._totals: dict[int, dict[str, Any]] = {}

    def add(self, cols: Columns, aggregates: dict[str, tuple[str, str]], *, late_upto: int | None) -> None:
        """Take one batch's step columns of this run (``rank`` among them). Rows for a step at or below
        ``late_upto`` (already merged) count in their rank's totals (``late``) but are not held: the merged
        series has that step already, as a stored run's has."""
        import numpy as np

        ranks = cols.values["rank"]
        order = None if (ranks == ranks[0]).all() else np.argsort(ranks, kind="stable")
        ordered = ranks if order is None else ranks[order]
        edges = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), cols.n]  # each rank's rows
        # each rank's rows of the fields its totals read, in their order, as ``cols.split`` would give them
        # (so a float's sum is numpy's over the same values in the same order): no other column is copied
        fields = {field for field, _ in aggregates.values()}
        picked = {name: (column, cols.mask(name)) for name, column in
                  (("step", cols.values["step"]), ("t", cols.values["t"]),
                   *((f, cols.values[f]) for f in fields if f in cols.values))}
        if order is not None:
            picked = {name: (column[order], None if mask is None else mask[order])
                      for name, (column, mask) in picked.items()}
        for lo, hi in zip(edges, edges[1:]):
            rank = int(ordered[lo])
            steps = picked["step"][0][lo:hi]
            late = 0 if late_upto is None else int((steps <= late_upto).sum())
            new = {"steps": hi - lo, "first_step": int(steps.min()), "last_step": int(steps.max()),
                   "last_t": float(picked["t"][0][lo:hi].max()), "late": late,
                   **{name: _total(*picked[field], lo, hi, agg) if field in picked else None
                      for name, (field, agg) in aggregates.items()}}
            old = self._totals.get(rank)
            self._totals[rank] = new if old is None else add_totals(old, new, aggregates)
        if late_upto is not None:
            keep = cols.values["step"] > late_upto
            if not keep.all():
                cols = cols.take(np.flatnonzero(keep))
        if cols.n:
            self.parts.append(cols)

    def take_totals(self) -> dict[int, dict[str, Any]]:
        """Per rank, the totals of the rows added since the last call (the keys ``store.steps.rank_totals`` gives)."""
        totals, self._totals = self._totals, {}
        return totals

    def merged(self, fields: dict[str, Any], *, after: int | None, upto: int | None,
               block: int = 8192) -> Iterator[Steps]:
        """The held steps in ``(after, upto]`` merged over ranks, in step order, in blocks of at most ``block``."""
        import numpy as np

        if not self.parts:
            return
        cols = self.parts[0] if len(self.parts) == 1 else Columns.concat(self.parts)
        self.parts = [cols]
        keep = cols.steps_between(after, upto)
        if not keep.any():
            return
        merged = merge(cols if keep.all() else cols.take(np.flatnonzero(keep)), fields)
        for start in range(0, len(merged["step"]), block):
            yield Steps({k: v[start:start + block] for k, v in merged.items()})

    def drop_through(self, step: int | None) -> None:
        """Let go of the rows for steps at or below ``step``: the folds have had them."""
        import numpy as np

        if step is None or not self.parts:
            return
        cols = self.parts[0] if len(self.parts) == 1 else Columns.concat(self.parts)
        keep = cols.values["step"] > step
        self.parts = [] if not keep.any() else [cols if keep.all() else cols.take(np.flatnonzero(keep))]


def _total(column: Any, mask: Any, lo: int, hi: int, agg: str) -> Any:
    """``agg`` of one rank's rows ``lo:hi`` of a column where the mask holds (a Python number; None: no value),
    as ``Columns.summary`` finds it."""
    values = column[lo:hi] if mask is None else column[lo:hi][mask[lo:hi]]
    if not len(values):
        return None
    return (values.sum() if agg == "sum" else values.min() if agg == "min" else values.max()).item()
