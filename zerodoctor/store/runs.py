"""Store: the queries behind the run view besides steps (``store/steps.py``) — runs, their rare events
and files, and the view's saved state.

A full read of a run happens once, when no saved view state matches the code (a new store, an
upgrade); every later judgement starts from the state saved with the file offsets.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from sqlalchemy import Connection, delete, func, insert, select, text, union, update

from zerodoctor.store import files as stored_files
from zerodoctor.store.db import storable_text
from zerodoctor.store.schema import events, run_state, runs, step_chunks



def list_runs(conn: Connection, file_ids: list[int] | None = None) -> list[tuple[int, str]]:
    """Runs in the store, or only those with events from ``file_ids``."""
    query = select(runs.c.id, runs.c.name).order_by(runs.c.id)
    if file_ids is not None:
        from_files = union(
            select(step_chunks.c.run_id).where(step_chunks.c.file_id.in_(file_ids)).distinct(),
            select(events.c.run_id).where(events.c.file_id.in_(file_ids)).distinct(),
        ).subquery()
        query = query.where(runs.c.id.in_(select(from_files.c.run_id)))
    return [(rid, name) for rid, name in conn.execute(query)]


def named(conn: Connection, name: str) -> int | None:
    """The id of the run called ``name``, None when the store has none."""
    return conn.execute(select(runs.c.id).where(runs.c.name == storable_text(name))).scalar()


def known_as(conn: Connection, name: str) -> list[str]:
    """The runs a person may mean by ``name``: the run so named; else those whose rank 0's ``run_start`` recorded
    ``name`` as its Slurm job id (``SLURM_JOB_ID``), its array job (``SLURM_ARRAY_JOB_ID``: every task) or task
    (``<array job>_<task>``, as Slurm's ``%A_%a`` writes it), or as its host (under Kubernetes, the pod's name);
    and a run read from sbatch's output file, named ``slurm-<job>`` by it.

    A person searches a job by the id the scheduler printed, not by the id zerodoctor gave the run. Only read
    when no run has the name: one ``run_start`` per run, by the (run, kind) index.
    """
    if named(conn, name) is not None:
        return [name]
    # a log read from sbatch's default output file, slurm-%j.out (an array's slurm-%A_%a.out), is named by it
    found: list[str] = [run for (run,) in conn.execute(select(runs.c.name).order_by(runs.c.id))
                        if run == f"slurm-{name}" or run.startswith(f"slurm-{name}_")]
    query = (select(runs.c.name, events.c.payload).join(runs, runs.c.id == events.c.run_id)
             .where(events.c.kind == "run_start", events.c.rank == 0).order_by(runs.c.id))
    for run, payload in conn.execute(query):
        start = json.loads(payload) if isinstance(payload, str) else dict(payload)
        env = start.get("env") or {}
        array = env.get("SLURM_ARRAY_JOB_ID")
        names = {env.get("SLURM_JOB_ID"), array, start.get("host"),
                 f"{array}_{env.get('SLURM_ARRAY_TASK_ID')}" if array else None}
        if name in names and run not in found:
            found.append(run)
    return found


def run_events(conn: Connection, run_id: int, *, kinds: tuple[str, ...] | None = None,
               exclude: tuple[str, ...] = (), upto_id: int | None = None) -> Iterator[dict[str, Any]]:
    """The run's non-step events in time order, as ``{**payload, rank, t, step, kind}`` (streamed); ``upto_id``:
    only those stored up to that id (a view's mark)."""
    query = (select(events.c.rank, events.c.kind, events.c.step, events.c.t, events.c.payload)
             .where(events.c.run_id == run_id).order_by(events.c.t, events.c.id))
    if upto_id is not None:
        query = query.where(events.c.id <= upto_id)
    if kinds is not None:
        query = query.where(events.c.kind.in_(kinds))
    if exclude:
        query = query.where(events.c.kind.not_in(exclude))
    for rank, kind, step, t, payload in conn.execute(query.execution_options(yield_per=10_000)):
        yield _event(rank, kind, step, t, payload)


def event_mark(conn: Connection, run_id: int, *, after_id: int | None = None) -> int | None:
    """The highest id of the run's events (past ``after_id``; None where there is none): what a view has read
    once it has read up to it. Past a mark, the primary key is read from the mark on (``run_id + 0``), not
    every event of the run by its index."""
    c = events.c
    where = c.run_id == run_id if after_id is None else (c.run_id + 0 == run_id) & (c.id > after_id)
    return conn.execute(select(func.max(c.id)).where(where)).scalar()


def events_between(conn: Connection, run_id: int, after_id: int | None, upto_id: int
                   ) -> Iterator[tuple[int | None, dict[str, Any]]]:
    """The run's events with ``after_id < id ≤ upto_id`` in the order they were stored, each with its file's id
    (from a mark, read by the primary key as ``event_mark`` reads them; with none, by the run's index)."""
    c = events.c
    where = (c.run_id == run_id) if after_id is None else (c.run_id + 0 == run_id) & (c.id > after_id)
    where &= c.id <= upto_id
    query = select(c.file_id, c.rank, c.kind, c.step, c.t, c.payload).where(where).order_by(c.id)
    for file_id, rank, kind, step, t, payload in conn.execute(query.execution_options(yield_per=10_000)):
        yield file_id, _event(rank, kind, step, t, payload)


def _event(rank: int, kind: str, step: int | None, t: float, payload: str | dict) -> dict[str, Any]:
    body = json.loads(payload) if isinstance(payload, str) else dict(payload)
    body.update(rank=rank, t=t, step=step, kind=kind)
    return body


def run_formats(conn: Connection, run_id: int) -> dict[str, str]:
    """Path → format of every file the run's rows came from."""
    holders = union(select(step_chunks.c.file_id).where(step_chunks.c.run_id == run_id).distinct(),
                    select(events.c.file_id).where(events.c.run_id == run_id).distinct()).subquery()
    return stored_files.formats(conn, select(holders.c.file_id))


def saved_state(conn: Connection, run_id: int, *, for_update: bool = False) -> tuple[str, int, str] | None:
    """``(version, generation, state)`` the run view saved for this run, if any.

    ``for_update``: the view is loaded to be folded and saved (``fold_lock``)."""
    if for_update:
        fold_lock(conn, run_id)
    query = select(run_state.c.version, run_state.c.generation, run_state.c.state).where(run_state.c.run_id == run_id)
    row = conn.execute(query).first()
    return (row[0], row[1], row[2]) if row else None


def saved_generation(conn: Connection, run_id: int) -> int | None:
    """The generation of the run's saved state, under ``fold_lock``: is the view in memory still the saved one?"""
    fold_lock(conn, run_id)
    return conn.execute(select(run_state.c.generation).where(run_state.c.run_id == run_id)).scalar()


def write_lock(conn: Connection, run_id: int) -> None:
    """Before a writer stores the run's rows, to the end of its transaction: writers of one run (one a node)
    never wait for each other, and a fold (``fold_lock``) waits until those in flight commit.

    A view reads the rows past its marks (ids), so it must never read while a writer holds an id it has not
    committed: a row committed later under a lower id would be past no mark, never folded. This is taken
    before the writer's first id. PostgreSQL's transaction-level advisory lock of the run, shared, and not
    the run's row (``FOR KEY SHARE``): a lock on a row lets new sharers pass a waiting ``FOR UPDATE``, and
    with 64 nodes' writers overlapping the fold waited seconds; the lock manager queues a sharer behind a
    waiting fold. SQLite has one writer at a time: nothing to take."""
    if conn.dialect.name == "postgresql":
        conn.execute(_SHARED, {"run": run_id})


def fold_lock(conn: Connection, run_id: int) -> None:
    """Before a view reads the run's rows past its marks, to the end of its transaction: it waits for the
    writers holding ``write_lock`` to commit, and the writers that come after wait for the fold. Two folds of
    one run take turns (another watcher that took the run over)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_EXCLUSIVE, {"run": run_id})


# One key per store (its schema) and run: the advisory locks of a database are the whole server's.
_KEY = "hashtextextended('zerodoctor-run/' || current_schema() || '/' || CAST(:run AS text), 0)"
_SHARED = text(f"SELECT pg_advisory_xact_lock_shared({_KEY})")
_EXCLUSIVE = text(f"SELECT pg_advisory_xact_lock({_KEY})")


def save_state(conn: Connection, run_id: int, version: str, generation: int, state: str) -> None:
    """Store the view's state in ``conn``'s transaction: it commits with the rows and offsets it covers."""
    values = {"version": version, "generation": generation, "state": state}
    done = conn.execute(update(run_state).where(run_state.c.run_id == run_id).values(**values))
    if not done.rowcount:
        conn.execute(insert(run_state).values(run_id=run_id, **values))


def forget_state(conn: Connection, run_ids: list[int]) -> None:
    """Drop saved states whose rows changed behind the view (a file's rows deleted): rebuilt on next load."""
    conn.execute(delete(run_state).where(run_state.c.run_id.in_(run_ids)))
