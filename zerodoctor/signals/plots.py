"""Signals, plots: the rank-merged steps a run's plots draw, kept as a fold of at most ``POINTS`` buckets.

A page of a run three days old must cost what a page of a run one hour old costs, so the plot
series is not read back from the store for each page: it is kept up to date as the steps are
folded, like every signal. Buckets cover equal step ranges (``width`` steps each, the width a
power of two); when the run outgrows ``POINTS`` buckets the width doubles and neighbours merge,
so a run holds between ``POINTS / 2`` and ``POINTS`` buckets whatever its length. Each bucket
keeps the min and max of every column (a spike inside a bucket still shows); the marks a reader
looks for (every overflow, every non-finite step) are kept unbucketed, the last ``MAX_MARKS`` of
each. The merges across ranks are declared here like any module's (``STEP_FIELDS``), under names of
the plots' own (``plot_loss``), so the store merges them with the signals' fields in one read, and a
plugin may still merge a field its own way (the docs' worst loss across ranks). The profiled steps'
``lanes`` (``trace`` events) are kept as they come, for the timeline: a trace carries at most
``MAX_LANES`` ranges per row and rank, and so does the fold (a rank profiled again drops its oldest).

This module names no signal: it only keeps what ``series`` turns into the report's ``RunSeries``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from zerodoctor.events import STEP_INTS
from zerodoctor.signals import view as runview
from zerodoctor.signals.view import RunView, Steps

POINTS = 800
_PREFIX = "plot_"  # the fold's merged columns: plot_loss is loss as the plots merge it
MAX_MARKS = 2000  # overflow / non-finite marks kept (the latest): a plot holds no more that can be told apart
MAX_LANES = 2000  # timeline ranges kept per row and rank (sources/trace_lanes.py: what one trace carries)

READS = ()

SIGNALS: list = []
FOLD_EVENTS = ("trace",)  # their lanes: the timeline of the profiled window
# (column, merge across the ranks of one step): what the plots draw
_PLOTTED = {
    "loss": "mean", "grad_norm": "max", "loss_scale": "min", "lr": "max", "step_time_s": "max",
    "fwd_s": "mean", "bwd_s": "mean", "optim_s": "mean", "comm_s": "mean", "samples": "sum",
    "mem_allocated_bytes": "max", "mem_reserved_bytes": "max", "mem_peak_bytes": "max",
}
COLUMNS = tuple(_PLOTTED)
_MARKS = {"overflow": "max", "loss_nonfinite": "max", "grad_nonfinite": "max"}
# merged under names of its own (``plot_loss``…): a plugin may merge the same field its own way
STEP_FIELDS = {_PREFIX + name: (name, how) for name, how in {**_PLOTTED, **_MARKS}.items()}
RANK_FIELDS = {"plot_comm_s": ("comm_s", "sum"), "plot_step_time_s": ("step_time_s", "sum")}
_INTEGRAL = {name for name, how in _PLOTTED.items() if name in STEP_INTS and how != "mean"}
_OOM_FIELDS = ("requested_bytes", "allocated_bytes", "reserved_bytes", "free_bytes", "capacity_bytes")


@dataclass
class RunSeries:
    """What the plots of one run draw; ``buckets[col + "_min"][i]`` covers steps ``lo[i]``–``hi[i]``."""

    first_step: int | None = None
    last_step: int | None = None
    steps: int = 0
    lo: list[int] = field(default_factory=list)
    hi: list[int] = field(default_factory=list)
    buckets: dict[str, list[float | None]] = field(default_factory=dict)
    overflows: list[tuple[int, float | None]] = field(default_factory=list)  # (step, loss scale) of the skips
    nonfinite: list[int] = field(default_factory=list)  # steps whose loss or grad norm was NaN/inf
    ranks: list[dict[str, Any]] = field(default_factory=list)  # rank, steps, comm_s, step_time_s (sums)
    ooms: list[dict[str, Any]] = field(default_factory=list)  # rank, step, t and the allocator's numbers
    means: dict[str, float | None] = field(default_factory=dict)  # each column's mean over the run's steps
    # per profiled step of a rank: rank, t, step, file, from_s (after the trace's first step), timeline, rows
    lanes: list[dict[str, Any]] = field(default_factory=list)

    def has(self, column: str) -> bool:
        return any(v is not None for v in self.buckets.get(column + "_max", ()))


@dataclass
class Fold(runview.Fold):
    """Buckets ``first + i * width`` … ``+ width - 1``: their first and last step seen, their step count,
    and per column the min and max present (None: no value there); per column the run's sum and count."""

    VERSION = 1  # of the saved state: bump it when the fields or what they hold change
    judged: ClassVar[bool] = False  # no signal reads it: a judgement's copy of the view leaves it out
    # Not saved with the view: ~180 KB of JSON per save at 800 buckets would triple what a live watch
    # writes per commit and run; a restarted watch folds it again, once, for the first page it writes.
    saved: ClassVar[bool] = False

    first: int | None = None
    width: int = 1
    lo: list[int | None] = field(default_factory=list)
    hi: list[int | None] = field(default_factory=list)
    n: list[int] = field(default_factory=list)
    mins: dict[str, list[float | None]] = field(default_factory=dict)
    maxs: dict[str, list[float | None]] = field(default_factory=dict)
    totals: dict[str, list[float]] = field(default_factory=dict)  # column → [sum, count]
    overflows: list[list[Any]] = field(default_factory=list)  # [step, loss scale]
    nonfinite: list[int] = field(default_factory=list)
    lanes: list[dict[str, Any]] = field(default_factory=list)  # as RunSeries.lanes

    def event(self, event: dict[str, Any]) -> None:
        """A profiled step's lanes; a rank past ``MAX_LANES`` ranges in a row loses its oldest steps'."""
        if not event.get("lanes"):
            return
        self.lanes.append({"rank": event["rank"], "t": event["t"], "step": event.get("step"),
                           "file": event.get("file"), "from_s": event.get("lanes_from_s") or 0.0,
                           "timeline": event.get("timeline"), "rows": event["lanes"]})
        while True:
            mine = [kept for kept in self.lanes if kept["rank"] == event["rank"]]
            most = max(sum(len(kept["rows"].get(row, ())) for kept in mine) for row in event["lanes"]) // 2
            if len(mine) < 2 or most <= MAX_LANES:
                return
            self.lanes.remove(min(mine, key=lambda kept: kept["t"]))

    def add_steps(self, block: Steps, view: RunView) -> None:
        import numpy as np

        columns = block.columns
        numbers = columns["step"]
        if self.first is None:
            self.first = numbers[0]
        while (numbers[-1] - self.first) // self.width >= POINTS:
            self._halve()
        # in Python ints: steps span the whole int64 range (-1 … 2**63 - 1), whose difference numpy would wrap
        index = np.array([(n - self.first) // self.width for n in numbers], dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
        ends = np.r_[starts[1:], len(index)] - 1
        at = index[starts].tolist()
        self._grow(at[-1] + 1)
        for b, start, end in zip(at, starts.tolist(), ends.tolist()):
            lo, hi, count = numbers[start], numbers[end], end - start + 1
            self.lo[b] = lo if self.lo[b] is None else self.lo[b]
            self.hi[b] = hi
            self.n[b] += count
        for name in COLUMNS:
            values = np.array(columns[_PREFIX + name], dtype=np.float64)  # None → NaN
            present = ~np.isnan(values)
            if not present.any():
                continue
            total = self.totals.setdefault(name, [0.0, 0])
            total[0] += float(values[present].sum())
            total[1] += int(present.sum())
            mins, maxs = self._column(name)
            # fmin/fmax skip NaN: a bucket of this block with no value of the column comes out NaN
            lows, highs = np.fmin.reduceat(values, starts).tolist(), np.fmax.reduceat(values, starts).tolist()
            for b, low, high in zip(at, lows, highs):
                if low == low:  # not NaN
                    mins[b] = low if mins[b] is None else min(mins[b], low)
                    maxs[b] = high if maxs[b] is None else max(maxs[b], high)
        self._marks(columns)

    def _marks(self, columns: dict[str, list[Any]]) -> None:
        overflows, scales = columns[_PREFIX + "overflow"], columns[_PREFIX + "loss_scale"]
        loss_bad, grad_bad = columns[_PREFIX + "loss_nonfinite"], columns[_PREFIX + "grad_nonfinite"]
        for i, step in enumerate(columns["step"]):
            if overflows[i]:
                self.overflows.append([step, scales[i]])
            if loss_bad[i] or grad_bad[i]:
                self.nonfinite.append(step)
        del self.overflows[:-MAX_MARKS], self.nonfinite[:-MAX_MARKS]

    def _column(self, name: str) -> tuple[list[float | None], list[float | None]]:
        if name not in self.mins:
            self.mins[name], self.maxs[name] = [None] * len(self.n), [None] * len(self.n)
        return self.mins[name], self.maxs[name]

    def _grow(self, count: int) -> None:
        more = count - len(self.n)
        if more > 0:
            self.lo += [None] * more
            self.hi += [None] * more
            self.n += [0] * more
            for name in self.mins:
                self.mins[name] += [None] * more
                self.maxs[name] += [None] * more

    def _halve(self) -> None:
        """Twice the width: bucket ``i`` becomes old buckets ``2i`` and ``2i + 1`` merged."""
        self.width *= 2
        self.lo = [_pair(self.lo, i, min) for i in range(0, len(self.lo), 2)]
        self.hi = [_pair(self.hi, i, max) for i in range(0, len(self.hi), 2)]
        self.n = [sum(self.n[i:i + 2]) for i in range(0, len(self.n), 2)]
        for name in self.mins:
            self.mins[name] = [_pair(self.mins[name], i, min) for i in range(0, len(self.mins[name]), 2)]
            self.maxs[name] = [_pair(self.maxs[name], i, max) for i in range(0, len(self.maxs[name]), 2)]


def _pair(values: list[Any], i: int, pick: Any) -> Any:
    present = [v for v in values[i:i + 2] if v is not None]
    return pick(present) if present else None


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    return {}


def series(view: RunView | None) -> RunSeries:
    """The run's plot series from its view: the buckets that hold steps, the marks, the per-rank
    totals and the OOMs; bounded by ``POINTS`` + the marks however long the run is."""
    out = RunSeries()
    if view is None:
        return out
    fold: Fold = view.fold(__name__)
    used = [i for i, count in enumerate(fold.n) if count]
    if used:
        out.first_step, out.last_step = fold.lo[used[0]], fold.hi[used[-1]]
        out.steps = sum(fold.n)
        out.lo, out.hi = [fold.lo[i] for i in used], [fold.hi[i] for i in used]
    for name in COLUMNS:
        mins, maxs = fold.mins.get(name), fold.maxs.get(name)
        whole = int if name in _INTEGRAL else float
        for side, kept in (("min", mins), ("max", maxs)):
            out.buckets[f"{name}_{side}"] = [None if kept is None or kept[i] is None else whole(kept[i]) for i in used]
        total, count = fold.totals.get(name, (0.0, 0))
        out.means[name] = total / count if count else None
    out.overflows = [(step, scale) for step, scale in fold.overflows]
    out.nonfinite = list(fold.nonfinite)
    out.ranks = [{"rank": rank, "steps": t["steps"], "comm_s": t.get("plot_comm_s"),
                  "step_time_s": t.get("plot_step_time_s")} for rank, t in sorted(view.per_rank.items())]
    out.ooms = [{"rank": e["rank"], "step": e.get("step"), "t": e["t"], **{k: e.get(k) for k in _OOM_FIELDS}}
                for e in view.events.get("oom", [])]
    out.lanes = sorted(fold.lanes, key=lambda kept: (kept["rank"], kept["file"] or "", kept["from_s"]))
    return out
