"""Values the store must keep on SQLite and PostgreSQL alike: 64-bit integers (memory past 2 GiB,
a file offset past 2^31), long and NUL-bearing text; a line the store refuses is quarantined
alone with its bytes; a store made by the schema before migrations is upgraded in place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, select

from tests.conftest import step_rows
from tests.watch.conftest import append, step_line
from zerodoctor.pipeline import Pipeline
from zerodoctor.sources.batches import Batch
from zerodoctor.store import files as stored_files
from zerodoctor.store.db import open_engine
from zerodoctor.store.ingest import Ingestor
from zerodoctor.store.schema import events, files, quarantine, runs

GIB = 2**30
FIXTURES = Path(__file__).with_name("fixtures")


@pytest.fixture
def engine(store_url: str):
    engine = open_engine(store_url)
    yield engine
    engine.dispose()


def ingest_file(engine, path: Path, pipeline: Pipeline | None = None) -> dict:
    """``diagnose --db`` on one file: its stored row after the read."""
    (row,) = (pipeline or Pipeline(engine, rules=[])).ingest([(path, "jsonl")])
    return row


def jsonl(path: Path, *events_: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.writelines(json.dumps({"v": 1, "t": 1000.0 + i, "rank": 0, **e}) + "\n" for i, e in enumerate(events_))
    return path


def test_step_with_over_2_gib_of_memory_is_stored(tmp_path, engine):
    path = jsonl(tmp_path / "r" / "rank-0.jsonl",
                 {"run": "r", "kind": "run_start", "device_memory_bytes": 141 * GIB},
                 {"run": "r", "kind": "step", "step": 3 * 10**9, "tokens": 5 * 10**9, "mem_allocated_bytes": 70 * GIB,
                  "mem_reserved_bytes": 80 * GIB, "mem_peak_bytes": 2**63 - 1, "inactive_split_bytes": 3 * GIB})
    row = ingest_file(engine, path)
    assert (row["events"], row["quarantined"]) == (2, 0)
    with engine.connect() as conn:
        (stored,) = [tuple(row[k] for k in ("step", "tokens", "mem_allocated_bytes", "mem_peak_bytes",
                                            "inactive_split_bytes")) for row in step_rows(conn)]
        start = conn.execute(select(events.c.payload).where(events.c.kind == "run_start")).scalar_one()
    assert tuple(stored) == (3 * 10**9, 5 * 10**9, 70 * GIB, 2**63 - 1, 3 * GIB)
    assert (json.loads(start) if isinstance(start, str) else start)["device_memory_bytes"] == 141 * GIB


def test_file_offset_past_2_31_is_read_on(tmp_path, engine):
    """A sparse file: a step line padded past the 4 KiB that say "text", a hole up to byte 2^31,
    then the steps to read; the store holds the first two lines as read."""
    path = tmp_path / "r" / "rank-0.jsonl"
    path.parent.mkdir()
    with open(path, "wb") as f:
        f.write(step_line("r", 0, 0).rstrip("\n").encode() + b" " * 8192 + b"\n")
        f.truncate(2**31)
        f.seek(2**31)
        f.write(b"\n")
    pipeline = Pipeline(engine, rules=[])
    with engine.begin() as conn:
        file_id = stored_files.register(conn, path, "jsonl")["id"]
        pipeline.ingestor.add(conn, file_id, Batch(end=2**31 + 1, last_line=2))  # as if those lines had been read
    append(path, "r", 0, range(1, 4))
    row = ingest_file(engine, path, pipeline)
    assert (row["offset"], row["lines"], row["events"]) == (path.stat().st_size, 5, 3)
    assert row["offset"] > 2**31


def test_300_character_run_name_is_stored(tmp_path, engine):
    name = "sweep-" + "x" * 294
    row = ingest_file(engine, jsonl(tmp_path / "loose.jsonl", {"run": name, "kind": "step", "step": 1}))
    assert (row["events"], row["quarantined"]) == (1, 0)
    with engine.connect() as conn:
        assert conn.execute(select(runs.c.name)).scalars().all() == [name]


def test_nul_byte_in_a_run_name_and_a_message_is_stored(tmp_path, engine):
    path = jsonl(tmp_path / "loose.jsonl",
                 {"run": "a\x00b", "kind": "step", "step": 1},
                 {"run": "a\x00b", "kind": "exception", "type": "RuntimeError", "message": "bad\x00byte"})
    row = ingest_file(engine, path)
    assert (row["events"], row["quarantined"]) == (2, 0)
    with engine.connect() as conn:
        assert conn.execute(select(runs.c.name)).scalars().all() == ["a\u2400b"]  # one run, NUL shown as ␀
        payload = conn.execute(select(events.c.payload)).scalar_one()
    assert (json.loads(payload) if isinstance(payload, str) else payload)["message"] == "bad\x00byte"


def test_line_the_store_refuses_is_quarantined_alone_with_its_raw_bytes(tmp_path, engine):
    """The store itself refuses any chunk holding step 3 (a trigger on SQLite, a CHECK on PostgreSQL, as a
    value out of its range would be): steps 1, 2, 4, 5 of the same batch are stored, line 3 is kept aside whole."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ALTER TABLE step_chunks ADD CONSTRAINT refuse_step_3 "
                                 "CHECK (NOT (first_step <= 3 AND last_step >= 3))")
        else:
            conn.exec_driver_sql("CREATE TRIGGER refuse_step_3 BEFORE INSERT ON step_chunks "
                                 "WHEN NEW.first_step <= 3 AND NEW.last_step >= 3 "
                                 "BEGIN SELECT RAISE(ABORT, 'refuse_step_3'); END")
    path = tmp_path / "r" / "rank-0.jsonl"
    append(path, "r", 0, range(1, 6))
    row = ingest_file(engine, path)
    assert (row["events"], row["quarantined"], row["lines"]) == (4, 1, 5)
    with engine.connect() as conn:
        assert sorted(row["step"] for row in step_rows(conn)) == [1, 2, 4, 5]
        (line, reason, raw, size), = conn.execute(
            select(quarantine.c.line, quarantine.c.reason, quarantine.c.raw, quarantine.c.size)).all()
    assert (line, bytes(raw), size) == (3, step_line("r", 0, 3).encode().rstrip(b"\n"), len(step_line("r", 0, 3)))
    assert reason.startswith("not stored: ") and "refuse_step_3" in reason
    assert "INSERT" not in reason and "\n" not in reason  # the database's own line, not SQLAlchemy's dump


