"""Tail: one file on disk → its new complete lines in the store, exactly once, across restarts and rotation.

The truth is the file's row in the store: identity (device, inode, and a fingerprint of its
first bytes), byte offset and line count, committed in the same transaction as the events
read up to that offset. The open handle is only a means: it keeps a renamed or deleted file
readable so that its last lines can be drained before the tail switches to the file now at
the path. Handles are few: past ``OpenFiles.limit`` (a fraction of ``ulimit -n``) the least
recently read tail closes its own and opens it again on its next poll, so 10,000 rank files
cost no more descriptors than 100. Only regular files are opened (``sources.readable``).

Rotation is recognised the way the log shippers do it (Fluent Bit, pygtail):
- rename+create, delete+recreate: the path names another inode → drain the old handle,
  then read the new file from 0;
- copytruncate: same inode, size below the offset → read again from 0;
- path gone (deleted, renamed away, run directory removed, or no regular file any more) →
  drain, close, forget.
After a restart (or a closed handle) a renamed-away file is found again by its inode among its
siblings and drained from the stored offset. A file whose inode is the stored one but whose
first bytes are not (deleted and recreated while unwatched: ext4 reuses inodes at once) is a
new file, read from 0.
"""

from __future__ import annotations

import logging
import os
import resource
import stat
from collections import OrderedDict
from functools import partial
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Literal

from sqlalchemy import Connection

from zerodoctor.sources import Batch, Parser, make_parser, read_batches, run_id_for
from zerodoctor.sources.readahead import Pool, ReadAhead
from zerodoctor.sources.readable import HEAD_BYTES, UnreadableFile, check_regular, open_log, pread
from zerodoctor.store import files as stored_files
from zerodoctor.store.ingest import Ingestor

log = logging.getLogger("zerodoctor.watch")

Identity = tuple[int, int] | tuple[None, None]
_DRAINED: Identity = (None, None)
SHOW_REJECTED = 5
BATCH_LINES = 20_000
Polled = Literal["idle", "more", "gone"]
Emit = Callable[[Batch], None]


