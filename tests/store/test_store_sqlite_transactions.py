"""SQLite transactions are real: pysqlite emits no BEGIN before a SELECT or a SAVEPOINT, so without
the engine's own BEGIN a pass's reads saw other writers' commits and releasing a batch's savepoint
committed the whole pass."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import func, select

from zerodoctor.store.db import open_engine
from zerodoctor.store.schema import runs


def count_runs(conn) -> int:
    return conn.execute(select(func.count()).select_from(runs)).scalar()


def test_outer_transaction_rolls_back_a_released_savepoint(tmp_path):
    engine = open_engine(tmp_path / "store.db")
    try:
        with engine.connect() as conn:
            trans = conn.begin()
            with conn.begin_nested():
                conn.execute(runs.insert().values(name="batch-1"))
            trans.rollback()  # the pass failed: its batches go with it
        with engine.connect() as conn:
            assert count_runs(conn) == 0
    finally:
        engine.dispose()


def test_a_read_transaction_reads_one_snapshot(tmp_path):
    engine, reading = open_engine(tmp_path / "store.db"), open_engine(tmp_path / "store.db", read_only=True)
    try:
        with reading.connect() as reader, engine.connect() as writer:
            with reader.begin():
                before = count_runs(reader)
                with writer.begin():
                    writer.execute(runs.insert().values(name="written meanwhile"))
                assert count_runs(reader) == before
            assert count_runs(reader) == before + 1
    finally:
        engine.dispose()
        reading.dispose()


def test_a_write_transaction_holds_the_write_lock_from_its_start(tmp_path):
    """A deferred transaction that read first fails at once (SQLITE_BUSY, no waiting) when it writes
    after another connection committed; the writer's own transactions begin with the lock instead."""
    engine = open_engine(tmp_path / "store.db")
    try:
        with engine.connect() as first, first.begin():
            count_runs(first)
            assert first.connection.dbapi_connection.in_transaction
            assert first.exec_driver_sql("PRAGMA main.journal_mode").scalar() == "wal"
            other = sqlite3.connect(tmp_path / "store.db", timeout=0)
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("INSERT INTO runs (name) VALUES ('meanwhile')")
            other.close()
            first.execute(runs.insert().values(name="mine"))
    finally:
        engine.dispose()
