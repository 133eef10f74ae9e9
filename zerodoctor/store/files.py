"""Store, files: a file on disk → its row; the one home of the ``files`` table.

Exactly-once rests on this row: which file it is (node, device, inode, and a fingerprint of
its first bytes) and how far it was read (byte offset, lines), the offset moved only in the
transaction that stores the rows read up to it (``advance``). A row is found by its node and
path: the nodes of one job write the same local path into one store, each its own file
(``store/nodes.py``), and no node reads or moves another's row. The tail (``pipeline/tail.py``)
compares the row's identity with the file at the path, and points the row at another file
(``point_at``) when a rotation replaced the one it read. A row follows its file when the file's
run directory is renamed or moved (``register``): a run is its run id, not its directory's name.
A second name of a file already read at another path (a hard link: ``cp -al`` of a run directory)
gets no row of its own (``SameFile``): the file is read once, at the path whose row it has.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import BinaryIO, Iterable

from sqlalchemy import Connection, Float, Select, bindparam, delete, func, select, update

from zerodoctor.sources.readable import HEAD_BYTES, pread
from zerodoctor.store.db import StoreClock, insert_new
from zerodoctor.store.nodes import SHARED, local_node, node_of
from zerodoctor.store.schema import files


class SameFile(Exception):
    """The file at ``path`` is one a row already reads at ``other``, which still names it (a hard link)."""

    def __init__(self, path: str, other: str) -> None:
        super().__init__(f"{path} is the same file as {other} (a hard link); read once, there")
        self.path, self.other = path, other


def register(conn: Connection, path: Path, fmt: str, stream: BinaryIO | None = None) -> dict:
    """The row of the file at ``path`` (resolved) on its node, created at offset 0 with the identity found there.

    A file with no row at this path may be one already read at another: its run directory renamed
    or moved within the watched roots, live or while no watcher ran. Its row (same node, device,
    inode and format, no longer at its old path, and the same first bytes in ``stream``, the file
    opened at ``path``) moves to this path with its offsets, so not one line is read twice; the row
    returned then says where it was (``moved_from``). A file a row reads at another path that still
    names it (same node, device and inode: a hard link) raises ``SameFile``: reading it here too would
    store every line twice.
    """
    key = Path(path).resolve()
    node, name = node_of(key.parent), str(key)
    row = _find(conn, node, name)
    if row is None:
        st = os.stat(key)
        _check_not_linked(conn, node, name, st)
        if moved := _moved(conn, node, name, fmt, st, stream):
            return moved
        if not _claim(conn, node, name, st):
            # Another writer may create the same row meanwhile: its row wins, none raises.
            conn.execute(insert_new(conn, files).values(node=node, path=name, format=fmt, device=st.st_dev,
                                                        inode=st.st_ino, offset=0, lines=0, events=0, quarantined=0))
        row = _find(conn, node, name)
    return row


def _check_not_linked(conn: Connection, node: str, path: str, st: os.stat_result) -> None:
    """Raise ``SameFile`` when another row's path still names this very file (a hard link). Its first
    bytes need no check: one inode at both paths now is one file, whatever that row read before (a
    stale row's tail finds the new bytes and reads them from 0, once)."""
    for other in conn.execute(select(files.c.path).where(
            files.c.node == node, files.c.device == st.st_dev, files.c.inode == st.st_ino,
            files.c.path != path).order_by(files.c.id)).scalars():
        try:
            there = os.stat(other)
        except OSError:
            continue
        if (there.st_dev, there.st_ino) == (st.st_dev, st.st_ino):
            raise SameFile(path, other)


def _moved(conn: Connection, node: str, path: str, fmt: str, st: os.stat_result,
           stream: BinaryIO | None) -> dict | None:
    """The row of this very file stored under another path (renamed or moved), now moved to ``path``."""
    candidates = conn.execute(select(files).where(
        files.c.node == node, files.c.device == st.st_dev, files.c.inode == st.st_ino, files.c.format == fmt,
        files.c.path != path).order_by(files.c.id)).mappings().all()
    for row in candidates:
        if row["fingerprint"] is not None and (
                stream is None or fingerprint(stream, row["offset"]) != row["fingerprint"]):
            continue  # the inode number reused by another file
        conn.execute(update(files).where(files.c.id == row["id"]).values(path=path))
        return {**_find(conn, node, path), "moved_from": row["path"]}
    return None


# Every new tail looks its row up: built once, so SQLAlchemy reuses its compiled form (a fresh ``watch --once``
# at 4,096 ranks makes 4,096 of these)
_FIND = select(files).where(files.c.node == bindparam("b_node"), files.c.path == bindparam("b_path"))


def _find(conn: Connection, node: str, path: str) -> dict | None:
    row = conn.execute(_FIND, {"b_node": node, "b_path": path}).mappings().first()
    return dict(row) if row is not None else None


def _claim(conn: Connection, node: str, path: str, st: os.stat_result) -> bool:
    """A row stored before rows had a node (migration 0007 on a store many nodes share) belongs to the
    node whose file at ``path`` has the row's device and inode: that node read it, and takes it over
    with its offset (the tail then checks the fingerprint, as for any row). True when it did."""
    claimed = conn.execute(update(files).where(
        files.c.node.is_(None), files.c.path == path, files.c.device == st.st_dev, files.c.inode == st.st_ino,
    ).values(node=node))
    return claimed.rowcount > 0


def rows(conn: Connection, file_ids: Iterable[int]) -> dict[int, dict]:
    """The rows of ``file_ids`` by id (a tail takes its offsets from them again after a rollback)."""
    return {r["id"]: dict(r) for r in conn.execute(select(files).where(files.c.id.in_(list(file_ids)))).mappings()}


def sources_here(conn: Connection) -> list[tuple[int, str, str]]:
    """``(id, path, format)`` of the files this host reads at their paths (its own, the shared
    filesystems', and those not claimed since rows had a node): which parser read each."""
    here = files.c.node.in_([local_node(), SHARED]) | files.c.node.is_(None)
    return [tuple(r) for r in conn.execute(select(files.c.id, files.c.path, files.c.format).where(here))]


def formats(conn: Connection, file_ids: Select | list[int]) -> dict[str, str]:
    """Path → format of the files ``file_ids`` (ids, or a query of them) selects."""
    return dict(conn.execute(select(files.c.path, files.c.format).where(files.c.id.in_(file_ids))).all())


def progress(conn: Connection) -> list[tuple[int, str, int, int, int, str | None]]:
    """``(id, path, events, quarantined, offset, node)`` of every file, by path and node: what ``status`` shows."""
    query = select(files.c.id, files.c.path, files.c.events, files.c.quarantined, files.c.offset, files.c.node)
    return [tuple(r) for r in conn.execute(query.order_by(files.c.path, files.c.node))]


def point_at(conn: Connection, file_id: int, device: int | None, inode: int | None) -> None:
    """The row now reads another file (a rotation's new one; None: none yet) from offset 0; its counts stay."""
    conn.execute(update(files).where(files.c.id == file_id).values(
        device=device, inode=inode, offset=0, lines=0, fingerprint=None))


def fingerprint(stream: BinaryIO, offset: int) -> str:
    """What a row's fingerprint covers: the sha256 of the file's first ``min(offset, HEAD_BYTES)`` bytes."""
    return hashlib.sha256(pread(stream, min(offset, HEAD_BYTES), 0)).hexdigest()


def sign(conn: Connection, file_id: int, value: str) -> None:
    """Record the fingerprint of the bytes read so far (it grows with them, up to ``HEAD_BYTES``)."""
    conn.execute(update(files).where(files.c.id == file_id).values(fingerprint=value))


# Every stored batch moves its file's offset: built once, so SQLAlchemy reuses its compiled form
# (building this and the runs' UPDATE per batch cost ~1.5 ms, most of a one-line batch's cost in a live watch).
_ADVANCE = update(files).where(files.c.id == bindparam("b_file")).values(
    offset=bindparam("b_end"), lines=bindparam("b_lines"), held_lines=bindparam("b_held"),
    events=files.c.events + bindparam("b_events"), quarantined=files.c.quarantined + bindparam("b_rejected"),
    grew_at=func.coalesce(StoreClock() - bindparam("b_unchanged", type_=Float), files.c.grew_at))


def advance(conn: Connection, file_id: int, *, end: int, lines: int, events: int, rejected: int,
            held: int = 0, unchanged_s: float | None = None) -> None:
    """Move the file's offset to ``end`` (line ``lines``) and count what was stored, in the batch's transaction;
    ``held``: how many of the lines before ``end`` belong to a message the parser still holds open.
    ``unchanged_s``: how long the file had been unchanged when read, on this host's clock (``grew_at``)."""
    conn.execute(_ADVANCE, {"b_file": file_id, "b_end": end, "b_lines": lines, "b_events": events,
                            "b_rejected": rejected, "b_held": held, "b_unchanged": unchanged_s})


def store_now(conn: Connection) -> float:
    """The store's clock now (``db.StoreClock``, PostgreSQL's), what ``grew_at`` is stamped with."""
    return float(conn.execute(select(StoreClock())).scalar_one())


def grown(conn: Connection, paths: Iterable[str]) -> list[tuple[str, str, float]]:
    """``(node, path, grew_at)`` of the stored files at ``paths`` (on any node) that have grown since rows had
    the stamp."""
    c = files.c
    query = select(c.node, c.path, c.grew_at).where(c.path.in_(sorted(paths)), c.grew_at.is_not(None))
    return [tuple(row) for row in conn.execute(query)]


def forget(conn: Connection, file_id: int) -> None:
    """Delete the row (its events, steps and quarantined lines are gone first: ``Ingestor.forget_file``)."""
    conn.execute(delete(files).where(files.c.id == file_id))
