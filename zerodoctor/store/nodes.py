"""Store, nodes: a path → the node whose disk holds the file, recorded in the file's row beside its path.

The nodes of one job write the same local path (``/local/runs/job`` on each), each on its own
disk, into one PostgreSQL store: the path alone names several files, the node tells them apart.
A node is its host's stable id: ``/etc/machine-id`` (systemd's, unique per installation), the
hostname where there is none, ``ZERODOCTOR_NODE_ID`` before either (containers whose hostname
changes at every start, tests). A network filesystem's file is every node's at the same path
(a job's shared ``runs/``): its node is ``SHARED``, so every node finds its one row, and a
second node's watcher is refused it while one writes it, as on one host.
"""

from __future__ import annotations

import os
import re
import socket
from functools import cache, lru_cache
from pathlib import Path

NODE_ENV = "ZERODOCTOR_NODE_ID"
SHARED = "(shared)"  # no hostname or machine id has parentheses
MACHINE_IDS = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
MOUNTS = Path("/proc/mounts")
NETWORK_TYPES = frozenset({"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "beegfs", "ceph"})


def local_node() -> str:
    """This host's node id."""
    return os.environ.get(NODE_ENV) or _host_id()


@cache
def _host_id() -> str:
    for path in MACHINE_IDS:
        try:
            machine_id = path.read_text().strip()
        except OSError:
            continue
        if machine_id:
            return machine_id
    return socket.gethostname()


def node_of(directory: Path) -> str:
    """The node whose disk holds the files in ``directory``: ``SHARED`` on a network filesystem, else this host."""
    return SHARED if _on_network_filesystem(os.path.realpath(directory)) else local_node()


@lru_cache(maxsize=4096)  # one look at the mount table per run directory, not one per file
def _on_network_filesystem(directory: str) -> bool:
    return is_network(filesystem_type(Path(directory)))


def is_network(fstype: str | None) -> bool:
    """A filesystem type other hosts mount too (``fuse.*`` counted: sshfs, s3fs, gcsfuse…)."""
    return fstype is not None and (fstype in NETWORK_TYPES or fstype.startswith("fuse."))


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


def _unescape(field: str) -> str:
    """The mount table writes space, tab, newline and backslash as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
