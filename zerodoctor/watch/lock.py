"""Watch: a store → the single-writer rule that keeps two watchers from ingesting a line twice.

- PostgreSQL, the store many nodes share: a session advisory lock per run directory, taken on
  a connection held for the watcher's life. The server keeps advisory locks per database, so
  the rule follows the database itself, never the URL's spelling (``localhost`` and
  ``127.0.0.1:5432`` are one store); each node's watcher claims its own run directories and
  all of them write into one store. A directory is its node's and its path (``store/nodes.py``):
  the nodes of one job each write ``/local/runs/job`` on their own disk, and each watcher takes
  its own; a network filesystem's directory is every node's, and one watcher writes it.
- SQLite, one writer at a time anyway: an ``flock`` on ``<database>.watch-lock`` beside the
  database, opened without following a symlink and never truncated or written (the holder is
  read from ``/proc/locks``), so a planted link cannot make a watcher clobber another file.
- Any other SQLAlchemy store: the same file lock, in a private (0700) directory of this user.

On PostgreSQL every node's watcher stores ranks of the same runs, and judging a run is one watcher's work:
the judge of a run is whoever holds its judge lock (``judges``), a session advisory lock on the same
connection, taken without waiting. The others store their ranks and skip the judgement, so a run is judged
once per pass for the whole store, not once per node, and each finding is announced once. The judge's
death (SIGKILL) closes its session and frees the lock: the next watcher that tries takes the run over.

The kernel or the server drops a lock when its process dies, SIGKILL included, so a crashed
watcher never leaves a stale one behind; the server only once it notices the closed socket,
after the query that session was running, so a watcher started at once after waits for a dead
holder of its own host (up to ``STALE_WAIT_S``) rather than refuse the directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import socket
import stat
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Protocol

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from zerodoctor.store.db import StoreError, shown
from zerodoctor.store.nodes import node_of
from zerodoctor.watch.budget import Stopping


log = logging.getLogger("zerodoctor.watch")

STALE_WAIT_S = 10.0  # a dead watcher's lock outlives it until the server notices: waited for this long


class StoreBusy(StoreError):
    """Another watcher writes (part of) the store; the message says which process."""


class WriterLock(Protocol):
    stop: threading.Event  # the watcher's own (SIGTERM sets it): a wait for a dead holder ends with ``Stopping``

    def claim(self, run_dir: Path) -> str | None:
        """None once this watcher may write ``run_dir``'s files; else who holds it."""

    def check(self) -> bool:
        """True when the locks claimed so far had to be taken again (the store's connection was lost and
        is back: what the store holds must be read again); ``StoreBusy`` when one is another's now."""

    def judges(self, run: str) -> bool:
        """True when this watcher is the one that judges ``run`` (taken now if no watcher is)."""

    def judge_of(self, run: str) -> str | None:
        """Which watcher judges ``run`` when this one does not (``pid N on HOST``); None when none does now."""

    @property
    def judging(self) -> set[str]:
        """The runs this watcher judges for other writers of the store, whose rows arrive without waking it
        (empty where this watcher is the store's only writer)."""

    def let_go(self, runs: Iterable[str]) -> None:
        """No longer judge ``runs`` (their views left memory): another watcher may take them."""

    def watched(self, files: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """Of ``(node, path)`` files other watchers stored, those whose directory a live watcher holds now: their
        ``files.grew_at`` is current. A dead watcher's files go on growing on their disk, not in the store."""


@contextmanager
def writer_lock(engine: Engine) -> Iterator[WriterLock]:
    """Hold the store's writer lock for the ``with`` block; raise ``StoreBusy`` at once if another has it."""
    url = engine.url
    if url.get_backend_name() == "postgresql":
        locks = _AdvisoryLocks(engine)
        try:
            yield locks
        finally:
            locks.conn.close()
        return
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = Path(f"{Path(url.database).resolve()}.watch-lock")
    else:
        path = _private_dir() / f"watch-{hashlib.sha256(shown(url).encode()).hexdigest()[:16]}.lock"
    fd = _open_lock_file(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreBusy(_busy(f"pid {_flock_holder(fd)}", shown(url))) from None
        yield _WholeStore()
    finally:
        # Never unlink: a waiter could lock the unlinked inode while a third process creates a new one.
        os.close(fd)


class _WholeStore:
    """The file lock covers the whole store: every run directory is this watcher's."""

    def __init__(self) -> None:
        self.stop = threading.Event()  # never waited on: the flock is taken or refused at once

    def claim(self, run_dir: Path) -> str | None:
        return None

    def check(self) -> bool:
        """The kernel keeps an flock as long as the process lives."""
        return False

    def judges(self, run: str) -> bool:
        """The only writer judges every run it reads."""
        return True

    def judge_of(self, run: str) -> str | None:
        return None  # never asked: this watcher judges them all

    @property
    def judging(self) -> set[str]:
        return set()  # no other writer saves these runs' views

    def let_go(self, runs: Iterable[str]) -> None:
        pass

    def watched(self, files: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        return set()  # the store's only writer: no other watcher stores files live


class _AdvisoryLocks:
    """One ``pg_try_advisory_lock`` per run directory (``lock_key``) and per run this watcher judges
    (``judge_key``), on a session of its own."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.held: set[int] = set()
        self.judged: dict[str, int] = {}  # run → its judge lock's key, held
        self.stop = threading.Event()
        self.conn = self._session()
        # advisory locks are the database's: two stores in two schemas of it must not share a run's judge
        self.schema = str(self.conn.execute(text("SELECT current_schema()")).scalar())

    def _session(self) -> Connection:
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text("SELECT set_config('application_name', :me, false)"), {"me": _application_name(os.getpid())})
        return conn

    def claim(self, run_dir: Path) -> str | None:
        """Take the directory's lock. One held by a watcher of this host that is dead (SIGKILLed a
        moment ago) is waited for, up to ``STALE_WAIT_S``: the server drops it only once it notices
        the closed socket, after the query that session was running. A stop (SIGTERM) ends that
        wait at once with ``Stopping``, which the watch loop ends on like any stop."""
        key = lock_key(run_dir)
        if key in self.held:
            return None
        deadline = time.monotonic() + STALE_WAIT_S
        while not self.conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}).scalar():
            holder = self._holder(key)
            # None: the lock went between the two queries (its session just closed): try again, as for a dead one
            if holder is not None and not _dead_here(holder) or time.monotonic() > deadline:
                return holder or "unknown"
            if self.stop.wait(0.1):
                raise Stopping("stopped while waiting for a dead watcher's lock")
        self.held.add(key)
        return None

    def _holder(self, key: int) -> str | None:
        """The application name of the session holding ``key``'s lock, less the prefix; None when none holds it."""
        holder = self.conn.execute(text(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.classid = :hi AND l.objid = :lo "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
            {"hi": key >> 32, "lo": key & 0xFFFF_FFFF}).scalar()
        return holder.removeprefix(_PREFIX) if holder is not None else None

    def check(self) -> bool:
        """A lost connection (a server restart, a network cut) took the locks with it. They are taken
        again on a new session (an unreachable server raises the driver's error: the watcher backs
        off and calls again), and True says so: the caller reads its offsets from the store again,
        since another watcher may have written these directories meanwhile. One another watcher
        holds now is ``StoreBusy``: this one stops rather than store its lines twice."""
        try:
            held = self.conn.execute(text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()"
            )).scalar()
        except SQLAlchemyError:
            held = None
        if held is not None and held >= len(self.held) + len(self.judged):
            return False
        if held is not None:  # the session lives but its locks went (pg_advisory_unlock_all): not ours to undo
            raise StoreBusy(f"this watcher's locks are gone ({held} of {len(self.held)} held); stopping: "
                            "start it again")
        try:
            self.conn.close()
        except SQLAlchemyError:
            pass  # already gone with the server
        self.conn = self._session()
        for key in sorted(self.held):
            if not self.conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}).scalar():
                holder = self._holder(key) or "unknown"
                raise StoreBusy(_busy(holder, shown(self.engine.url), "a run directory of this watcher "))
        # a run another watcher took over while this one was away is that one's to judge now
        self.judged = {run: key for run, key in self.judged.items() if self._try(key)}
        return True

    def judges(self, run: str) -> bool:
        """Whether this watcher judges ``run``: it does once it holds the run's judge lock, taken here without
        waiting when no watcher holds it (the first to try, or the next after the judge died or let go)."""
        if run in self.judged:
            return True
        key = judge_key(self.schema, run)
        if not self._try(key):
            return False
        self.judged[run] = key
        log.info("judging run %s for every watcher of this store", run)
        return True

    def judge_of(self, run: str) -> str | None:
        return self._holder(judge_key(self.schema, run))

    @property
    def judging(self) -> set[str]:
        return set(self.judged)

    def let_go(self, runs: Iterable[str]) -> None:
        for run in runs:
            key = self.judged.pop(run, None)
            if key is not None:
                self.conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})

    def watched(self, files: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """One look at the server's lock table for the locks of those files' directories (``dir_key``)."""
        keys: dict[int, list[tuple[str, str]]] = {}
        for node, path in files:
            keys.setdefault(dir_key(node, Path(path).parent), []).append((node, path))
        if not keys:
            return set()
        held = self.conn.execute(text(
            "SELECT (l.classid::bigint << 32) | l.objid::bigint FROM pg_locks l WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.objsubid = 1 "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())")).scalars()
        return {file for key in held if key in keys for file in keys[key]}

    def _try(self, key: int) -> bool:
        return bool(self.conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}).scalar())


