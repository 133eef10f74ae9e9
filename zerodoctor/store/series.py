"""Store: step chunks of one run → the series a plot draws, downsampled to a bounded size.

Steps are merged across ranks (one row per optimizer step), then grouped into at most
``points`` buckets of equal step range, each keeping the min and max of every column, so
a spike inside a bucket still shows. Rare marks are never bucketed: every overflow step,
every non-finite step and every OOM comes back as it is. Per-rank totals (time in
collectives vs step time) make a straggler visible. What comes back is bounded by
``points`` + the marks, however many steps and ranks the run had.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from zerodoctor.store import steps
from zerodoctor.store.runs import run_events
from zerodoctor.events import STEP_INTS

if TYPE_CHECKING:  # numpy (~100 ms) is imported where arrays are made: a run without steps never needs it
    import numpy as np

POINTS = 800

# (column, merge across the ranks of one step): what the report's plots draw, merged as the run
# view merges (``steps.merge``), and the marks' fields.
_MERGED = {
    "loss": "mean", "grad_norm": "max", "loss_scale": "min", "lr": "max", "step_time_s": "max",
    "fwd_s": "mean", "bwd_s": "mean", "optim_s": "mean", "comm_s": "mean", "samples": "sum",
    "mem_allocated_bytes": "max", "mem_reserved_bytes": "max", "mem_peak_bytes": "max",
}
COLUMNS = tuple(_MERGED)
_READ = {**_MERGED, "overflow": "max", "loss_nonfinite": "max", "grad_nonfinite": "max"}  # and the marks
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
    overflows: list[tuple[int, float | None]] = field(default_factory=list)  # (step, loss scale) of every skip
    nonfinite: list[int] = field(default_factory=list)  # steps whose loss or grad norm was NaN/inf
    ranks: list[dict[str, Any]] = field(default_factory=list)  # rank, steps, comm_s, step_time_s (sums)
    ooms: list[dict[str, Any]] = field(default_factory=list)  # rank, step, t and the allocator's numbers
    means: dict[str, float | None] = field(default_factory=dict)  # each column's mean over the run's steps

    def has(self, column: str) -> bool:
        return any(v is not None for v in self.buckets.get(column + "_max", ()))


def read_series(conn: Connection, run_id: int, points: int = POINTS) -> RunSeries:
    """The downsampled series, the marks and the per-rank totals of one run (one streamed read of its steps)."""
    import numpy as np

    out = RunSeries()
    first, last = steps.step_range(conn, run_id)
    if first is not None:
        span = last - first + 1
        buckets = _Buckets(min(points, span))
        for block in steps.merged_steps(conn, run_id, _READ):
            numbers = np.array(block.columns["step"], dtype=np.int64)
            buckets.add((numbers - first) * buckets.count // span, numbers, block.columns)
            _marks(block, out)
        buckets.fill(out)
        out.first_step, out.last_step = first, last
        totals, _ = steps.rank_totals(conn, run_id, _RANK_SUMS)
        out.ranks = [{"rank": rank, "steps": t["steps"], "comm_s": t["comm_s"], "step_time_s": t["step_time_s"]}
                     for rank, t in sorted(totals.items())]
    out.ooms = _ooms(conn, run_id)
    return out


_RANK_SUMS = {"comm_s": ("comm_s", "sum"), "step_time_s": ("step_time_s", "sum")}


class _Buckets:
    """Per bucket of equal step range: its first and last step, its step count, and per column
    the min, max, sum and count of the values present."""

    def __init__(self, count: int) -> None:
        import numpy as np

        self.count = count
        self.lo = np.full(count, np.iinfo(np.int64).max)
        self.hi = np.full(count, np.iinfo(np.int64).min)
        self.n = np.zeros(count, dtype=np.int64)
        self.stats = {name: [np.full(count, np.inf), np.full(count, -np.inf), np.zeros(count), np.zeros(count)]
                      for name in COLUMNS}

    def add(self, bucket: np.ndarray, numbers: np.ndarray, columns: dict[str, list[Any]]) -> None:
        import numpy as np

        np.minimum.at(self.lo, bucket, numbers)
        np.maximum.at(self.hi, bucket, numbers)
        np.add.at(self.n, bucket, 1)
        for name in COLUMNS:
            values = np.array(columns[name], dtype=np.float64)  # None → NaN
            present = ~np.isnan(values)
            lo, hi, total, count = self.stats[name]
            np.minimum.at(lo, bucket[present], values[present])
            np.maximum.at(hi, bucket[present], values[present])
            np.add.at(total, bucket[present], values[present])
            np.add.at(count, bucket[present], 1)

    def fill(self, out: RunSeries) -> None:
        used = self.n > 0
        out.steps = int(self.n.sum())
        out.lo, out.hi = self.lo[used].tolist(), self.hi[used].tolist()
        for name in COLUMNS:
            lo, hi, total, count = (a[used] for a in self.stats[name])
            some = count > 0
            integral = name in _INTEGRAL
            for side, values in (("min", lo), ("max", hi)):
                out.buckets[f"{name}_{side}"] = [(int(v) if integral else float(v)) if ok else None
                                                 for v, ok in zip(values.tolist(), some.tolist())]
            seen = count.sum()
            out.means[name] = float(total.sum() / seen) if seen else None


_INTEGRAL = {name for name, how in _MERGED.items() if name in STEP_INTS and how != "mean"}


def _marks(block: steps.Steps, out: RunSeries) -> None:
    """Every overflow and non-finite step, unbucketed: the points a reader looks for."""
    columns = block.columns
    for i, (step, overflow) in enumerate(zip(columns["step"], columns["overflow"])):
        if overflow:
            out.overflows.append((step, columns["loss_scale"][i]))
        if columns["loss_nonfinite"][i] or columns["grad_nonfinite"][i]:
            out.nonfinite.append(step)


def _ooms(conn: Connection, run_id: int) -> list[dict[str, Any]]:
    return [{"rank": e["rank"], "step": e["step"], "t": e["t"], **{k: e.get(k) for k in _OOM_FIELDS}}
            for e in run_events(conn, run_id, kinds=("oom",))]
