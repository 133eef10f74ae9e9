"""Watch: a store URL → the single-writer lock that keeps two watchers from ingesting every line twice.

An advisory ``flock`` on a file beside the SQLite database (or, for a server URL, in the
temporary directory of this host). The kernel drops it when the process dies, SIGKILL
included, so a crashed watcher never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy.engine import make_url


class StoreBusy(RuntimeError):
    """Another watcher holds the store; the message says which process."""


def lock_path(url: str) -> Path:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return Path(f"{parsed.database}.watch-lock")
    digest = hashlib.sha1(url.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"zerodoctor-watch-{digest}.lock"


@contextmanager
def writer_lock(url: str) -> Iterator[Path]:
    """Hold the store's writer lock for the ``with`` block, or raise ``StoreBusy`` at once."""
    path = lock_path(url)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise StoreBusy(f"another 'zerodoctor watch' (pid {holder}) is already writing to {url}; "
                            f"a second one would store every line twice: stop it, or use another --db") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        # Never unlink: a waiter could lock the unlinked inode while a third process creates a new one.
        os.close(fd)
