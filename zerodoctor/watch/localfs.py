"""Watch: the store's path → whether its filesystem can hold an SQLite WAL database.

WAL needs shared memory and POSIX locks that network filesystems do not give between
hosts, and the default store (``<first DIR>/zerodoctor.db``) sits in ``runs/``, which is
shared between the nodes of a multi-node job. The filesystem type comes from the mount
table (``store/nodes.py``, which also tells which files every node shares).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from zerodoctor.store.nodes import MOUNTS, filesystem_type, is_network


def network_store_error(url: str, mounts: Path | None = None) -> str | None:
    """A one-line error when ``url`` is an SQLite file on a network filesystem, else None."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None  # not a URL at all: opening the store says so
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    fstype = filesystem_type(Path(parsed.database), mounts or MOUNTS)
    if not is_network(fstype):
        return None
    return (f"{parsed.database} is on a network filesystem ({fstype}), where SQLite's WAL corrupts or "
            f"blocks: pass --db with a path on a local disk (or a PostgreSQL URL)")
