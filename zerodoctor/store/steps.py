"""Store: step records → column chunks, and chunks → steps merged across ranks and totals per rank.

Nearly every event of a run is a step, and one SQL row per step cost more than everything
else ``diagnose`` does (an ``executemany`` of 25 columns: ~3.4 µs a step on SQLite). So the
steps of one rank from one stored batch are one row of ``step_chunks``: their columns as
arrays (numpy, little-endian int64 / float64) in one blob, with the step range, the row count
and the last time beside it for the queries. The merges a signal declares (min/max/sum/mean
over the ranks of a step, sum/max/min over a rank's steps) run on those arrays.

Missing is explicit: a float column is NaN where the event had no value (a non-finite loss or
grad norm is flagged in ``nonfinite`` and stored NaN as well, as SQL stores it NULL); an int
column that lacks a value anywhere in a chunk carries a validity mask beside it.

A live ``watch`` stores a few steps per rank per pass, so chunks are small there; once the
view has folded them, ``compact`` merges each rank's small chunks into one (a level up), so a
days-long run has thousands of chunks, not millions. A compacted chunk is marked ``folded``:
its rows are already in the view's totals, so an incremental scan skips it.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Iterable, Iterator

import msgspec
import numpy as np
from sqlalchemy import Connection, delete, func, insert, select

from zerodoctor.events import StepRecord
from zerodoctor.store.schema import STEP_FLOATS, STEP_INTS, step_chunks

FLOATS = ("t", *STEP_FLOATS)
INTS = ("step", "rank", "nonfinite", *STEP_INTS)
_NONFINITE = {"loss_nonfinite": 1, "grad_nonfinite": 2}  # derived fields: bits of ``nonfinite``
_FLAGGED = ("loss", "grad_norm")
COMPACT_EVERY = 64  # small chunks of one rank that make one chunk a level up
_SMALL_ROWS = 4096  # a chunk at least this long is never compacted
_FIELDS = ("step", "rank", *FLOATS, *STEP_INTS)
_fields_of = operator.attrgetter(*_FIELDS)
_run_of = operator.attrgetter("run")
_EXACT = float(2**53)  # float64 holds every integer below it


class Columns:
    """Rows of step columns: ``values[name]`` an array, ``valid[name]`` its mask (None: every row has a value)."""

    __slots__ = ("n", "values", "valid")

    def __init__(self, n: int, values: dict[str, np.ndarray], valid: dict[str, np.ndarray | None]) -> None:
        self.n, self.values, self.valid = n, values, valid

    @classmethod
    def of(cls, records: list[StepRecord]) -> Columns:
        """The columns of step records, in the order read (``rank`` among them).

        One C-level pass turns the records into a float64 matrix (``None`` becomes NaN): a
        column apiece costs twice as much. Integers come back exactly from it below 2**53; a
        column holding a larger one is taken again from the records as Python ints.
        """
        n = len(records)
        matrix = np.array(list(map(_fields_of, records)), dtype=np.float64).reshape(n, len(_FIELDS))
        values: dict[str, np.ndarray] = {}
        valid: dict[str, np.ndarray | None] = {}
        for j, name in enumerate(_FIELDS):
            column = matrix[:, j]
            present = ~np.isnan(column)
            if name in FLOATS:
                if present.any() or name in _FLAGGED:  # all NaN may still be values: non-finite losses
                    values[name], valid[name] = np.ascontiguousarray(column), None
                continue
            if not present.any():
                continue  # an integer field no record has: absent, as in the events
            exact = np.abs(column[present]).max() < _EXACT
            ints = (np.where(present, column, 0).astype(np.int64) if exact else
                    np.array([v if v is not None else 0 for v in map(operator.attrgetter(name), records)],
                             dtype=np.int64))
            values[name], valid[name] = ints, None if present.all() else present
        # NaN or inf in loss / grad norm (a value, not a gap): flagged, then stored as missing
        nonfinite = np.zeros(n, dtype=np.int64)
        for name, bit in zip(_FLAGGED, (1, 2)):
            column = values[name]
            bad = ~np.isfinite(column)
            if not bad.any():
                continue
            gaps = list(map(operator.attrgetter(name), records)).count(None)
            if gaps == np.isnan(column).sum():  # every NaN was a gap: only infinities are values
                bad &= ~np.isnan(column)
            else:
                bad &= np.array([getattr(r, name) is not None for r in records])
            nonfinite |= np.where(bad, bit, 0)
            column[bad] = np.nan
        values["nonfinite"], valid["nonfinite"] = nonfinite, None
        return cls(n, values, valid)

    def split(self, by: str) -> Iterator[tuple[int, Columns]]:
        """``(value, rows)`` for each value of an integer column, rows in their order."""
        keys = self.values[by]
        if (keys == keys[0]).all():
            yield int(keys[0]), self
            return
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(order)]):
            yield int(ordered[lo]), self.take(order[lo:hi])

    @classmethod
    def concat(cls, parts: list[Columns]) -> Columns:
        if len(parts) == 1:
            return parts[0]
        names = set().union(*(p.values for p in parts))
        values, valid = {}, {}
        for name in names:
            values[name] = np.concatenate([p.values[name] if name in p.values else _missing(name, p.n) for p in parts])
            if any(p.valid.get(name) is not None or name not in p.values for p in parts):
                valid[name] = np.concatenate([_mask(p, name) for p in parts])
            else:
                valid[name] = None
        return cls(sum(p.n for p in parts), values, valid)

    def take(self, index: np.ndarray) -> Columns:
        return Columns(len(index) if index.dtype != bool else int(index.sum()),
                       {k: v[index] for k, v in self.values.items()},
                       {k: (m[index] if m is not None else None) for k, m in self.valid.items()})

    def mask(self, name: str) -> np.ndarray | None:
        """Where ``name`` has a value (None: everywhere), NaN counted as missing for floats."""
        if name in _NONFINITE:
            return None
        if name not in self.values:
            return np.zeros(self.n, dtype=bool)
        if self.values[name].dtype == np.float64:
            return ~np.isnan(self.values[name])
        return self.valid[name]

    def column(self, name: str) -> np.ndarray:
        if name in _NONFINITE:
            return (self.values["nonfinite"] & _NONFINITE[name]) != 0
        return self.values[name] if name in self.values else _missing(name, self.n)

    def encode(self) -> bytes:
        blob: dict[str, bytes] = {}
        for name, column in self.values.items():
            blob[name] = column.astype(column.dtype.newbyteorder("<"), copy=False).tobytes()
            mask = self.valid.get(name)
            if mask is not None:
                blob[name + "?"] = np.packbits(mask).tobytes()
        return msgspec.msgpack.encode(blob)

    @classmethod
    def decode(cls, n: int, data: bytes) -> Columns:
        blob = msgspec.msgpack.decode(data)
        values, valid = {}, {}
        for name, raw in blob.items():
            if name.endswith("?"):
                continue
            values[name] = np.frombuffer(raw, dtype="<f8" if name in FLOATS else "<i8")
            mask = blob.get(name + "?")
            valid[name] = None if mask is None else np.unpackbits(np.frombuffer(mask, dtype=np.uint8), count=n).astype(bool)
        return cls(n, values, valid)


def _missing(name: str, n: int) -> np.ndarray:
    return np.full(n, np.nan) if name in FLOATS else np.zeros(n, dtype=np.int64)


def _mask(part: Columns, name: str) -> np.ndarray:
    if name not in part.values:
        return np.zeros(part.n, dtype=bool)
    mask = part.valid.get(name)
    return np.ones(part.n, dtype=bool) if mask is None else mask


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



# -- writing -------------------------------------------------------------------------


def store(conn: Connection, file_id: int, records: list[StepRecord], run_id: Callable[[str], int]
          ) -> dict[int, tuple[float, float]]:
    """Store step records read from ``file_id``, one chunk per (run, rank), in ``conn``'s transaction.

    ``run_id`` gives a run name's id. Returns each run's first and last step time.
    """
    names = set(map(_run_of, records))
    chunks = []
    spans: dict[int, tuple[float, float]] = {}
    for name in sorted(names):
        rid = run_id(name)
        of_run = records if len(names) == 1 else [r for r in records if r.run == name]
        everything = Columns.of(of_run)
        times = everything.values["t"]
        spans[rid] = (float(times.min()), float(times.max()))
        for rank, cols in everything.split("rank"):
            del cols.values["rank"], cols.valid["rank"]  # the chunk's own column
            steps = cols.values["step"]
            chunks.append({"run_id": rid, "file_id": file_id, "rank": rank, "rows": cols.n,
                           "first_step": int(steps.min()), "last_step": int(steps.max()),
                           "last_t": float(cols.values["t"].max()), "level": 0, "folded": False,
                           "columns": cols.encode()})
    if chunks:
        conn.execute(insert(step_chunks), chunks)
    return spans


def compact(conn: Connection, run_id: int, holders: Iterable[tuple[int, int]], folded_through: int) -> int:
    """Merge small chunks of each ``(file_id, rank)`` whose steps are all folded (``≤ folded_through``).

    ``COMPACT_EVERY`` chunks of one level make one chunk of the next, marked ``folded``: the view
    already holds its rows. Returns the number of chunks merged away.
    """
    merged = 0
    c = step_chunks.c
    for file_id, rank in holders:
        for level in range(3):
            ids = conn.execute(
                select(c.id).where(c.run_id == run_id, c.file_id == file_id, c.rank == rank, c.level == level,
                                   c.rows < _SMALL_ROWS, c.last_step <= folded_through)
                .order_by(c.id).limit(COMPACT_EVERY)).scalars().all()
            if len(ids) < COMPACT_EVERY:
                break
            parts = [Columns.decode(n, data) for n, data in conn.execute(
                select(c.rows, c.columns).where(c.id.in_(ids)).order_by(c.id))]
            cols = Columns.concat(parts)
            steps = cols.values["step"]
            conn.execute(insert(step_chunks).values(
                run_id=run_id, file_id=file_id, rank=rank, rows=cols.n, first_step=int(steps.min()),
                last_step=int(steps.max()), last_t=float(cols.values["t"].max()), level=level + 1, folded=True,
                columns=cols.encode()))
            conn.execute(delete(step_chunks).where(c.id.in_(ids)))
            merged += len(ids)
    return merged


def forget_file(conn: Connection, file_id: int) -> list[int]:
    """Delete a file's chunks; returns the runs they were of."""
    run_ids = conn.execute(select(step_chunks.c.run_id).where(step_chunks.c.file_id == file_id).distinct()).scalars().all()
    conn.execute(delete(step_chunks).where(step_chunks.c.file_id == file_id))
    return list(run_ids)


