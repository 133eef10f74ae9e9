"""Store: batches of events → rows, one transaction per batch with the file's offset.

Steps go in column chunks (``store/steps.py``), one per rank of the batch; the rarer kinds
become tuples handed to one ``executemany``: no ORM object per event. The file row's offset
is updated in the same transaction as the rows it covers, which is what makes tailing
exactly-once across crashes.
"""

from __future__ import annotations

import json
import math
from typing import Callable, Iterable

from sqlalchemy import Connection, Float, bindparam, case, delete, insert, select, update
from sqlalchemy.exc import OperationalError

from zerodoctor.events import Event
from zerodoctor.sources.batches import Batch
from zerodoctor.sources.rejects import Rejected
from zerodoctor.store.db import BulkInsert, describe, insert_new, savepoint, storable_text
from zerodoctor.store import files as stored_files
from zerodoctor.store import steps as stored_steps
from zerodoctor.store.schema import events, quarantine, runs

_ENVELOPE = {"v", "t", "run", "rank", "kind"}


class Ingestor:
    """Writes sealed batches (``Batch.seal``: steps as columns, as the readers hand them) into the
    store; caches run ids so each run costs one lookup. It calls nothing above it: the pipeline
    folds what was stored into its views afterwards (``Pipeline.fold``).

    Each run's span (its first and last event time, what ``status`` shows) is widened once per
    transaction, just before it commits (``widen_spans``), not with each batch: the update holds the
    run's row until the commit, and the nodes writing one run would take turns for a whole pass each.
    """

    def __init__(self) -> None:
        self._run_ids: dict[str, int] = {}
        self._event_insert = BulkInsert(events)
        self._spans: dict[int, list[float]] = {}  # run id → [first, last] stored in this transaction

    def forget_file(self, conn: Connection, file_id: int) -> list[int]:
        """Delete the file's rows (steps, events, quarantine) and its row, in ``conn``'s transaction.

        Returns the runs whose rows went with it.
        """
        fed = set(stored_steps.forget_file(conn, file_id))
        fed.update(conn.execute(select(events.c.run_id).where(events.c.file_id == file_id).distinct()).scalars())
        for table in (events, quarantine):
            conn.execute(delete(table).where(table.c.file_id == file_id))
        stored_files.forget(conn, file_id)
        return sorted(fed)

    def forget_runs(self) -> None:
        """Drop cached run ids (a rolled-back transaction may have removed runs it created)."""
        self._run_ids.clear()

    def widen_spans(self, conn: Connection) -> None:
        """Widen the spans of the runs stored in ``conn``'s transaction, just before it commits (in run
        order: two writers of the same runs never wait for each other in a circle)."""
        if self._spans:
            conn.execute(_WIDEN_SPAN, [{"b_run": rid, "b_first": first, "b_last": last}
                                       for rid, (first, last) in sorted(self._spans.items())])
            self._spans.clear()

    def drop_spans(self) -> None:
        """The transaction rolled back: what it stored is gone, its spans with it."""
        self._spans.clear()

    def run_id(self, conn: Connection, name: str) -> int:
        """The run's id, creating its row: runs are keyed by name, so the ranks of one job that
        several watchers (one per node) store are one run."""
        run_id = self._run_ids.get(name)
        if run_id is None:
            stored = storable_text(name)
            run_id = conn.execute(select(runs.c.id).where(runs.c.name == stored)).scalar()
            if run_id is None:
                conn.execute(insert_new(conn, runs).values(name=stored))
                run_id = conn.execute(select(runs.c.id).where(runs.c.name == stored)).scalar_one()
            self._run_ids[name] = run_id
        return run_id

    def add(self, conn: Connection, file_id: int, batch: Batch, *, unchanged_s: float | None = None) -> None:
        """Insert ``batch`` and move the file's offset to ``batch.end``, in ``conn``'s transaction; ``unchanged_s``:
        how long the file had been unchanged when the batch was read (``files.advance``)."""
        if batch.steps:
            raise ValueError("an unsealed batch: its steps are not columns yet (Batch.seal)")
        other_rows: list[tuple] = []
        spans: dict[int, list[float]] = {}  # this batch's, kept once it is stored
        run_ids = self._run_ids

        def widen(rid: int, t: float) -> None:
            span = spans.get(rid)
            if span is None:
                spans[rid] = [t, t]
            elif t < span[0]:
                span[0] = t
            elif t > span[1]:
                span[1] = t

        for e in batch.events:
            name = e["run"]
            rid = run_ids.get(name) or self.run_id(conn, name)
            widen(rid, e["t"])
            other_rows.append(_event_row(e, rid, file_id))
        for name, cols in batch.columns.items():
            rid = run_ids.get(name) or self.run_id(conn, name)
            first, last = stored_steps.store(conn, rid, file_id, cols)
            widen(rid, first)
            widen(rid, last)
        self._event_insert(conn, other_rows)
        if batch.rejected:
            conn.execute(insert(quarantine), [
                {"file_id": file_id, "line": r.line, "reason": storable_text(r.reason), "size": r.size, "raw": r.raw}
                for r in batch.rejected
            ])
        stored_files.advance(conn, file_id, end=batch.end, lines=batch.last_line,
                             events=len(batch.events) + batch.step_count(), rejected=len(batch.rejected),
                             held=batch.held_lines, unchanged_s=unchanged_s)
        for rid, (first, last) in spans.items():
            self._widen(rid, first, last)

    def _widen(self, rid: int, first: float, last: float) -> None:
        span = self._spans.get(rid)
        if span is None:
            self._spans[rid] = [first, last]
        else:
            span[0], span[1] = min(span[0], first), max(span[1], last)

    def arrived(self, conn: Connection, names: Iterable[str], t: float) -> None:
        """These runs' events arrived at ``t`` (a log with no clock of its own numbers them by line, which
        is no time): their span reaches it, so ``status`` tells when the run last wrote, not 1970."""
        for name in names:
            self._widen(self.run_id(conn, name), t, t)

    def add_or_quarantine(self, conn: Connection, file_id: int, batch: Batch, name: str, first_line: int,
                          raw: Callable[[], bytes] | None = None, unchanged_s: float | None = None) -> Batch:
        """``add``, or when the store refuses the batch's content, ``add`` line by line: only the
        lines it refuses are quarantined, each with its own bytes.

        A line refused for what it holds (an integer past 64 bits, a value the store rejects, a
        bug on this path) would be refused on every retry, so it is kept aside and the offset
        moves past it. A failing store (``OperationalError``: disk, lock, connection) is raised
        for the caller to roll back and read the lines again. ``raw()`` gives the bytes of the
        batch's lines, from ``first_line`` on; it is read only on this rare path. Returns the
        batch actually stored.
        """
        try:
            with savepoint(conn):
                self.add(conn, file_id, batch, unchanged_s=unchanged_s)
            return batch
        except OperationalError:
            raise
        except Exception:  # noqa: BLE001 - one line's content must not stop the tail
            self.forget_runs()  # the savepoint's rollback may have removed runs this batch created
        return self._add_line_by_line(conn, file_id, batch, name, first_line,
                                      (raw() if raw is not None else b"").split(b"\n"), unchanged_s)

    def _add_line_by_line(self, conn: Connection, file_id: int, batch: Batch, name: str, first_line: int,
                          lines: list[bytes], unchanged_s: float | None) -> Batch:
        """Bisect the refused batch: a half the store takes is kept whole, a refused half is split
        again, down to single lines. One bad line in 20,000 costs ~30 savepoints, not 20,000."""
        kept = Batch(end=batch.end, last_line=batch.last_line)
        refused: list[Rejected] = []
        todo = [_by_line(batch, first_line)]
        while todo:
            units = todo.pop()
            if not units:
                continue
            some = Batch(end=batch.end, last_line=batch.last_line)
            for line, parsed in units:
                some.add(parsed, line)
            some.seal()
            try:
                with savepoint(conn):
                    self.add(conn, file_id, some)
                for line, parsed in units:
                    kept.add(parsed, line)
            except OperationalError:
                raise
            except Exception as exc:  # noqa: BLE001 - see add_or_quarantine
                self.forget_runs()
                if len(units) > 1:
                    mid = len(units) // 2
                    todo += [units[mid:], units[:mid]]  # the first half is popped first: kept stays in order
                    continue
                line = units[0][0]
                index = line - first_line
                data = lines[index] if 0 <= index < len(lines) else b""
                ended = index < len(lines) - 1  # every line but an unterminated last one had its newline
                refused.append(Rejected(name, line, storable_text(f"not stored: {describe(exc)}"),
                                        data.rstrip(b"\r"), len(data) + ended))
        kept.rejected = batch.rejected + refused
        self.add(conn, file_id, Batch(rejected=kept.rejected, end=batch.end, last_line=batch.last_line,
                                      held_lines=batch.held_lines), unchanged_s=unchanged_s)
        return kept


