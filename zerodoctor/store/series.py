"""Store: step rows of one run → the series a plot draws, downsampled in SQL to a bounded size.

Steps are merged across ranks (one row per optimizer step), then grouped into at most
``points`` buckets of equal step range, each keeping the min and max of every column, so
a spike inside a bucket still shows. Rare marks are never bucketed: every overflow step,
every non-finite step and every OOM comes back as it is. Per-rank totals (time in
collectives vs step time) make a straggler visible. What comes back is bounded by
``points`` + the marks, however many steps and ranks the run had.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Integer, cast, func, select

from zerodoctor.store.runs import merged, run_events
from zerodoctor.store.schema import steps

POINTS = 800

# (column, merge across the ranks of one step): what the report's plots draw, merged as the
# run view merges (``runs.merged``: the same types on SQLite and PostgreSQL).
_MERGED = {
    "loss": "mean", "grad_norm": "max", "loss_scale": "min", "lr": "max", "step_time_s": "max",
    "fwd_s": "mean", "bwd_s": "mean", "optim_s": "mean", "comm_s": "mean", "samples": "sum",
    "mem_allocated_bytes": "max", "mem_reserved_bytes": "max", "mem_peak_bytes": "max",
}
COLUMNS = tuple(_MERGED)
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
    """The downsampled series, the marks and the per-rank totals of one run."""
    out = RunSeries()
    where = steps.c.run_id == run_id
    first, last = conn.execute(select(func.min(steps.c.step), func.max(steps.c.step)).where(where)).one()
    if first is not None:
        _buckets(conn, where, first, last, points, out)
        _marks(conn, where, out)
        out.ranks = [dict(r) for r in conn.execute(
            select(steps.c.rank, func.count().label("steps"), func.sum(steps.c.comm_s).label("comm_s"),
                   func.sum(steps.c.step_time_s).label("step_time_s"))
            .where(where).group_by(steps.c.rank).order_by(steps.c.rank)).mappings()]
    out.ooms = _ooms(conn, run_id)
    return out


def _merged(where: Any) -> Any:
    """One row per optimizer step, merged across ranks."""
    return (select(steps.c.step, *(merged(how, name).label(name) for name, how in _MERGED.items()))
            .where(where).group_by(steps.c.step).subquery())


def _buckets(conn: Connection, where: Any, first: int, last: int, points: int, out: RunSeries) -> None:
    merged = _merged(where)
    span = last - first + 1
    # integer division in SQLite and PostgreSQL alike: bucket 0..points-1 of equal step range
    bucket = cast((merged.c.step - first) * min(points, span) / span, Integer).label("bucket")
    aggs = [func.min(merged.c.step).label("lo"), func.max(merged.c.step).label("hi"), func.count().label("n")]
    for name in COLUMNS:
        col = merged.c[name]
        aggs += [func.min(col).label(f"{name}_min"), func.max(col).label(f"{name}_max"),
                 func.sum(col).label(f"{name}_sum"), func.count(col).label(f"{name}_count")]
    rows = conn.execute(select(bucket, *aggs).group_by(bucket).order_by(bucket)).mappings().all()
    out.first_step, out.last_step = first, last
    out.steps = sum(r["n"] for r in rows)
    out.lo, out.hi = [r["lo"] for r in rows], [r["hi"] for r in rows]
    for name in COLUMNS:
        for side in ("min", "max"):
            out.buckets[f"{name}_{side}"] = [r[f"{name}_{side}"] for r in rows]
        count = sum(r[f"{name}_count"] for r in rows)
        out.means[name] = sum(r[f"{name}_sum"] or 0 for r in rows) / count if count else None


def _marks(conn: Connection, where: Any, out: RunSeries) -> None:
    """Every overflow and non-finite step, unbucketed: the points a reader looks for."""
    marked = (select(steps.c.step, func.max(cast(steps.c.overflow, Integer)).label("overflow"),
                     func.max(steps.c.nonfinite).label("nonfinite"), func.min(steps.c.loss_scale).label("scale"))
              .where(where, (steps.c.overflow.is_(True)) | (steps.c.nonfinite != 0))
              .group_by(steps.c.step).order_by(steps.c.step))
    for step, overflow, nonfinite, scale in conn.execute(marked):
        if overflow:
            out.overflows.append((step, scale))
        if nonfinite:
            out.nonfinite.append(step)


def _ooms(conn: Connection, run_id: int) -> list[dict[str, Any]]:
    return [{"rank": e["rank"], "step": e["step"], "t": e["t"], **{k: e.get(k) for k in _OOM_FIELDS}}
            for e in run_events(conn, run_id, kinds=("oom",))]