def store_before_migrations(store_url: str):
    """The tables as zerodoctor made them before it had migrations, on an empty store."""
    old = create_engine(store_url)
    with old.begin() as conn:
        ddl = (FIXTURES / f"schema-before-migrations.{conn.dialect.name}.sql").read_text()
        for statement in ddl.split(";"):
            body = "\n".join(line for line in statement.splitlines() if not line.startswith("--")).strip()
            if body:
                conn.exec_driver_sql(body)
    return old


def test_store_made_by_the_schema_before_migrations_is_upgraded_in_place(tmp_path, store_url):
    old = store_before_migrations(store_url)
    with old.begin() as conn:
        conn.execute(runs.insert().values(name="old-run"))
        conn.execute(files.insert().values(path="/old/rank-0.jsonl", format="jsonl", offset=10, lines=1, events=1,
                                           quarantined=0))
        conn.exec_driver_sql("INSERT INTO steps (run_id, file_id, rank, t, step, mem_peak_bytes, nonfinite) "
                             f"VALUES (1, 1, 0, 1.0, 1, {GIB}, 2)")  # grad norm was NaN
    old.dispose()

    from zerodoctor.store.migrate import HEAD, stored_version

    engine = open_engine(store_url)
    try:
        with engine.connect() as conn:
            assert stored_version(conn) == HEAD
            assert {"alembic_version", "run_state", "step_chunks"} <= set(inspect(conn).get_table_names())
            assert "steps" not in inspect(conn).get_table_names()
            assert "fingerprint" in {c["name"] for c in inspect(conn).get_columns("files")}
        ingestor = Ingestor()
        with engine.begin() as conn:
            run_id = ingestor.run_id(conn, "old-run")
            step = {"v": 1, "t": 2.0, "run": "old-run", "rank": 0, "kind": "step", "step": 2,
                    "mem_peak_bytes": 80 * GIB}
            ingestor.add(conn, 1, Batch.of([step], end=2**40, last_line=2))
        with engine.connect() as conn:
            assert run_id == 1
            rows = step_rows(conn)
            assert [(r["step"], r["mem_peak_bytes"]) for r in rows] == [(1, GIB), (2, 80 * GIB)]
            assert rows[0]["nonfinite"] == 2 and "grad_norm" not in rows[0]  # the NaN flag came through
            assert conn.execute(select(files.c.offset)).scalar_one() == 2**40
    finally:
        engine.dispose()


def test_head_is_the_last_migration_script():
    from alembic.script import ScriptDirectory

    from zerodoctor.store.migrate import HEAD, SCRIPTS

    assert ScriptDirectory(str(SCRIPTS)).get_current_head() == HEAD