# -- reading ---------------------------------------------------------------------------


def _chunks(conn: Connection, where: Any) -> Iterator[tuple[dict[str, Any], Columns]]:
    c = step_chunks.c
    query = select(c.id, c.file_id, c.rank, c.rows, c.first_step, c.last_step, c.last_t, c.columns).where(where)
    for row in conn.execute(query.order_by(c.id).execution_options(yield_per=256)).mappings():
        yield row, Columns.decode(row["rows"], row["columns"])


def rows_of(conn: Connection, run_id: int, *, lo: int | None = None, hi: int | None = None) -> Columns | None:
    """The run's step rows with ``lo < step ≤ hi``, each with its rank (``values["rank"]``), or None."""
    c = step_chunks.c
    where = c.run_id == run_id
    if lo is not None:
        where = where & (c.last_step > lo)
    if hi is not None:
        where = where & (c.first_step <= hi)
    parts = []
    for meta, cols in _chunks(conn, where):
        cols.values["rank"], cols.valid["rank"] = np.full(cols.n, meta["rank"], dtype=np.int64), None
        steps = cols.values["step"]
        keep = np.ones(cols.n, dtype=bool)
        if lo is not None:
            keep &= steps > lo
        if hi is not None:
            keep &= steps <= hi
        parts.append(cols if keep.all() else cols.take(keep))
    return Columns.concat(parts) if parts else None


