"""Store: rows of one run → ``RunData``, the in-memory view every signal reads.

Step rows are merged across ranks in SQL (one row per optimizer step), so signals walk
one series per run however many ranks wrote it; per-rank numbers come from a second
grouped query. Other kinds are few and arrive as their JSON payloads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Integer, cast, func, select, union

from zerodoctor.store.schema import events, runs, steps

# (name, aggregate across the ranks of one step): only what a signal (core or plugin) reads,
# since every ``watch`` judgement runs this query; add an aggregate with the signal that needs it.
_MERGED = (
    ("overflow", func.max(cast(steps.c.overflow, Integer))),
    ("loss_scale", func.min(steps.c.loss_scale)),
    ("loss_nonfinite", func.max(steps.c.nonfinite.op("&")(1))),
    ("grad_nonfinite", func.max(steps.c.nonfinite.op("&")(2))),
    ("lr", func.max(steps.c.lr)),
    ("micro_batches", func.max(steps.c.micro_batches)),
    ("step_time_s", func.max(steps.c.step_time_s)),
    ("fwd_s", func.avg(steps.c.fwd_s)),
    ("bwd_s", func.avg(steps.c.bwd_s)),
    ("optim_s", func.avg(steps.c.optim_s)),
    ("comm_s", func.avg(steps.c.comm_s)),
    ("alloc_retries", func.max(steps.c.alloc_retries)),
)

# (name, aggregate over one rank's steps), read the same way: batch (samples, micro_batches)
# and the datascale plugin (tokens).
_PER_RANK = (
    ("samples", func.sum(steps.c.samples)),
    ("tokens", func.sum(steps.c.tokens)),
    ("micro_batches", func.sum(steps.c.micro_batches)),
)


@dataclass
class RunData:
    """Everything stored about one run, shaped for signals.

    ``steps`` is column-oriented: ``steps["loss_scale"][i]`` belongs to optimizer step
    ``steps["step"][i]``, merged over the ranks that reported it.
    """

    run_id: int
    name: str
    steps: dict[str, list] = field(default_factory=dict)
    per_rank: dict[int, dict[str, Any]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def starts(self) -> list[dict[str, Any]]:
        return self.events.get("run_start", [])

    def first_start(self) -> dict[str, Any]:
        """rank 0's run_start (or the lowest rank's): config and facts shared by all ranks."""
        return min(self.starts, key=lambda e: e["rank"], default={})

    def ranks(self) -> list[int]:
        seen = set(self.per_rank)
        for kind_events in self.events.values():
            seen.update(e["rank"] for e in kind_events)
        return sorted(seen)


def list_runs(conn: Connection, file_ids: list[int] | None = None) -> list[tuple[int, str]]:
    """Runs in the store, or only those with events from ``file_ids``."""
    query = select(runs.c.id, runs.c.name).order_by(runs.c.id)
    if file_ids is not None:
        from_files = union(
            select(steps.c.run_id).where(steps.c.file_id.in_(file_ids)).distinct(),
            select(events.c.run_id).where(events.c.file_id.in_(file_ids)).distinct(),
        ).subquery()
        query = query.where(runs.c.id.in_(select(from_files.c.run_id)))
    return [(rid, name) for rid, name in conn.execute(query)]


def load_run(conn: Connection, run_id: int, name: str) -> RunData:
    run = RunData(run_id=run_id, name=name)
    merged = conn.execute(
        select(steps.c.step, *(agg.label(n) for n, agg in _MERGED))
        .where(steps.c.run_id == run_id)
        .group_by(steps.c.step)
        .order_by(steps.c.step)
    ).all()
    names = ["step", *(n for n, _ in _MERGED)]
    columns = list(zip(*merged)) if merged else [[] for _ in names]
    run.steps = {n: list(col) for n, col in zip(names, columns)}

    for row in conn.execute(
        select(steps.c.rank, *(agg.label(n) for n, agg in _PER_RANK))
        .where(steps.c.run_id == run_id)
        .group_by(steps.c.rank)
    ).mappings():
        run.per_rank[row["rank"]] = dict(row)

    for rank, kind, step, t, payload in conn.execute(
        select(events.c.rank, events.c.kind, events.c.step, events.c.t, events.c.payload)
        .where(events.c.run_id == run_id)
        .order_by(events.c.t, events.c.id)
    ):
        body = json.loads(payload) if isinstance(payload, str) else dict(payload)
        body.update(rank=rank, t=t, step=step)
        run.events.setdefault(kind, []).append(body)
    return run
