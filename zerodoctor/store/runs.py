"""Store: the queries behind the run view — one run's rows merged as signals declare, and its saved state.

Nothing here knows which fields a signal reads: the run view passes the declarations in
(``field → merge across ranks``, ``name → (field, aggregate over a rank's steps)``). A full
read of a run happens once, when no saved view state matches the code (a new store, an
upgrade); every later judgement starts from the state saved with the file offsets.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from sqlalchemy import (BigInteger, Connection, Float, Integer, case, cast, delete, func, insert, literal, select,
                        union, update)

from zerodoctor.store.schema import events, files, run_state, runs, steps

_MERGES = {"min": func.min, "max": func.max, "sum": func.sum, "mean": func.avg}


class Steps:
    """Rank-merged steps in step order, as columns: ``columns["step"][i]``, ``columns["t"][i]`` and
    each declared ``STEP_FIELDS`` name; ``None`` where no rank reported the field.

    Columns are plain lists: a fold may take a whole block at once (slices, ``sum``, ``max``),
    which costs a fraction of a Python call per step.
    """

    __slots__ = ("columns",)

    def __init__(self, columns: dict[str, list[Any]]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns["step"])

    def rows(self) -> Iterator[dict[str, Any]]:
        """One dict per step, for folds that go step by step."""
        names = list(self.columns)
        for values in zip(*self.columns.values()):
            yield dict(zip(names, values))



def merged(how: str, field: str):  # noqa: ANN202 - a SQLAlchemy column expression
    """``how`` over one step field, typed alike on every store: PostgreSQL sums a bigint as numeric and
    averages anything as numeric (a ``Decimal`` in Python), SQLite gives int and float."""
    column = _column(field)
    expr = _MERGES[how](column)
    if how == "mean":
        return cast(expr, Float)
    if how == "sum" and isinstance(column.type, Integer):
        return cast(expr, BigInteger)
    return expr


def _column(name: str):  # noqa: ANN202 - a SQLAlchemy column expression
    """The SQL for one step field; NaN became NULL at ingest, its bit in ``nonfinite`` keeps it."""
    if name == "loss_nonfinite":
        return steps.c.nonfinite.op("&")(1)
    if name == "grad_nonfinite":
        return steps.c.nonfinite.op("&")(2)
    if name == "overflow":
        return cast(steps.c.overflow, Integer)
    return steps.c[name]


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


def merged_steps(conn: Connection, run_id: int, fields: dict[str, str], *, after: int | None = None,
                 upto: int | None = None, block: int = 8192) -> Iterator[Steps]:
    """The run's steps in ``(after, upto]`` in order, each field merged over the ranks that reported it,
    in blocks of at most ``block`` steps (streamed).

    One grouped query over the (run, step) index: the merge runs in the database, not per row in Python.
    """
    labels = ["step", "t", *fields]
    query = select(steps.c.step, func.max(steps.c.t), *(merged(m, f) for f, m in fields.items()))
    query = query.where(steps.c.run_id == run_id)
    if after is not None:
        query = query.where(steps.c.step > after)
    if upto is not None:
        query = query.where(steps.c.step <= upto)
    query = query.group_by(steps.c.step).order_by(steps.c.step)
    result = conn.execute(query.execution_options(yield_per=block))  # the statement's, not the connection's
    while rows := result.fetchmany(block):
        yield Steps(dict(zip(labels, map(list, zip(*rows)))))


def rank_totals(conn: Connection, run_id: int, aggregates: dict[str, tuple[str, str]], *,
                after_id: int | None = None, late_upto: int | None = None) -> dict[int, dict[str, Any]]:
    """Per rank, over the run's step rows with ``id > after_id``: their count, first/last step and time,
    each declared ``name → (field, aggregate)``, the highest row id (``max_id``) and how many of them
    are for steps at or below ``late_upto`` (``late``).

    Rows of one run are written under its state's lock (``saved_state``), so ids past a mark are
    exactly the rows stored since: the scan covers the new rows only.
    """
    late = func.sum(case((steps.c.step <= late_upto, 1), else_=0)) if late_upto is not None else literal(0)
    query = select(steps.c.rank, func.count().label("steps"), func.min(steps.c.step).label("first_step"),
                   func.max(steps.c.step).label("last_step"), func.max(steps.c.t).label("last_t"),
                   func.max(steps.c.id).label("max_id"), late.label("late"),
                   *(merged(agg, field).label(name) for name, (field, agg) in aggregates.items())
                   ).group_by(steps.c.rank)
    if after_id is None:
        query = query.where(steps.c.run_id == run_id)
    else:
        # ``run_id + 0``: the (run, step) index would visit every row of the run; past a mark,
        # the primary key's range holds just the new rows, and the planner must take it.
        query = query.where((steps.c.run_id + 0) == run_id, steps.c.id > after_id)
    return {row["rank"]: {k: v for k, v in row.items() if k != "rank"} for row in conn.execute(query).mappings()}


def run_events(conn: Connection, run_id: int, *, kinds: tuple[str, ...] | None = None,
               exclude: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """The run's non-step events in time order, as ``{**payload, rank, t, step, kind}`` (streamed)."""
    query = (select(events.c.rank, events.c.kind, events.c.step, events.c.t, events.c.payload)
             .where(events.c.run_id == run_id).order_by(events.c.t, events.c.id))
    if kinds is not None:
        query = query.where(events.c.kind.in_(kinds))
    if exclude:
        query = query.where(events.c.kind.not_in(exclude))
    for rank, kind, step, t, payload in conn.execute(query.execution_options(yield_per=10_000)):
        body = json.loads(payload) if isinstance(payload, str) else dict(payload)
        body.update(rank=rank, t=t, step=step, kind=kind)
        yield body