def merge(cols: Columns, fields: dict[str, str]) -> dict[str, list[Any]]:
    """One row per step, in step order: ``step``, ``t`` (the latest) and each ``field → merge`` over its ranks.

    A merge over ranks none of which reported the field is None.
    """
    order = np.argsort(cols.values["step"], kind="stable")
    steps = cols.values["step"][order]
    starts = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]])
    out: dict[str, list[Any]] = {"step": steps[starts].tolist(),
                                 "t": np.maximum.reduceat(cols.values["t"][order], starts).tolist()}
    for name, how in fields.items():
        out[name] = _reduce(cols.column(name)[order], _ordered(cols.mask(name), order), starts, how)
    return out


def _ordered(mask: np.ndarray | None, order: np.ndarray) -> np.ndarray | None:
    return None if mask is None else mask[order]


def _reduce(values: np.ndarray, mask: np.ndarray | None, starts: np.ndarray, how: str) -> list[Any]:
    """``how`` of each group of ``values`` (groups begin at ``starts``), None where the mask has no value."""
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
            counts = np.add.reduceat(np.ones(len(values), dtype=np.int64) if mask is None else mask.astype(np.int64),
                                     starts)
            result = total / np.maximum(counts, 1)
        else:
            result = total
    out = result.tolist()
    if mask is not None:
        present = np.logical_or.reduceat(mask, starts)
        for i in np.flatnonzero(~present).tolist():
            out[i] = None
    return out