_PREFIX = "zerodoctor watch "


def _application_name(pid: int) -> str:
    """How a watcher names its session on the server: the holder ``claim`` reports is this, unprefixed."""
    return f"{_PREFIX}pid {pid} on {socket.gethostname()}"[:63]  # NAMEDATALEN


def _dead_here(holder: str) -> bool:
    """``holder`` names a watcher of this host whose process is gone."""
    match = re.match(r"pid (\d+) on ", holder)
    if match is None or _application_name(int(match.group(1))) != _PREFIX + holder:
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def advisory_key(name: str) -> int:
    """A 63-bit PostgreSQL advisory-lock key for ``name`` (keys are bigint; positive keeps classid/objid simple)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1


def lock_key(run_dir: Path) -> int:
    """The advisory-lock key of a run directory of this node (or a network filesystem's)."""
    run_dir = run_dir.resolve()
    return dir_key(node_of(run_dir), run_dir)


def dir_key(node: str, run_dir: Path) -> int:
    """The advisory-lock key of a run directory: its node's and its resolved path's."""
    return advisory_key(f"{node}\n{run_dir}")  # a node id has no newline


def judge_key(schema: str, run: str) -> int:
    """The advisory-lock key of a run's judge: one per store (its schema) and run name, whichever node writes
    its ranks (a NUL is in no node id, so no run directory's key is a judge's)."""
    return advisory_key(f"judge\0{schema}\0{run}")


def busy_dir(run_dir: Path, holder: str, url: str) -> StoreBusy:
    return StoreBusy(_busy(holder, url, f"{run_dir} "))


def _busy(holder: str, url: str, what: str = "") -> str:
    return (f"another 'zerodoctor watch' ({holder}) is already writing {what}to {url}; a second one would "
            "store every line twice: stop it, or use another --db")


def _open_lock_file(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:  # ELOOP: a symlink planted at the lock's name
        raise StoreBusy(f"{path}: cannot open the watch lock ({exc.strerror}); a symlink there is refused, "
                        "remove it") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreBusy(f"{path}: the watch lock is not a regular file; remove it")
    return fd


def _flock_holder(fd: int) -> str:
    """The pid holding an flock on ``fd``'s file, from the kernel's table; "unknown" elsewhere."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return "unknown"
    flocks = [fields for fields in map(str.split, table.splitlines()) if len(fields) > 5 and fields[1] == "FLOCK"]
    for fields in flocks:
        if fields[5] == inode:
            return fields[4]
    for fields in flocks:  # overlay filesystems show the lower device: the inode alone, then
        if fields[5].rsplit(":", 1)[-1] == str(st.st_ino):
            return fields[4]
    return "unknown"


def _private_dir() -> Path:
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or Path.home() / ".cache") / "zerodoctor"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    if base.stat().st_uid != os.geteuid() or base.stat().st_mode & 0o077:
        raise StoreBusy(f"{base}: the lock directory must be this user's own, mode 0700")
    return base
