"""Store: step records → column chunks, and chunks → steps merged across ranks and totals per rank.

Nearly every event of a run is a step, and one SQL row per step cost more than everything
else ``diagnose`` does (an ``executemany`` of 25 columns: ~3.4 µs a step on SQLite). So the
steps of one rank from one stored batch are one row of ``step_chunks``: their columns as
arrays (numpy, little-endian int64 / float64) in one blob, with the step range, the row count
and the last time beside it for the queries (``events/columns.py`` has the arrays). The merges a
signal declares (min/max/sum/mean over the ranks of a step, sum/max/min over a rank's steps)
run on those arrays (``events/merges.py``, which a run folded without a store shares).

A live ``watch`` stores a few steps per rank per pass, so chunks are small there; once the
view has folded them, ``compact`` merges each rank's small chunks into one (a level up), so a
days-long run has thousands of chunks, not millions. A compacted chunk is marked ``folded``:
its rows are already in the view's totals, so an incremental scan skips it.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import msgspec
from sqlalchemy import Connection, delete, func, select

from zerodoctor.events.columns import Columns, Steps
from zerodoctor.events.merges import add_totals, merge
from zerodoctor.store.db import BulkInsert
from zerodoctor.store.schema import step_chunks

COMPACT_EVERY = 64  # small chunks of one rank that make one chunk a level up
# A chunk at least this long is never compacted: a batch read from a file's backlog (diagnose --db, watch
# catching up) stores ~2,300 rows a rank, which compaction only decoded and wrote again (22% of a 10M-event
# diagnose --db); 1,024 rows a chunk keep a million-step rank under 1,000 chunks
_SMALL_ROWS = 1024


# -- writing -------------------------------------------------------------------------


def store(conn: Connection, run_id: int, file_id: int, cols: Columns) -> tuple[float, float]:
    """Store one run's step columns read from ``file_id``, a chunk per rank, in ``conn``'s transaction.

    Returns the first and last step time."""
    times = cols.values["t"]
    _INSERT(conn, [_chunk(run_id, file_id, rank, part.without("rank", "line"))
                   for rank, part in cols.split("rank")])
    return float(times.min()), float(times.max())


_INSERT = BulkInsert(step_chunks)


def _chunk(run_id: int, file_id: int, rank: int, cols: Columns, *, level: int = 0) -> tuple:
    """The ``step_chunks`` row of one rank's columns, in ``_INSERT``'s column order; a chunk of a level above
    0 is a compaction's (folded)."""
    steps = cols.values["step"]
    row = {"run_id": run_id, "file_id": file_id, "rank": rank, "rows": cols.n, "first_step": int(steps.min()),
           "last_step": int(steps.max()), "last_t": float(cols.values["t"].max()), "level": level,
           "folded": level > 0, "summary": msgspec.msgpack.encode(cols.summary()), "columns": cols.encode()}
    return tuple(row[name] for name in _INSERT.columns)


def compact(conn: Connection, run_id: int, holders: Iterable[tuple[int, int]], folded_through: int) -> None:
    """Merge small chunks of each ``(file_id, rank)`` whose steps are all folded (``≤ folded_through``).

    ``COMPACT_EVERY`` chunks of one level make one chunk of the next, marked ``folded``: the view
    already holds its rows.
    """
    c = step_chunks.c
    # One grouped read names the holders with enough small chunks to merge: a look-up per holder cost a query
    # per rank that wrote, at every pass (4,096 of them at 4,096 ranks); most have fewer than COMPACT_EVERY.
    full = {tuple(row) for row in conn.execute(
        select(c.file_id, c.rank).where(c.run_id == run_id, c.level < 3, c.rows < _SMALL_ROWS,
                                        c.last_step <= folded_through)
        .group_by(c.file_id, c.rank, c.level).having(func.count() >= COMPACT_EVERY))}
    for file_id, rank in holders:
        if (file_id, rank) not in full:
            continue
        for level in range(3):
            # ``last_step + 0``: a bound no index serves, so the planner looks the holder up by its own index
            # (SQLite chose the run's (run_id, last_step) index and read every chunk of the run per holder:
            # at 4,096 ranks, 37 of a live pass's 64 s)
            ids = conn.execute(
                select(c.id).where(c.run_id == run_id, c.file_id == file_id, c.rank == rank, c.level == level,
                                   c.rows < _SMALL_ROWS, c.last_step + 0 <= folded_through)
                .order_by(c.id).limit(COMPACT_EVERY)).scalars().all()
            if len(ids) < COMPACT_EVERY:
                break
            parts = [Columns.decode(n, data) for n, data in conn.execute(
                select(c.rows, c.columns).where(c.id.in_(ids)).order_by(c.id))]
            _INSERT(conn, [_chunk(run_id, file_id, rank, Columns.concat(parts), level=level + 1)])
            conn.execute(delete(step_chunks).where(c.id.in_(ids)))