def run_formats(conn: Connection, run_id: int) -> dict[str, str]:
    """Path → format of every file the run's rows came from."""
    holders = union(select(steps.c.file_id).where(steps.c.run_id == run_id).distinct(),
                    select(events.c.file_id).where(events.c.run_id == run_id).distinct()).subquery()
    return dict(conn.execute(select(files.c.path, files.c.format).where(files.c.id.in_(select(holders.c.file_id)))).all())


def saved_state(conn: Connection, run_id: int, *, for_update: bool = False) -> tuple[str, int, str] | None:
    """``(version, generation, state)`` the run view saved for this run, if any.

    ``for_update`` locks the row to the end of the transaction (PostgreSQL): two watchers
    writing ranks of one run take turns, each starting from the other's last save.
    """
    if for_update:
        _lock_run(conn, run_id)
    query = select(run_state.c.version, run_state.c.generation, run_state.c.state).where(run_state.c.run_id == run_id)
    row = conn.execute(query).first()
    return (row[0], row[1], row[2]) if row else None


def saved_generation(conn: Connection, run_id: int) -> int | None:
    """The generation of the run's saved state (locked as ``saved_state`` does): is ours still current?"""
    _lock_run(conn, run_id)
    return conn.execute(select(run_state.c.generation).where(run_state.c.run_id == run_id)).scalar()


def _lock_run(conn: Connection, run_id: int) -> None:
    """Lock the run's row, which exists before its first saved state does: two writers of a new run
    take turns too, instead of both inserting its first state (SQLite has one writer anyway)."""
    conn.execute(select(runs.c.id).where(runs.c.id == run_id).with_for_update())


def save_state(conn: Connection, run_id: int, version: str, generation: int, state: str) -> None:
    """Store the view's state in ``conn``'s transaction: it commits with the rows and offsets it covers."""
    values = {"version": version, "generation": generation, "state": state}
    done = conn.execute(update(run_state).where(run_state.c.run_id == run_id).values(**values))
    if not done.rowcount:
        conn.execute(insert(run_state).values(run_id=run_id, **values))


def forget_state(conn: Connection, run_ids: list[int]) -> None:
    """Drop saved states whose rows changed behind the view (a file's rows deleted): rebuilt on next load."""
    conn.execute(delete(run_state).where(run_state.c.run_id.in_(run_ids)))
