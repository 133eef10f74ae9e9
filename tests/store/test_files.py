"""A file's row: one per node and path (two nodes' jobs write the same local path into one store), a
network filesystem's files every node's, and a store made before rows had a node upgraded with every
node's offsets."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from tests.store.test_store_values import store_before_migrations
from tests.watch.conftest import append
from zerodoctor.store import files as stored_files
from zerodoctor.store import nodes
from zerodoctor.store.db import open_engine
from zerodoctor.store.schema import files


@pytest.fixture
def rank_file(tmp_path: Path) -> Path:
    path = tmp_path / "local" / "runs" / "job" / "rank-0.jsonl"
    append(path, "job", 0, range(1, 11))
    return path


@pytest.fixture
def on_nfs(tmp_path: Path, monkeypatch):
    """The mount table says ``tmp_path/local`` is an NFS mount."""
    table = tmp_path / "mounts"
    table.write_text(f"dev0 / ext4 rw 0 0\nserver:/export {tmp_path / 'local'} nfs4 rw 0 0\n")
    monkeypatch.setattr(nodes, "MOUNTS", table)
    nodes._on_network_filesystem.cache_clear()
    yield
    nodes._on_network_filesystem.cache_clear()


def register_on(node: str, monkeypatch, engine, path: Path) -> dict:
    monkeypatch.setenv(nodes.NODE_ENV, node)
    with engine.begin() as conn:
        return stored_files.register(conn, path, "jsonl")


def test_two_nodes_files_at_one_path_have_a_row_and_an_offset_each(rank_file, store_url, monkeypatch):
    engine = open_engine(store_url)
    try:
        a = register_on("node-a", monkeypatch, engine, rank_file)
        b = register_on("node-b", monkeypatch, engine, rank_file)
        assert a["id"] != b["id"] and (a["node"], b["node"]) == ("node-a", "node-b")
        assert a["path"] == b["path"] == str(rank_file)
        with engine.begin() as conn:
            stored_files.advance(conn, a["id"], end=700, lines=10, events=10, rejected=0)
        # each node finds its own row again: B's offset is still 0
        assert register_on("node-b", monkeypatch, engine, rank_file)["offset"] == 0
        assert register_on("node-a", monkeypatch, engine, rank_file)["offset"] == 700
    finally:
        engine.dispose()


def test_a_network_filesystems_files_are_every_nodes(rank_file, store_url, monkeypatch, on_nfs):
    """The job's shared ``runs/``: another node's watcher finds the one row, with the offset already stored."""
    engine = open_engine(store_url)
    try:
        a = register_on("node-a", monkeypatch, engine, rank_file)
        with engine.begin() as conn:
            stored_files.advance(conn, a["id"], end=700, lines=10, events=10, rejected=0)
        b = register_on("node-b", monkeypatch, engine, rank_file)
        assert (b["id"], b["node"], b["offset"]) == (a["id"], nodes.SHARED, 700)
    finally:
        engine.dispose()


def test_a_store_made_before_rows_had_a_node_keeps_every_offset(tmp_path, rank_file, store_url, monkeypatch):
    """Upgraded in place: on SQLite (one host's store) each row gets the node of the host upgrading it; on
    PostgreSQL, which many nodes share, the node whose file has the row's device and inode claims it."""
    monkeypatch.setenv(nodes.NODE_ENV, "node-a")
    other = rank_file.with_name("rank-1.jsonl")
    append(other, "job", 1, range(1, 11))
    old = store_before_migrations(store_url)
    with old.begin() as conn:
        for path in (rank_file, other):
            st = path.stat()
            conn.execute(files.insert().values(path=str(path), format="jsonl", device=st.st_dev, inode=st.st_ino,
                                               offset=st.st_size, lines=10, events=10, quarantined=0))
    old.dispose()
    engine = open_engine(store_url)
    try:
        with engine.connect() as conn:
            stored = [node for (node,) in conn.execute(select(files.c.node).order_by(files.c.id))]
        assert stored == (["node-a", "node-a"] if engine.dialect.name == "sqlite" else [None, None])
        # node B's own file at rank-1's path (another inode) is not the stored one: a row of its own, from 0
        b_file = tmp_path / "node-b-rank-1.jsonl"
        append(b_file, "job", 5, range(1, 4))
        b_file.replace(other)
        b = register_on("node-b", monkeypatch, engine, other)
        assert (b["id"], b["node"], b["offset"]) == (3, "node-b", 0)
        # node A's file is the stored one: its row, at its offset
        a = register_on("node-a", monkeypatch, engine, rank_file)
        assert (a["id"], a["node"], a["offset"]) == (1, "node-a", rank_file.stat().st_size)
        with engine.connect() as conn:
            assert conn.execute(select(files.c.id, files.c.node).where(files.c.id == 2)).one() == (
                2, "node-a" if engine.dialect.name == "sqlite" else None)
    finally:
        engine.dispose()
