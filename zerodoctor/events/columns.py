"""Events: step records as columns — how a batch's steps travel to the store and back to the view.

Nearly every event of a run is a step, and a Python object per step and field costs more than
anything done with it. ``Columns`` holds the steps of one run (a batch's, with each row's rank
and line; or one rank's, as a store chunk) as arrays (numpy int64 / float64), built in one
C-level pass from the records, stored as one blob (``encode``) and read back without a copy
(``decode``). Missing is explicit: a float is NaN where the event had no
value (a non-finite loss or grad norm is a value: flagged in ``nonfinite``, then stored NaN, as
SQL stores it NULL); an int column that lacks a value somewhere carries a validity mask.
``Steps`` is what comes back: the steps merged over ranks (``store/steps.py``), as the lists the
view hands its folds; it lives here, beside the arrays, so a signal module can name it without
importing the store.
"""

from __future__ import annotations

import itertools
import operator
from typing import TYPE_CHECKING, Any, Iterator

import msgspec

from zerodoctor.events import STEP_BOOLS, STEP_FLOATS, STEP_INTS, StepRecord

if TYPE_CHECKING:  # numpy (~100 ms) is imported where arrays are made: a run without steps never needs it
    import numpy as np

FLOATS = ("t", *STEP_FLOATS)
INTS = ("step", "rank", "line", "nonfinite", *STEP_INTS)
_NONFINITE = {"loss_nonfinite": 1, "grad_nonfinite": 2}  # derived fields: bits of ``nonfinite``
_FLAGGED = ("loss", "grad_norm")
_FIELDS = ("step", "rank", *FLOATS, *STEP_INTS)
_EXACT = float(2**53)  # float64 holds every integer below it


