"""Tail: one file on disk → its new complete lines in the store, exactly once, across restarts and rotation.

The truth is the file's row in the store: identity (device, inode, and a fingerprint of its
first bytes), byte offset and line count, committed in the same transaction as the events
read up to that offset. The open handle is only a means: it keeps a renamed or deleted file
readable so that its last lines can be drained before the tail switches to the file now at
the path. Handles are few: past ``readable.OpenFiles.limit`` (a fraction of ``ulimit -n``) the least
recently read tail closes its own and opens it again on its next poll, so 10,000 rank files
cost no more descriptors than 100. Only regular files are opened (``sources.readable``).

Rotation is recognised the way the log shippers do it (Fluent Bit, pygtail):
- rename+create, delete+recreate: the path names another inode → drain the old handle, read
  whole any rotated generation newer than it (``.1`` newer than ``.2``, ``-20261203`` newer than
  ``-20261202``: two rotations between two reads leave one behind), then read the new file from 0;
- copytruncate, or a ``>`` rewrite: same inode, size below the offset, or first bytes that are no
  longer those read (checked at every poll that sees the size or mtime change, so a file rewritten
  and grown past the old offset between two polls is read again from 0, not from the middle);
- path deleted (the open file has no name left) → drain, close, forget;
- path away (renamed or moved, its directory too, or a network filesystem's ESTALE/EIO): the file
  is "missing" and its row keeps identity and offsets for ``MISSING_GRACE_S`` of polls; back at
  the path it reads on; found at another path under the roots it is the same file
  (``store/files.register`` moves the row there); after the grace it is "gone" (the row still
  kept: a file found again later still reads on). Moved away with a new file made at its path (a run
  directory renamed, one made with its name) the open file is read on through its handle until a rescan
  finds it at its new path and its row moves there; the new file gets a row of its own then.
After a restart (or a closed handle) a renamed-away file is found again by its inode among its
siblings and drained from the stored offset, then the generations rotated after it; one compressed
since (logrotate's ``compress``: ``.1.gz``, a new inode) is found by its first bytes and read decoded. A file whose
inode is the stored one but whose first bytes are not (deleted and recreated while unwatched: ext4
reuses inodes at once) is a new file, read from 0.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import time
from functools import partial
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Literal

from sqlalchemy import Connection

from zerodoctor.sources.batches import BATCH_LINES, Batch, Parser, make_parser, read_batches, run_id_for
from zerodoctor.sources.readahead import Pool, ReadAhead
from zerodoctor.sources.readable import HEAD_BYTES, OPEN_FILES, UnreadableFile, check_regular, open_log, pread
from zerodoctor.sources.rejects import say_rejected
from zerodoctor.store import files as stored_files

log = logging.getLogger("zerodoctor.watch")

Identity = tuple[int, int] | tuple[None, None]
_DRAINED: Identity = (None, None)
MISSING_GRACE_S = 30.0  # a file away from its path this long is gone (a run directory moved out of the roots)
# A file unchanged this long is quiet: what its parser holds open for lines that may still come (a traceback
# waiting for more of its message) is let go. A traceback prints in one burst; a crashed rank writes nothing after.
QUIET_S = 5.0
# What a reader reads back for the lines of a crash message held when it started (``FileTail._replay_held``): a
# traceback lets go after 400 lines (``sources/fatal.py``), a line is mostly under 200 bytes.
REPLAY_BYTES = 4 << 20
Polled = Literal["idle", "more", "missing", "gone"]
# A rotated generation's name: the file's, then logrotate's ``.1``/``.2`` or dateext ``-20261202`` (maybe gzipped).
_ROTATED = re.compile(r"(?:\.(?P<n>\d+)|-(?P<date>\d[\w.:+-]*?))(?:\.gz)?")
# How many times the generations beside a file are listed for one read of them at most: a writer that rotates
# while they are opened shifts their names, and a listing is taken again until it shows none not opened.
LISTINGS = 8
# What stores a batch read from a tail (the pipeline's ``store``), given the connection, the tail, the batch
# and how to read the batch's bytes again; returns the batch stored (less any line the store refused).
Store = Callable[[Connection, "FileTail", Batch, Callable[[], bytes]], Batch]


class FileTail:
    """Reads one path of a run directory into the store, resuming from its stored row."""

    def __init__(self, conn: Connection, path: Path, fmt: str, *, pool: Pool | None = None,
                 quiet_s: float | None = QUIET_S) -> None:
        """Raises ``UnreadableFile`` (an ``OSError``) for a FIFO, device, socket, symlink loop or binary file.

        ``pool``: worker processes that may parse a large file ahead (``diagnose``: read to the end once).
        ``quiet_s``: how long the file must be unchanged for ``poll`` to let go of what its parser holds open
        (None: never; ``diagnose`` ``finish``es its files instead).
        """
        self.path = path
        self.fmt = fmt
        self.pool = pool
        self.quiet_s = quiet_s
        self._ahead: ReadAhead | None = None
        # Opened before the row exists (a file that is no log gets none), and kept for the first read.
        self._opened: tuple[BinaryIO, str | None] | None = open_log(path)
        try:
            row = stored_files.register(conn, path, fmt, self._opened[0])
            if "moved_from" in row:
                log.info("%s is %s moved (the same file: inode and first bytes); reading on from byte %d",
                         row["path"], row["moved_from"], row["offset"])
            self.file_id: int = row["id"]
            self.name: str = row["path"]
            self.handle: BinaryIO | None = None
            self.decoded: str | None = None
            self.missing_since: float | None = None
            self.away_since: float | None = None  # moved away with a new file at its path (``_moved_away``)
            self._seen: tuple[int, int] | None = None  # (size, mtime) at the last poll
            # ``_read_to_end``: the last read found no more; with the same (size, mtime), none is there (resync)
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
        if self.handle is not None and _identity(self.handle) != self.identity:
            # The rolled-back transaction had moved the row on to this file (a rotation): the next poll opens
            # the path again and finds the row's file beside it (``_open``), to read on from its offset.
            self.close()
        self.fingerprint: str | None = row["fingerprint"]
        self.parser: Parser = make_parser(self.fmt, run_id=run_id_for(self.path), path=self.path)
        self._read_to_end = False  # read again from the row's offset, whatever the file's size
        # the last lines before the offset that held a crash message when it was stored, fed again before the
        # first read (``_replay_held``); the one who stored them may have been killed before letting it go
        self._held_lines: int = row.get("held_lines") or 0

    def poll(self, conn: Connection, store: Store) -> Polled:
        """Store a batch of new complete lines (``BATCH_LINES`` lines, ``BATCH_RANKS`` ranks at most): "more" when
        more are waiting, "missing" while the file is away from its path (``MISSING_GRACE_S``), "gone" once it is
        gone for good.

        ``store`` writes each batch read (the pipeline: rows, views). Nothing is committed
        here: the caller commits ``conn``'s transaction, and calls ``resync`` for every tail if
        that fails. A file being drained is read to its end.
        """
        self._store = store
        try:
            st = check_regular(self.path)
        except UnreadableFile:  # a FIFO, a symlink loop…: nothing more to read at this path
            self._drain_and_close(conn, "is no regular file any more")
            return "gone"
        except OSError as exc:
            return self._vanished(conn, exc)
        if self.missing_since is not None:
            log.info("%s is back; reading on", self.name)
            self.missing_since = None
        current = (st.st_dev, st.st_ino)
        if self.handle is not None and _identity(self.handle) != current and self._moved_away():
            # Its run directory renamed and a new one made with the old name: the row follows the file (found
            # at its new path by a rescan, ``store/files.register``); the new file gets a row of its own then.
            if self.away_since is None:
                log.info("%s was moved away and a new file made at its path; reading it on through its handle "
                         "and waiting %.0f s for it to be found under the watched roots", self.name, MISSING_GRACE_S)
                self.away_since = time.monotonic()
            if time.monotonic() - self.away_since < MISSING_GRACE_S:
                return "more" if self._read(conn, self.handle, final=False, batches=1) else "missing"
        if self.handle is not None and _identity(self.handle) != current:
            try:  # held first: the generations to read are those between the old file and this one
                successor = open_log(self.path)
            except OSError:
                successor = None
            self._drain_and_close(conn, "was replaced (rotated)",
                                  successor=_identity(successor[0]) if successor else current)
            self.away_since = None
            self._opened = successor
        if self.handle is None and not self._open(conn):
            return "gone"
        OPEN_FILES.used(self)
        seen, self._seen = self._seen, (st.st_size, st.st_mtime_ns)
        # A decoded file's offsets count decoded bytes, which its size on disk does not bound.
        if current == self.identity and self.decoded is None and self.offset and seen != self._seen:
            if st.st_size < self.offset:
                log.info("%s: truncated below offset %d (copytruncate); reading it again from the start",
                         self.name, self.offset)
                self._reset(conn, current)
            elif self.fingerprint is not None and self._fingerprint(self.handle) != self.fingerprint:
                log.warning("%s: rewritten in place (its first bytes are not those read: copytruncate or '>' "
                            "and new lines past byte %d); reading it again from the start", self.name, self.offset)
                self._reset(conn, current)
        # A file unchanged since a read that found no more costs this poll's stat alone: a live pass over
        # 4,096 rank files reads only those that grew.
        unchanged = seen == self._seen and self._read_to_end and self._ahead is None
        self._read_to_end = False
        if not unchanged and self._read(conn, self.handle, final=False, batches=1):
            return "more"
        self._read_to_end = True
        if self._quiet(st):
            self.let_go(conn, store)
        return "idle"

    def _moved_away(self) -> bool:
        """The open file still has a name, but not beside its path (a rotation renames it there): it was
        moved elsewhere, its directory renamed, while a new file took its path."""
        assert self.handle is not None
        try:
            if os.fstat(self.handle.fileno()).st_nlink == 0:
                return False
        except OSError:
            return False
        own = _identity(self.handle)
        return not any((st.st_dev, st.st_ino) == own for _, st in self._siblings())

    def _quiet(self, st: os.stat_result) -> bool:
        """Unchanged for ``quiet_s``, and read to its end: a last line still unterminated is a writer mid-line."""
        if self.quiet_s is None or time.time() - st.st_mtime < self.quiet_s:
            return False
        return self.decoded is not None or st.st_size <= self.offset

    def let_go(self, conn: Connection, store: Store) -> None:
        """Store what the parser holds open for lines that may still come (``TextParser.let_go``): the file
        went quiet, or ``watch --once`` ends. The offset stays: those lines were stored with it already."""
        let_go = getattr(self.parser, "let_go", None)
        held = let_go() if let_go is not None else ()
        if held:
            store(conn, self, Batch.of(list(held), end=self.offset, last_line=self.lines), lambda: b"")

    def arrived_t(self) -> float | None:
        """When the lines being stored arrived, for a log that shows no clock of its own (``TextParser.clockless``):
        the file's last change, on this host's clock. None where the events carry their own times."""
        return self._changed_t() if getattr(self.parser, "clockless", False) else None

    def unchanged_s(self) -> float | None:
        """How long the file has been unchanged, on this host's clock: stored with its lines (``files.grew_at``),
        it tells the judge on another node how long this rank has been silent."""
        changed = self._changed_t()
        return None if changed is None else max(0.0, time.time() - changed)

    def _changed_t(self) -> float | None:
        """The file's last change (the open one's, else the path's), on this host's clock."""
        try:
            return (os.fstat(self.handle.fileno()) if self.handle is not None else os.stat(self.path)).st_mtime
        except OSError:
            return None

    def _vanished(self, conn: Connection, exc: OSError) -> Polled:
        """No file at the path. Deleted (the open file has no name left): drained and forgotten, "gone".
        Anywhere else: "missing", the row keeping identity and offsets (see the module's docstring)."""
        if self.handle is not None:
            try:
                deleted = os.fstat(self.handle.fileno()).st_nlink == 0
            except OSError:
                deleted = False
            if deleted:
                self._drain_and_close(conn, "is gone (deleted)")
                return "gone"
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # moved: what it holds now is still ours to read
                log.info("%s is missing (renamed or moved?); reading its last lines and waiting %.0f s for it",
                         self.name, MISSING_GRACE_S)
                self._read(conn, self.handle, final=False)
            else:
                log.warning("%s: %s; taken as missing for up to %.0f s", self.name, exc.strerror or exc,
                            MISSING_GRACE_S)
            self.close()
        now = time.monotonic()
        if self.missing_since is None:
            self.missing_since = now
        if now - self.missing_since < MISSING_GRACE_S:
            return "missing"
        log.info("%s is gone (missing for %.0f s): read to byte %d (line %d); found again under the watched roots "
                 "it reads on from there", self.name, now - self.missing_since, self.offset, self.lines)
        return "gone"

    def finish(self, conn: Connection, store: Store, *, unterminated: bool = True) -> None:
        """The file is complete (``diagnose``): store what ``poll`` leaves and the parser's held state.
        Call after ``poll`` stops answering "more".

        ``unterminated=False`` keeps an unterminated last line out: when the store is kept (``--db``)
        the file may still be growing, and its next read gets that line whole.
        """
        self._store = store
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
        self._read_to_end = False
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
        elif (identity == self.identity and self.fingerprint is not None
              and self._fingerprint(handle) != self.fingerprint):
            log.warning("%s: a new file with the old one's inode (its first bytes differ from those read); "
                        "reading it from the start", self.name)
            self._drain_lost_file(conn, identity)  # the old one rotated and compressed, or gone (said)
            self._reset(conn, identity)
        elif identity != self.identity:
            if self.identity != _DRAINED and (self.offset or self.lines):
                self._drain_lost_file(conn, identity)
            self._reset(conn, identity)
        self.handle = handle
        return True

    def _drain_and_close(self, conn: Connection, why: str, *, successor: Identity | None = None) -> None:
        """Read the open file to its end and close it; ``successor``: the file now at the path (a rotation),
        whose predecessors rotated after this one are read whole too."""
        if self.handle is None:
            return
        log.info("%s %s; reading its last lines", self.name, why)
        self._read(conn, self.handle, final=True)
        drained = _identity(self.handle)
        self.close()
        if successor is not None:
            self._read_rotated_after(conn, drained, successor)
        # Committed with the drained lines: whatever appears at the path next is a new file.
        self._reset(conn, _DRAINED)

    def _drain_lost_file(self, conn: Connection, successor: Identity) -> None:
        """The stored file is no longer at the path (``successor`` is): find it beside it and drain it from
        the stored offset, then the generations rotated after it. Found by its inode (renamed), else by its
        first bytes among the compressed generations (logrotate's ``compress``: ``.1`` gzipped into
        ``.1.gz``, a new inode); what cannot be found is said, with what it loses."""
        device, inode = self.identity
        for entry, st in self._siblings():
            if (st.st_dev, st.st_ino) == (device, inode) and entry.name != self.path.name:
                try:
                    old, _ = open_log(entry.path)
                except OSError:  # renamed again since the listing (a rotation): found by its first bytes below
                    break
                with old:
                    if _identity(old) != (device, inode) or (
                            self.fingerprint is not None and self._fingerprint(old) != self.fingerprint):
                        break  # renamed again, or the inode reused by an unrelated file: found by its first bytes
                    log.info("%s was rotated to %s while not watched; reading its last lines", self.name, entry.name)
                    self._read(conn, old, final=True)
                self._read_rotated_after(conn, (st.st_dev, st.st_ino), successor)
                return
        if self.fingerprint is not None and self._read_rotated_after(conn, None, successor):
            return
        unread = [entry.name for entry, _ in self._siblings() if _generation(self.path.name, entry.name)]
        log.warning("%s was replaced while not watched and the old file is gone; lines written to it after "
                    "byte %d (line %d) are lost%s", self.name, self.offset, self.lines,
                    f", and {len(unread)} rotated file(s) beside it are not read ({', '.join(sorted(unread))})"
                    if unread else "")

    def _siblings(self) -> list[tuple[os.DirEntry, os.stat_result]]:
        """The regular files beside the path, with their ``stat``."""
        try:
            entries = list(os.scandir(self.path.parent))
        except OSError:
            return []
        found = []
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((entry, st))
        return found

    def _read_rotated_after(self, conn: Connection, drained: Identity | None, successor: Identity) -> bool:
        """Read whole the rotated generations between the file just drained and ``successor`` (the one
        at the path, opened before this looks): two rotations between two reads, or while not watched,
        leave whole files between them. True when the drained file was found among them.

        The drained file is the generation with its identity (``drained``), else, compressed since
        (logrotate's ``compress``: a new inode), the newest whose first bytes are those read (the
        fingerprint); ``drained`` None: it was not found by its inode, and is drained here from the stored
        offset first. Generations rotated after ``successor`` are left to the next read, which drains it.
        Their order is their last write's (mtime), ties (one timestamp tick) broken by the name's (``.2``
        before ``.1``, ``-<date>`` in date order), as logrotate names them; a compressed copy has the mtime
        of the file it was.
        """
        opened = self._open_generations()
        try:
            own = next((key for key, _, identity, _ in opened if identity == drained), None) if drained else None
            if own is None and self.fingerprint is not None:
                own = max((key for key, stream, identity, _ in opened if identity != successor
                           and self._fingerprint(stream) == self.fingerprint), default=None)
                if own is not None and drained is None:
                    stream, name = next((stream, name) for key, stream, _, name in opened if key == own)
                    log.info("%s was %s to %s while not watched; reading its last lines", self.name,
                             "compressed" if name.endswith(".gz") else "copied", name)
                    self._read(conn, stream, final=True)
            if own is None:
                if opened and drained is not None:
                    log.warning("%s: the rotated file read last is not among the %d rotated file(s) beside it; any "
                                "generation rotated after it is not read", self.name, len(opened))
                return False
            # the successor's key, where it was rotated too: what is newer than it is read after it, not here
            last = next((key for key, _, identity, _ in opened if identity == successor), None)
            newer = sorted((key, stream, identity, name) for key, stream, identity, name in opened
                           if own < key and (last is None or key < last) and identity not in (drained, successor))
            for _, stream, identity, name in newer:
                self._reset(conn, identity)
                self._read(conn, stream, final=True)
                log.warning("%s: rotated more than once between two reads; %s read whole too (%d line(s))",
                            self.name, name, self.lines)
            return True
        finally:
            for _, stream, _, _ in opened:
                stream.close()

    def _open_generations(self) -> list[tuple[tuple, BinaryIO, Identity, str]]:
        """Every rotated generation beside the path, opened once: (order key, stream, identity, name).

        The writer may rotate again while they are opened, renaming each one up (``.1`` to ``.2``) under
        the listing: a generation is then opened under two names and another under none. So each is kept
        by its identity, and the directory listed again until a listing finds none not opened; from then
        on each is followed by its handle, never its name.
        """
        opened: dict[Identity, tuple[tuple, BinaryIO, Identity, str]] = {}
        try:
            for _ in range(LISTINGS):
                fresh = False
                for entry, st in self._siblings():
                    if not (age := _generation(self.path.name, entry.name)) or (st.st_dev, st.st_ino) in opened:
                        continue
                    try:
                        stream, _ = open_log(entry.path)
                    except OSError:
                        continue
                    identity = _identity(stream)  # the file opened, whatever the name listed held by then
                    if identity in opened:
                        stream.close()
                        continue
                    opened[identity] = ((os.fstat(stream.fileno()).st_mtime_ns, age), stream, identity, entry.name)
                    fresh = True
                if not fresh:
                    break
        except BaseException:
            for _, stream, _, _ in opened.values():
                stream.close()
            raise
        return list(opened.values())

    def _reset(self, conn: Connection, identity: Identity) -> None:
        """Point the row at a new file (a truncated one, or none yet) at offset 0; stored counts stay."""
        stored_files.point_at(conn, self.file_id, *identity)
        self.resync({"device": identity[0], "inode": identity[1], "offset": 0, "lines": 0, "fingerprint": None})

    def _read(self, conn: Connection, stream: BinaryIO, *, final: bool, batches: int | None = None,
              unterminated: bool = True) -> bool:
        """Store batches from the offset on; True when ``batches`` full ones were read (more may wait)."""
        if self._held_lines:
            self._replay_held(stream)
        for count, batch in enumerate(self._batches(stream, final=final, unterminated=unterminated), 1):
            if batch.end == self.offset and not batch.events and not batch.step_count() and not batch.rejected:
                continue
            cut, signed = batch.cut, min(self.offset, HEAD_BYTES)
            batch = self._store(conn, self, batch, partial(pread, stream, batch.end - self.offset, self.offset))
            self.offset, self.lines = batch.end, batch.last_line
            if min(self.offset, HEAD_BYTES) != signed:  # the fingerprint grows with the first bytes read
                self._sign(conn, stream)
            _log_rejected(self.name, batch)
            if count == batches:
                return cut or (self._ahead is not None and self._ahead.active)
        return False

    def _replay_held(self, stream: BinaryIO) -> None:
        """Feed this fresh parser the stored lines that held a crash message (a traceback's message, which may
        go on) when the offset was committed past them: the reader that held it may have been SIGKILLed before
        the file went quiet, and the crash, stored nowhere, would never be told. Held again here, it is told
        when let go (a quiet file, the end of ``--once``), once: letting it go stores ``held_lines`` 0."""
        count, self._held_lines = self._held_lines, 0
        replay = getattr(self.parser, "replay", None)
        if replay is None:
            return
        start = max(0, self.offset - REPLAY_BYTES)
        lines = pread(stream, self.offset - start, start).split(b"\n")[:-1]  # the offset is past a newline
        if len(lines) < count + (start > 0):  # the first line read back may be cut at ``start``
            log.warning("%s: the %d line(s) before byte %d held a crash message not stored yet; over %d bytes, "
                        "not read again", self.name, count, self.offset, REPLAY_BYTES)
            return
        replay([line + b"\n" for line in lines[-count:]])

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


def _generation(name: str, sibling: str) -> tuple | None:
    """How recent a rotated ``sibling`` of the file ``name`` is, oldest lowest; None for no rotation of it."""
    if not sibling.startswith(name) or not (m := _ROTATED.fullmatch(sibling[len(name):])):
        return None
    return (0, -int(m["n"])) if m["n"] is not None else (1, m["date"])


def _identity(handle: BinaryIO) -> Identity:
    st = os.fstat(handle.fileno())
    return st.st_dev, st.st_ino


def _log_rejected(name: str, batch: Batch) -> None:
    say_rejected(log, name, batch.rejected)
