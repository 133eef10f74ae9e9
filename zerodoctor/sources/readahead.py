"""Sources: a large JSONL file read to its end → its batches, parsed ahead by worker processes.

``diagnose`` reads each file once, and parsing — JSON decoding and turning step records into
columns — is most of its CPU. Lines of our JSONL are independent, so a file splits at any
newline: byte ranges of it go to a pool of processes, each parsing its range into sealed
batches (steps as ``Columns``: arrays, cheap to send back), and the batches come back in file
order with their true offsets and line numbers, the ones ``read_batches`` would have given.

Only complete lines up to the last newline seen when the read-ahead starts are parsed ahead;
whatever follows (an unterminated last line, lines appended since) is read in process as
before. Console logs (parsers keep state across lines) and decoded streams (gzip, UTF-16: their
offsets are positions in the decoded bytes) are never read ahead.
"""

from __future__ import annotations

import io
import os
import threading
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Iterator

if TYPE_CHECKING:  # the process pool (~20 ms to import) only where a file is large enough to start one
    from concurrent.futures import Future, ProcessPoolExecutor

from zerodoctor.sources.batches import Batch, make_parser, read_batches, run_id_for

RANGE_BYTES = 8 << 20  # a range per task: ~20k lines of a probe's steps, one batch
MIN_BYTES = 32 << 20  # below this, handing ranges to processes and back costs more than it saves
_SCAN = 64 << 10


def workers() -> int:
    """Processes worth starting: one per core (the store and the folds keep this one busy meanwhile)."""
    return os.cpu_count() or 1


class Pool:
    """The worker processes every read-ahead of one ingest shares, started on first use."""

    def __init__(self, processes: int | None = None, depth: int | None = None) -> None:
        self.processes = processes or workers()
        self.depth = depth or 2 * self.processes  # ranges in flight per file: bounded memory
        self._executor: ProcessPoolExecutor | None = None

    def usable(self) -> bool:
        """Workers are forked, all at once when the pool starts (ready in milliseconds, with this
        process's modules loaded), which is safe only while this process runs one thread: a lock
        another thread holds would stay held in the child. Another start method would import
        ``__main__`` again, whatever it is. Once started (its own manager thread runs then), the
        pool serves every file."""
        return self._executor is not None or threading.active_count() == 1

    def submit(self, *args: object) -> Future:
        if self._executor is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # The children only read and parse: the store connection they inherit is never used,
            # and they leave by os._exit, so nothing of it is finalised there.
            self._executor = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("fork"))
        return self._executor.submit(_parse_range, *args)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(cancel_futures=True)
            self._executor = None


class ReadAhead:
    """Batches of one file from a line start on, parsed ``pool.depth`` ranges ahead.

    ``batches(start, first_line)`` answers for the file from ``start``: the parsed batches while
    ``start`` is where the last one handed out ended; nothing once the planned ranges are used up,
    when asked for another place (after a rollback the tail reads again from its stored offset),
    or when a worker fails — the caller's in-process reader then goes on from where it stands.
    """

    def __init__(self, pool: Pool, path: Path, fmt: str, identity: tuple[int, int], start: int, first_line: int,
                 stop: int, batch_lines: int) -> None:
        self.pool, self.path, self.fmt, self.identity, self.batch_lines = pool, path, fmt, identity, batch_lines
        self.position, self.next_line = start, first_line
        self._planned, self._stop = start, stop
        self._pending: deque[tuple[int, Future]] = deque()  # (range start, its future), in file order
        self._ready: deque[Batch] = deque()  # parsed and placed, not handed out yet

    @classmethod
    def of(cls, pool: Pool, path: Path, fmt: str, stream: BinaryIO, start: int, first_line: int, *,
           batch_lines: int) -> ReadAhead | None:
        """A read-ahead over the complete lines of ``stream`` (plain bytes) from ``start``, in batches of
        at most ``batch_lines`` lines, or None when too few bytes are left to pay for it."""
        st = os.fstat(stream.fileno())
        if fmt != "jsonl" or st.st_size - start < MIN_BYTES or not pool.usable():
            return None
        stop = _line_start_before(stream.fileno(), st.st_size, start)
        if stop - start < MIN_BYTES:
            return None
        return cls(pool, path, fmt, (st.st_dev, st.st_ino), start, first_line, stop, batch_lines)

    @property
    def active(self) -> bool:
        """Batches are still to come from it."""
        return bool(self._ready or self._pending or self._planned < self._stop)

    def batches(self, start: int, first_line: int) -> Iterator[Batch]:
        if (start, first_line) != (self.position, self.next_line):
            self._stop_here()
            return
        while True:
            if not self._ready:
                self._plan()
                if not self._pending:
                    return
                range_start, future = self._pending.popleft()
                try:
                    parsed = future.result()
                except Exception:  # noqa: BLE001 - a worker's failure costs its speed, never a line
                    self._stop_here()
                    return
                lines_before = self.next_line - 1  # the range's lines are numbered from 1, across its batches
                self._ready.extend(_placed(batch, range_start, lines_before) for batch in parsed)
            batch = self._ready.popleft()
            self.position, self.next_line = batch.end, batch.last_line + 1
            yield batch

    def _stop_here(self) -> None:
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        self._ready.clear()
        self._planned = self._stop

    def _plan(self) -> None:
        from concurrent.futures.process import BrokenProcessPool

        while len(self._pending) < self.pool.depth and self._planned < self._stop:
            start = self._planned
            end = self._stop
            if start + RANGE_BYTES < self._stop:
                with open(self.path, "rb") as f:
                    end = _line_start_before(f.fileno(), start + RANGE_BYTES, start)
                if end == start:
                    # A line longer than a range would be read whole into a worker: from here the
                    # in-process reader goes on, which skips an oversize line in bounded memory.
                    self._stop = start
                    return
            try:
                future = self.pool.submit(str(self.path), self.fmt, self.identity, start, end, self.batch_lines)
            except BrokenProcessPool:  # a worker was killed since: read in process from here
                self._planned = self._stop
                return
            self._pending.append((start, future))
            self._planned = end


def _line_start_before(fd: int, offset: int, floor: int) -> int:
    """The offset just past the last newline before ``offset``, ``floor`` when there is none after it."""
    pos = offset
    while pos > floor:
        lo = max(floor, pos - _SCAN)
        found = os.pread(fd, pos - lo, lo).rfind(b"\n")
        if found >= 0:
            return lo + found + 1
        pos = lo
    return floor


def _placed(batch: Batch, start: int, lines_before: int) -> Batch:
    """A range's batch at its place in the file: offsets from ``start``, line numbers after ``lines_before``."""
    for cols in batch.columns.values():
        cols.values["line"] = cols.values["line"] + lines_before
    return replace(batch, end=batch.end + start, last_line=batch.last_line + lines_before,
                   event_lines=[line + lines_before for line in batch.event_lines],
                   rejected=[replace(r, line=r.line + lines_before) for r in batch.rejected])


def _parse_range(path: str, fmt: str, identity: tuple[int, int], start: int, end: int,
                 batch_lines: int) -> list[Batch]:
    """In a worker: the sealed batches of the complete lines in ``[start, end)`` (numbered from 1)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != tuple(identity):
            raise FileNotFoundError(f"{path}: replaced while being read")
        data = os.pread(fd, end - start, start)
    finally:
        os.close(fd)
    parser = make_parser(fmt, run_id=run_id_for(Path(path)), path=Path(path))
    return list(read_batches(Path(path), parser, start=0, first_line=1, batch_lines=batch_lines,
                             stream=io.BytesIO(data)))
