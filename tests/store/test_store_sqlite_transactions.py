"""SQLite transactions are real: pysqlite emits no BEGIN before a SELECT or a SAVEPOINT, so without
the engine's own BEGIN a pass's reads saw other writers' commits and releasing a batch's savepoint
committed the whole pass."""

from __future__ import annotations

from sqlalchemy import func, select

from zerodoctor.store.db import open_engine
from zerodoctor.store.schema import runs


def count_runs(conn) -> int:  # noqa: ANN001 - an SQLAlchemy Connection
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


def test_a_pass_reads_one_snapshot(tmp_path):
    engine = open_engine(tmp_path / "store.db")
    try:
        with engine.connect() as reader, engine.connect() as writer:
            with reader.begin():
                before = count_runs(reader)
                with writer.begin():
                    writer.execute(runs.insert().values(name="written meanwhile"))
                assert count_runs(reader) == before
            assert count_runs(reader) == before + 1
    finally:
        engine.dispose()