class OpenFiles:
    """The tails holding an open handle, least recently read first; past ``limit`` the oldest closes its own."""

    def __init__(self, limit: int | None = None) -> None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        # A quarter of the descriptors at most: the store, watchdog and the training job's own need the rest.
        self.limit = limit or max(8, min(512, (soft if soft != resource.RLIM_INFINITY else 4096) // 4))
        self._tails: OrderedDict[FileTail, None] = OrderedDict()

    def used(self, tail: FileTail) -> None:
        self._tails[tail] = None
        self._tails.move_to_end(tail)
        while len(self._tails) > self.limit:
            oldest, _ = self._tails.popitem(last=False)
            oldest.close()

    def dropped(self, tail: FileTail) -> None:
        self._tails.pop(tail, None)


OPEN_FILES = OpenFiles()


class FileTail:
    """Reads one path of a run directory into the store, resuming from its stored row."""

    def __init__(self, conn: Connection, ingestor: Ingestor, path: Path, fmt: str, *, pool: Pool | None = None) -> None:
        """Raises ``UnreadableFile`` (an ``OSError``) for a FIFO, device, socket, symlink loop or binary file.

        ``pool``: worker processes that may parse a large file ahead (``diagnose``: read to the end once).
        """
        self.path = path
        self.fmt = fmt
        self.pool = pool
        self._ahead: ReadAhead | None = None
        # Opened before the row exists (a file that is no log gets none), and kept for the first read.
        self._opened: tuple[BinaryIO, str | None] | None = open_log(path)
        try:
            row = ingestor.register_file(conn, path, fmt)
            self.file_id: int = row["id"]
            self.name: str = row["path"]
            self.handle: BinaryIO | None = None
            self.decoded: str | None = None
            self.resync(row)  # UnsupportedFormat for a format no parser reads
        except BaseException:
            self._opened[0].close()
            raise
        OPEN_FILES.used(self)

    def resync(self, row: dict) -> None:
        """Take offsets and identity from the stored row (after a rolled-back transaction).

        The parser starts afresh: the one that read past the offset holds state (lines seen,
        messages reported once) that would drop those lines' events when they are read again.
        """
        self.offset, self.lines = row["offset"], row["lines"]
        self.identity: Identity = (row["device"], row["inode"])
        self.fingerprint: str | None = row["fingerprint"]
        self.parser: Parser = make_parser(self.fmt, run_id=run_id_for(self.path), path=self.path)

    def poll(self, conn: Connection, ingestor: Ingestor, emit: Emit) -> Polled:
        """Store up to ``BATCH_LINES`` new complete lines: "more" when more are waiting, "gone" with the path.

        ``emit`` sees each stored batch (the caller learns which runs got events). Nothing
        is committed here: the caller commits ``conn``'s transaction, and calls ``resync``
        for every tail if that fails. A file being drained is read to its end.
        """
        self._ingestor, self._emit = ingestor, emit
        try:
            st = check_regular(self.path)
        except OSError:  # gone, or a FIFO, a symlink loop…: nothing more to read at this path
            self._drain_and_close(conn, "is gone")
            return "gone"
        current = (st.st_dev, st.st_ino)
        if self.handle is not None and _identity(self.handle) != current:
            self._drain_and_close(conn, "was replaced (rotated)")
        if self.handle is None and not self._open(conn):
            return "gone"
        OPEN_FILES.used(self)
        # A decoded file's offsets count decoded bytes, which its size on disk does not bound.
        if st.st_size < self.offset and current == self.identity and self.decoded is None:
            log.info("%s: truncated below offset %d (copytruncate); reading it again from the start",
                     self.name, self.offset)
            self._reset(conn, current)
        return "more" if self._read(conn, self.handle, final=False, batches=1) else "idle"

    def finish(self, conn: Connection, ingestor: Ingestor, emit: Emit, *, unterminated: bool = True) -> None:
        """The file is complete (``diagnose``): store what ``poll`` leaves and the parser's held state.
        Call after ``poll`` stops answering "more".

        ``unterminated=False`` keeps an unterminated last line out: when the store is kept (``--db``)
        the file may still be growing, and its next read gets that line whole.
        """
        self._ingestor, self._emit = ingestor, emit
        if self.handle is None and not self._open(conn):  # closed to stay under ``ulimit -n``, or gone
            return
        OPEN_FILES.used(self)
        self._read(conn, self.handle, final=True, unterminated=unterminated)

    def close(self) -> None:
        OPEN_FILES.dropped(self)
        if self._opened is not None:
            self._opened[0].close()
            self._opened = None
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def _open(self, conn: Connection) -> bool:
        """Take the handle opened when the tail was made, or open the path again, and check it is the stored file."""
        if self._opened is not None:
            (handle, self.decoded), self._opened = self._opened, None
        else:
            try:
                handle, self.decoded = open_log(self.path)
            except (FileNotFoundError, PermissionError, UnreadableFile):  # a rescan reports what is there now, once
                return False
        identity = _identity(handle)
        if identity == self.identity and self.fingerprint is None and self.offset:
            self._sign(conn, handle)  # a row stored before fingerprints were: this file is taken as the one read
        elif identity == self.identity and self.fingerprint is not None and self._fingerprint(handle) != self.fingerprint:
            log.warning("%s: a new file with the old one's inode (its first bytes differ from those read); "
                        "reading it from the start", self.name)
            self._reset(conn, identity)
        elif identity != self.identity:
            if self.identity != _DRAINED and (self.offset or self.lines):
                self._drain_lost_file(conn)
            self._reset(conn, identity)
        self.handle = handle
        return True

    def _drain_and_close(self, conn: Connection, why: str) -> None:
        if self.handle is None:
            return
        log.info("%s %s; reading its last lines", self.name, why)
        self._read(conn, self.handle, final=True)
        self.close()
        # Committed with the drained lines: whatever appears at the path next is a new file.
        self._reset(conn, _DRAINED)

    def _drain_lost_file(self, conn: Connection) -> None:
        """The stored inode is no longer at the path: find it among the siblings (renamed) and drain it."""
        device, inode = self.identity
        try:
            siblings = list(os.scandir(self.path.parent))
        except FileNotFoundError:
            siblings = []
        for entry in siblings:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) == (device, inode) and stat.S_ISREG(st.st_mode):
                old, _ = open_log(entry.path)
                with old:
                    if self.fingerprint is not None and self._fingerprint(old) != self.fingerprint:
                        break  # the inode was reused by an unrelated file: the old one is gone
                    log.info("%s was rotated to %s while not watched; reading its last lines", self.name, entry.name)
                    self._read(conn, old, final=True)
                return
        log.warning("%s was replaced while not watched and the old file is gone; lines written to it after "
                    "byte %d are lost", self.name, self.offset)

    def _reset(self, conn: Connection, identity: Identity) -> None:
        """Point the row at a new file (a truncated one, or none yet) at offset 0; stored counts stay."""
        stored_files.point_at(conn, self.file_id, *identity)
        self.resync({"device": identity[0], "inode": identity[1], "offset": 0, "lines": 0, "fingerprint": None})

    def _read(self, conn: Connection, stream: BinaryIO, *, final: bool, batches: int | None = None,
              unterminated: bool = True) -> bool:
        """Store batches from the offset on; True when ``batches`` full ones were read (more may wait)."""
        for count, batch in enumerate(self._batches(stream, final=final, unterminated=unterminated), 1):
            if batch.end == self.offset and not batch.events and not batch.step_count() and not batch.rejected:
                continue
            lines_before, signed = self.lines, min(self.offset, HEAD_BYTES)
            batch = self._ingestor.add_or_quarantine(conn, self.file_id, batch, self.name, self.lines + 1,
                                                     raw=partial(pread, stream, batch.end - self.offset, self.offset))
            self.offset, self.lines = batch.end, batch.last_line
            if min(self.offset, HEAD_BYTES) != signed:  # the fingerprint grows with the first bytes read
                self._sign(conn, stream)
            _log_rejected(self.name, batch)
            self._emit(batch)
            if count == batches:
                return self.lines - lines_before == BATCH_LINES or (self._ahead is not None and self._ahead.active)
        return False

    def _batches(self, stream: BinaryIO, *, final: bool, unterminated: bool) -> Iterator[Batch]:
        """The file's batches from the offset: parsed ahead by ``pool`` while it can, then in process
        from wherever the offset stands by then (both read lazily: the offset moves as batches are stored)."""
        if self.pool is not None and stream is self.handle and self.decoded is None:
            if self._ahead is None:
                self._ahead = ReadAhead.of(self.pool, self.path, self.fmt, stream, self.offset, self.lines + 1,
                                           batch_lines=BATCH_LINES)
                if self._ahead is None:
                    self.pool = None  # too little to read for a pool to pay
            if self._ahead is not None:
                yield from self._ahead.batches(self.offset, self.lines + 1)
        yield from read_batches(self.path, self.parser, start=self.offset, first_line=self.lines + 1,
                                final=final, batch_lines=BATCH_LINES, stream=stream, unterminated=unterminated)

    def _sign(self, conn: Connection, stream: BinaryIO) -> None:
        self.fingerprint = self._fingerprint(stream)
        stored_files.sign(conn, self.file_id, self.fingerprint)

    def _fingerprint(self, stream: BinaryIO) -> str:
        return stored_files.fingerprint(stream, self.offset)


def _identity(handle: BinaryIO) -> Identity:
    st = os.fstat(handle.fileno())
    return st.st_dev, st.st_ino


def _log_rejected(name: str, batch: Batch) -> None:
    for r in batch.rejected[:SHOW_REJECTED]:
        log.warning("%s:%d: %s (quarantined)", name, r.line, r.reason)
    if len(batch.rejected) > SHOW_REJECTED:
        log.warning("%s: … and %d more line(s) quarantined", name, len(batch.rejected) - SHOW_REJECTED)