def _by_line(batch: Batch, first_line: int) -> list[tuple[int, list]]:
    """The batch's events and steps grouped by the line they came from, in line order (all under
    ``first_line`` when a parser did not say)."""
    steps = [pair for name, cols in batch.columns.items() for pair in cols.records(name)]
    steps += zip(batch.step_lines, batch.steps)
    if len(batch.event_lines) != len(batch.events):
        together = [*batch.events, *(record for _, record in steps)]
        return [(first_line, together)] if together else []
    groups: dict[int, list] = {}
    for line, e in [*zip(batch.event_lines, batch.events), *steps]:
        groups.setdefault(line, []).append(e)
    return sorted(groups.items())


# The UPDATE of the runs every batch makes, built once: SQLAlchemy then reuses its compiled form
# (building it per batch cost ~1.5 ms with the file's, most of a one-line batch's cost in a live watch).
_lo, _hi, _first, _last = (runs.c.first_event_t, runs.c.last_event_t,
                           bindparam("b_first", type_=Float), bindparam("b_last", type_=Float))
_WIDEN_SPAN = update(runs).where(runs.c.id == bindparam("b_run")).values(
    first_event_t=case((_lo.is_(None) | (_lo > _first), _first), else_=_lo),
    last_event_t=case((_hi.is_(None) | (_hi < _last), _last), else_=_hi))


def _event_row(e: Event, run_id: int, file_id: int) -> tuple:
    payload = {k: v for k, v in e.items() if k not in _ENVELOPE}
    return (run_id, file_id, e["rank"], e["kind"], e["t"], payload.get("step"), _dump_payload(payload))


def _dump_payload(payload: dict) -> str:
    """Strict JSON: PostgreSQL's ``json`` rejects NaN/Infinity, so they are stored as "NaN", "Infinity", "-Infinity"."""
    try:
        return json.dumps(payload, allow_nan=False)
    except ValueError:  # rare: only then walk the payload
        return json.dumps(_finite(payload), allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