def merged_steps(conn: Connection, run_id: int, fields: dict[str, str], *, after: int | None = None,
                 upto: int | None = None, block: int = 8192) -> Iterator[Steps]:
    """The run's steps in ``(after, upto]`` merged over ranks (``merge``), in step order, in blocks of
    at most ``block`` steps. A full read goes a window of steps at a time (about ``_WINDOW_ROWS`` rows
    decoded at once), so its memory is bounded however long the run."""
    c = step_chunks.c
    where = c.run_id == run_id
    if after is not None:
        where = where & (c.last_step > after)
    if upto is not None:
        where = where & (c.first_step <= upto)
    first, last, rows = conn.execute(select(func.min(c.first_step), func.max(c.last_step), func.sum(c.rows))
                                     .where(where)).one()
    if not rows:
        return
    lo = after if after is not None else first - 1
    end = last if upto is None else min(last, upto)
    width = max(1, -(-(end - lo) * _WINDOW_ROWS // rows))  # equal step ranges of about _WINDOW_ROWS rows
    while lo < end:
        hi = min(lo + width, end)
        cols = rows_of(conn, run_id, lo=lo, hi=hi)
        if cols is not None:
            merged = merge(cols, fields)
            for start in range(0, len(merged["step"]), block):
                yield Steps({k: v[start:start + block] for k, v in merged.items()})
        lo = hi


_WINDOW_ROWS = 1 << 18  # ~50 MB of decoded columns


def rank_totals(conn: Connection, run_id: int, aggregates: dict[str, tuple[str, str]], *,
                after_id: int | None = None, late_upto: int | None = None
                ) -> tuple[dict[int, dict[str, Any]], list[tuple[int, int]]]:
    """Per rank, over the run's chunks with ``id > after_id`` (all, when None) that are not ``folded``:
    their step count, first/last step and time, each declared ``name → (field, aggregate)``, the
    highest chunk id (``max_id``) and how many rows are for steps at or below ``late_upto`` (``late``).
    Also the ``(file_id, rank)`` pairs of the small ones among them (what ``compact`` looks at).

    Chunks of one run are written under its state's lock (``runs.saved_state``), so ids past a
    mark are exactly the chunks stored since.
    """
    c = step_chunks.c
    where = c.run_id == run_id
    if after_id is not None:
        where = where & (c.id > after_id) & c.folded.is_(False)
    totals: dict[int, dict[str, Any]] = {}
    holders: set[tuple[int, int]] = set()
    for meta, cols in _chunks(conn, where):
        if meta["rows"] < _SMALL_ROWS:
            holders.add((meta["file_id"], meta["rank"]))
        steps = cols.values["step"]
        new = {"steps": cols.n, "first_step": int(steps.min()), "last_step": int(steps.max()),
               "last_t": float(cols.values["t"].max()), "max_id": meta["id"],
               "late": int((steps <= late_upto).sum()) if late_upto is not None else 0}
        for name, (field, agg) in aggregates.items():
            new[name] = _reduce(cols.column(field), cols.mask(field), np.zeros(1, dtype=np.int64),
                                {"sum": "sum", "max": "max", "min": "min"}[agg])[0]
        old = totals.get(meta["rank"])
        totals[meta["rank"]] = new if old is None else add_totals(old, new, aggregates)
    return totals, sorted(holders)


def add_totals(old: dict[str, Any], new: dict[str, Any], aggregates: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """One rank's totals over two sets of its rows (the keys ``rank_totals`` gives)."""
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


def step_range(conn: Connection, run_id: int) -> tuple[int | None, int | None]:
    """The run's first and last step (None, None without steps)."""
    c = step_chunks.c
    first, last = conn.execute(select(func.min(c.first_step), func.max(c.last_step)).where(c.run_id == run_id)).one()
    return first, last


def runs_of_files(conn: Connection, file_ids: list[int]) -> list[tuple[int, int]]:
    """``(file_id, run_id)`` pairs of the step chunks read from ``file_ids``."""
    c = step_chunks.c
    return [tuple(r) for r in conn.execute(select(c.file_id, c.run_id).where(c.file_id.in_(file_ids)).distinct())]