def forget_file(conn: Connection, file_id: int) -> list[int]:
    """Delete a file's chunks; returns the runs they were of."""
    run_ids = conn.execute(select(step_chunks.c.run_id).where(step_chunks.c.file_id == file_id)
                           .distinct()).scalars().all()
    conn.execute(delete(step_chunks).where(step_chunks.c.file_id == file_id))
    return list(run_ids)


# -- reading ---------------------------------------------------------------------------


def _chunks(conn: Connection, where: Any) -> Iterator[tuple[dict[str, Any], Columns]]:
    c = step_chunks.c
    query = select(c.id, c.file_id, c.rank, c.rows, c.first_step, c.last_step, c.last_t, c.columns).where(where)
    for row in conn.execute(query.order_by(c.id).execution_options(yield_per=256)).mappings():
        yield row, Columns.decode(row["rows"], row["columns"])


def _overlapping(run_id: int, lo: int | None, hi: int | None) -> Any:
    """The run's chunks that may hold a step in ``(lo, hi]`` (an open side: no bound)."""
    c = step_chunks.c
    where = c.run_id == run_id
    if lo is not None:
        where = where & (c.last_step > lo)
    if hi is not None:
        where = where & (c.first_step <= hi)
    return where


def rows_of(conn: Connection, run_id: int, *, lo: int | None = None, hi: int | None = None) -> Columns | None:
    """The run's step rows with ``lo < step ≤ hi``, each with its rank (``values["rank"]``), or None."""
    import numpy as np

    parts = []
    for meta, cols in _chunks(conn, _overlapping(run_id, lo, hi)):
        cols.values["rank"], cols.valid["rank"] = np.full(cols.n, meta["rank"], dtype=np.int64), None
        keep = cols.steps_between(lo, hi)
        parts.append(cols if keep.all() else cols.take(keep))
    return Columns.concat(parts) if parts else None


