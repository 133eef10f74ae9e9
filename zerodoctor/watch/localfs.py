"""Watch: the store's path → whether its filesystem can hold an SQLite WAL database.

WAL needs shared memory and POSIX locks that network filesystems do not give between
hosts, and the default store (``<first DIR>/zerodoctor.db``) sits in ``runs/``, which is
shared between the nodes of a multi-node job. The filesystem type comes from the mount
table: the longest mount point that holds the path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

MOUNTS = Path("/proc/mounts")
NETWORK_TYPES = frozenset({"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "beegfs", "ceph"})


def filesystem_type(path: Path, mounts: Path | None = None) -> str | None:
    """The type of the filesystem holding ``path`` (which need not exist yet); None when unknown."""
    target = os.path.realpath(path)
    best, fstype = "", None
    try:
        table = (mounts or MOUNTS).read_text()
    except OSError:
        return None  # no mount table (not Linux): nothing to say
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = _unescape(fields[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # the later of two equal mounts is the one seen
            best, fstype = point, fields[2]
    return fstype


def network_store_error(url: str, mounts: Path | None = None) -> str | None:
    """A one-line error when ``url`` is an SQLite file on a network filesystem, else None."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None  # not a URL at all: opening the store says so
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    fstype = filesystem_type(Path(parsed.database), mounts)
    if fstype is None or not (fstype in NETWORK_TYPES or fstype.startswith("fuse.")):
        return None
    return (f"{parsed.database} is on a network filesystem ({fstype}), where SQLite's WAL corrupts or "
            f"blocks: pass --db with a path on a local disk (or a PostgreSQL URL)")


def _unescape(field: str) -> str:
    """The mount table writes space, tab, newline and backslash as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