class Columns:
    """Rows of step columns: ``values[name]`` an array, ``valid[name]`` its mask (None: every row has a value)."""

    __slots__ = ("n", "values", "valid")

    def __init__(self, n: int, values: dict[str, np.ndarray], valid: dict[str, np.ndarray | None]) -> None:
        self.n, self.values, self.valid = n, values, valid

    @classmethod
    def of(cls, records: list[StepRecord], lines: list[int]) -> Columns:
        """The columns of step records, in the order read (``rank`` among them), each with the
        ``line`` it was read from.

        One C-level pass turns the records into a float64 matrix (``None`` becomes NaN): a
        column apiece costs twice as much. Integers come back exactly from it below 2**53; a
        column holding a larger one is taken again from the records as Python ints. Every row
        has ``step``, ``rank`` and ``t``; other fields may be missing anywhere.
        """
        import numpy as np

        n = len(records)
        # numpy converts twice as fast without a None in the rows: the fields the first record has
        # go through the matrix, the others (a probe on CPU has no memory stats) a column apiece,
        # where a column of nothing but None is found at C speed and left out.
        dense = tuple(name for name in _FIELDS if getattr(records[0], name) is not None)
        # fromiter over the flattened tuples skips np.array's list of tuples and its shape discovery (-25%);
        # a None still becomes NaN. ``dense`` holds step, rank and t, so each item is a tuple.
        matrix = np.fromiter(itertools.chain.from_iterable(map(operator.attrgetter(*dense), records)),
                             dtype=np.float64, count=n * len(dense)).reshape(n, len(dense))
        # one copy makes each field's column contiguous, and one pass finds every field's gaps: a strided
        # column apiece read the whole matrix again for each of its twenty fields
        rows = np.ascontiguousarray(matrix.T)
        gaps = np.isnan(rows)
        values: dict[str, np.ndarray] = {}
        valid: dict[str, np.ndarray | None] = {}
        # The matrix's integer fields without a gap (most, in a probe's steps) are checked and converted in one
        # go: a live pass seals a few rows for each of thousands of ranks, where a call per column was most of it.
        whole = (~gaps.any(axis=1)).tolist()
        exact = [j for j, name in enumerate(dense) if name not in FLOATS and whole[j]]
        if exact:
            fits = (np.abs(rows[exact]).max(axis=1) < _EXACT).tolist()
            exact = [j for j, ok in zip(exact, fits) if ok]
            ints = rows[exact].astype(np.int64)
            for i, j in enumerate(exact):
                values[dense[j]], valid[dense[j]] = ints[i], None
        raw = {name: (rows[j], gaps[j]) for j, name in enumerate(dense) if name not in values}
        for name in _FIELDS:
            if name not in raw and name not in values:
                listed = list(map(operator.attrgetter(name), records))
                if listed.count(None) < n or name in _FLAGGED:
                    column = np.array(listed, dtype=np.float64)
                    raw[name] = (column, np.isnan(column))
        for name, (column, missing) in raw.items():
            if name in FLOATS:
                if name in _FLAGGED or not missing.all():  # all NaN may still be values: non-finite losses
                    values[name], valid[name] = column, None
                continue
            if missing.all():
                continue  # an integer field no record has: absent, as in the events
            present = ~missing if missing.any() else None
            if np.abs(column if present is None else column[present]).max() < _EXACT:
                ints = column.astype(np.int64) if present is None else np.where(present, column, 0).astype(np.int64)
            else:
                ints = np.array([v if v is not None else 0 for v in map(operator.attrgetter(name), records)],
                                dtype=np.int64)
            values[name], valid[name] = ints, present
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
        values["line"], valid["line"] = np.array(lines, dtype=np.int64), None
        order = (*dense, *_FIELDS, "nonfinite", "line")  # as read: the matrix's fields first, as each blob has them
        return cls(n, {name: values[name] for name in order if name in values}, valid)

    def records(self, run: str) -> list[tuple[int, StepRecord]]:
        """``(line, record)`` of every row, as read (the rare path of a batch the store refused)."""
        columns = {}
        for name, values in self.values.items():
            mask = self.mask(name)
            listed = values.tolist()
            columns[name] = listed if mask is None else [v if ok else None for v, ok in zip(listed, mask.tolist())]
        nonfinite = columns.pop("nonfinite")
        lines = columns.pop("line")
        out = []
        for i in range(self.n):
            row = {k: c[i] for k, c in columns.items()}
            if nonfinite[i] & 1:
                row["loss"] = float("nan")
            if nonfinite[i] & 2:
                row["grad_norm"] = float("nan")
            for flag in STEP_BOOLS:  # stored 0/1, given back as bools
                if row.get(flag) is not None:
                    row[flag] = bool(row[flag])
            out.append((lines[i], StepRecord(v=1, run=run, **row)))
        return out

    def split(self, by: str) -> Iterator[tuple[int, Columns]]:
        """``(value, rows)`` for each value of an integer column, rows in their order."""
        import numpy as np

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
        import numpy as np

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

    def steps_between(self, after: int | None, upto: int | None) -> np.ndarray:
        """Where the step lies in ``(after, upto]`` (an open side when None): the rows a merge of that range takes,
        in the store's chunks and in the rows a store-less run holds alike."""
        import numpy as np

        steps = self.values["step"]
        keep = np.ones(self.n, dtype=bool)
        if after is not None:
            keep &= steps > after
        if upto is not None:
            keep &= steps <= upto
        return keep

    def without(self, *names: str) -> Columns:
        return Columns(self.n, {k: v for k, v in self.values.items() if k not in names},
                       {k: m for k, m in self.valid.items() if k not in names})

    def mask(self, name: str) -> np.ndarray | None:
        """Where ``name`` has a value (None: everywhere), NaN counted as missing for floats."""
        import numpy as np

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

    def summary(self) -> dict[str, list[Any]]:
        """Per column with a value anywhere: ``[count, sum, min, max]`` of its values (Python numbers,
        ints exact): what a rank's totals need, without the rows.

        The columns every row has are reduced together, a matrix per dtype: a live pass stores a chunk of
        a few rows for each of thousands of ranks, where three reductions a column cost more than the rows.
        Each matrix row is reduced as the column alone would be (the same pairwise sum), so the figures match.
        The copy into the matrix costs about 30 ns a row, which a chunk of thousands of rows pays for nothing
        (1 % of a store-less ``diagnose``): one code path is worth that.
        """
        out: dict[str, list[Any]] = {}
        for names, matrix in self._full_columns():
            sums, lows, highs = (matrix.sum(axis=1).tolist(), matrix.min(axis=1).tolist(),
                                 matrix.max(axis=1).tolist())
            for j, name in enumerate(names):
                out[name] = [self.n, sums[j], lows[j], highs[j]]
        for name, column in self.values.items():
            if name in out:
                continue
            mask = self.mask(name)
            present = column if mask is None else column[mask]
            if len(present):
                out[name] = [len(present), present.sum().item(), present.min().item(), present.max().item()]
        return {name: out[name] for name in self.values if name in out}

    def _full_columns(self) -> Iterator[tuple[list[str], np.ndarray]]:
        """The columns with a value in every row, stacked: ``(names, matrix)`` per dtype (none without rows)."""
        import numpy as np

        if not self.n:
            return
        for dtype in (np.float64, np.int64):
            names = [name for name, column in self.values.items()
                     if column.dtype == dtype and self.valid.get(name) is None]
            if not names:
                continue
            matrix = np.stack([self.values[name] for name in names])
            if dtype == np.float64:  # a float is missing where it is NaN
                whole = ~np.isnan(matrix).any(axis=1)
                names, matrix = [name for name, ok in zip(names, whole.tolist()) if ok], matrix[whole]
            if names:
                yield names, matrix

    def encode(self) -> bytes:
        """One blob: per column its little-endian bytes, or one value when every row holds it (a
        learning rate, a batch size, a reserved-memory plateau: half the columns of most chunks),
        and a packed validity mask where some row has none. Which columns hold one value is found
        a matrix per dtype, not a column at a time (see ``summary``)."""
        import numpy as np

        constant: set[str] = set()
        if self.n > 1:
            for dtype in (np.float64, np.int64):
                names = [name for name, column in self.values.items() if column.dtype == dtype]
                if names:
                    matrix = np.stack([self.values[name] for name in names])
                    same = (matrix == matrix[:, :1]).all(axis=1).tolist()
                    constant.update(name for name, one in zip(names, same) if one)
        blob: dict[str, bytes] = {}
        for name, column in self.values.items():
            little = column.astype(column.dtype.newbyteorder("<"), copy=False)
            if name in constant:
                blob[name + "="] = little[:1].tobytes()
            else:
                blob[name] = little.tobytes()
            mask = self.valid.get(name)
            if mask is not None:
                blob[name + "?"] = np.packbits(mask).tobytes()
        return msgspec.msgpack.encode(blob)

    @classmethod
    def decode(cls, n: int, data: bytes) -> Columns:
        import numpy as np

        blob = msgspec.msgpack.decode(data)
        values, valid = {}, {}
        for key, raw in blob.items():
            if key.endswith("?"):
                continue
            name = key.rstrip("=")
            dtype = "<f8" if name in FLOATS else "<i8"
            values[name] = (np.full(n, np.frombuffer(raw, dtype=dtype)[0]) if key.endswith("=")
                            else np.frombuffer(raw, dtype=dtype))
            mask = blob.get(name + "?")
            valid[name] = (None if mask is None
                           else np.unpackbits(np.frombuffer(mask, dtype=np.uint8), count=n).astype(bool))
        return cls(n, values, valid)


def _missing(name: str, n: int) -> np.ndarray:
    import numpy as np

    return np.full(n, np.nan) if name in FLOATS else np.zeros(n, dtype=np.int64)


def _mask(part: Columns, name: str) -> np.ndarray:
    import numpy as np

    if name not in part.values:
        return np.zeros(part.n, dtype=bool)
    mask = part.valid.get(name)
    return np.ones(part.n, dtype=bool) if mask is None else mask


class Steps:
    """Rank-merged steps in step order, as columns: ``columns["step"][i]``, ``columns["t"][i]`` and
    each declared ``STEP_FIELDS`` name; ``None`` where no rank reported the field.

    Columns are plain lists: a fold may take a whole block at once (slices, ``sum``, ``max``),
    which costs a fraction of a Python call per step. A ``ranks`` merge's column is a sequence
    (``merges.ByRank``) whose step's dict rank → value is built when it is read.
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