def merged_steps(conn: Connection, run_id: int, fields: dict[str, Any], *, after: int | None = None,
                 upto: int | None = None, block: int = 8192) -> Iterator[Steps]:
    """The run's steps in ``(after, upto]`` merged over ranks (``merge``), in step order, in blocks of
    at most ``block`` steps. A full read goes a window of steps at a time (about ``_WINDOW_ROWS`` rows
    decoded at once), so its memory is bounded however long the run."""
    c = step_chunks.c
    first, last, rows = conn.execute(select(func.min(c.first_step), func.max(c.last_step), func.sum(c.rows))
                                     .where(_overlapping(run_id, after, upto))).one()
    if not rows:
        return
    rows = int(rows)  # PostgreSQL sums a bigint as numeric
    lo = after if after is not None else first - 1
    end = last if upto is None else min(last, upto)
    width = max(1, -(-(end - lo) * _WINDOW_ROWS // rows))  # equal step ranges of about _WINDOW_ROWS rows
    below = after  # the window's lower bound; a whole run's first is open below (first - 1 is past int64 at -2**63)
    while lo < end:
        hi = min(lo + width, end)
        cols = rows_of(conn, run_id, lo=below, hi=hi)
        if cols is not None:
            merged = merge(cols, fields)
            for start in range(0, len(merged["step"]), block):
                yield Steps({k: v[start:start + block] for k, v in merged.items()})
        lo = below = hi


_WINDOW_ROWS = 1 << 18  # ~50 MB of decoded columns


def rank_totals(conn: Connection, run_id: int, aggregates: dict[str, tuple[str, str]], *,
                after_id: int | None = None, late_upto: int | None = None
                ) -> tuple[dict[int, dict[str, Any]], list[tuple[int, int]], set[int]]:
    """Per rank, over the run's chunks with ``id > after_id`` (all, when None) that are not ``folded``:
    their step count, first/last step and time, each declared ``name → (field, aggregate)``, the
    highest chunk id (``max_id``) and how many rows are for steps at or below ``late_upto`` (``late``).
    Also the ``(file_id, rank)`` pairs of the small ones among them (what ``compact`` looks at), and the
    files they were read from.

    A fold reads them under ``runs.fold_lock``, which waits for every writer of the run to commit, so ids
    past a mark are exactly the chunks stored since.
    """
    c = step_chunks.c
    where = c.run_id == run_id
    if after_id is not None:
        # ``run_id + 0``: read the chunks past the mark by their ids, not every chunk of the run by its index
        where = (c.run_id + 0 == run_id) & (c.id > after_id) & c.folded.is_(False)
    query = select(c.id, c.file_id, c.rank, c.rows, c.first_step, c.last_step, c.last_t, c.summary).where(where)
    totals: dict[int, dict[str, Any]] = {}
    holders: set[tuple[int, int]] = set()
    files: set[int] = set()
    for meta in conn.execute(query.order_by(c.id).execution_options(yield_per=1024)).mappings():
        files.add(meta["file_id"])
        if meta["rows"] < _SMALL_ROWS:
            holders.add((meta["file_id"], meta["rank"]))
        summary = msgspec.msgpack.decode(meta["summary"])
        new = {"steps": meta["rows"], "first_step": meta["first_step"], "last_step": meta["last_step"],
               "last_t": meta["last_t"], "max_id": meta["id"], "late": 0}
        if late_upto is not None and meta["first_step"] <= late_upto:  # rows for steps already merged
            # all of them when the chunk ends at or below (a rank whose steps come in a later batch than the others'
            # did: a file claiming thousands of ranks, BATCH_RANKS to a batch); only a chunk across it is read
            new["late"] = meta["rows"] if meta["last_step"] <= late_upto else int(
                (_columns_of(conn, meta["id"]).values["step"] <= late_upto).sum())
        for name, (field, agg) in aggregates.items():
            known = summary.get(field)
            new[name] = None if known is None else known[{"sum": 1, "min": 2, "max": 3}[agg]]
        old = totals.get(meta["rank"])
        totals[meta["rank"]] = new if old is None else add_totals(old, new, aggregates)
    return totals, sorted(holders), files


def _columns_of(conn: Connection, chunk_id: int) -> Columns:
    n, data = conn.execute(select(step_chunks.c.rows, step_chunks.c.columns).where(step_chunks.c.id == chunk_id)).one()
    return Columns.decode(n, data)


def step_range(conn: Connection, run_id: int) -> tuple[int | None, int | None]:
    """The run's first and last step (None, None without steps)."""
    c = step_chunks.c
    first, last = conn.execute(select(func.min(c.first_step), func.max(c.last_step)).where(c.run_id == run_id)).one()
    return first, last


def runs_of_files(conn: Connection, file_ids: list[int]) -> list[tuple[int, int]]:
    """``(file_id, run_id)`` pairs of the step chunks read from ``file_ids``."""
    c = step_chunks.c
    return [tuple(r) for r in conn.execute(select(c.file_id, c.run_id).where(c.file_id.in_(file_ids)).distinct())]


def chunk_past(conn: Connection, run_id: int, mark: int | None) -> bool:
    """Whether the run has a chunk stored past ``mark`` (any chunk, when None): read from the mark on by the
    primary key, as ``rank_totals`` reads them."""
    c = step_chunks.c
    where = c.run_id == run_id if mark is None else (c.run_id + 0 == run_id) & (c.id > mark)
    return conn.execute(select(c.id).where(where).limit(1)).first() is not None
