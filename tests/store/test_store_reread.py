"""``diagnose --db`` on a store that read a file before: a file replaced at the same path is read again from 0."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.watch.conftest import append, stored_steps
from zerodoctor.pipeline import Pipeline
from zerodoctor.store.db import open_engine


@pytest.fixture
def engine(store_url: str):
    engine = open_engine(store_url)
    yield engine
    engine.dispose()


def ingest_file(engine, path: Path) -> dict:
    """``diagnose --db`` on one file: its stored row after the read."""
    (row,) = Pipeline(engine, rules=[]).ingest([(path, "jsonl")])
    return row


def steps_of(db) -> list[int]:
    return sorted(step for _, _, step in stored_steps(db))


def test_file_replaced_by_another_inode_is_read_from_the_start(tmp_path, engine):
    path = tmp_path / "r" / "rank-0.jsonl"
    append(path, "r", 0, range(1, 6))
    ingest_file(engine, path)
    fresh = tmp_path / "r" / "rank-0.jsonl.new"
    append(fresh, "r", 0, range(11, 19))  # a new run of the same name: longer than the old offset
    os.replace(fresh, path)

    row = ingest_file(engine, path)

    st = path.stat()
    assert (row["device"], row["inode"], row["offset"], row["lines"]) == (st.st_dev, st.st_ino, st.st_size, 8)
    assert steps_of(engine.url) == [*range(1, 6), *range(11, 19)]
    assert row["quarantined"] == 0  # not read from the middle of a line


def test_file_truncated_below_the_stored_offset_is_read_from_the_start(tmp_path, engine):
    path = tmp_path / "r" / "rank-0.jsonl"
    append(path, "r", 0, range(1, 6))
    ingest_file(engine, path)
    inode = path.stat().st_ino
    with open(path, "w") as f:  # same inode, shorter
        f.write("")
    append(path, "r", 0, range(21, 23))
    assert path.stat().st_ino == inode

    row = ingest_file(engine, path)

    assert (row["offset"], row["lines"]) == (path.stat().st_size, 2)
    assert steps_of(engine.url) == [*range(1, 6), 21, 22]
