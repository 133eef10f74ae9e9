"""Store ingest: a batch and its file offset commit together, and payloads are strict JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from sqlalchemy import func, select

from zerodoctor.sources.batches import Batch, make_parser, read_batches
from zerodoctor.sources.rejects import Rejected
from zerodoctor.store import files as stored_files
from zerodoctor.store.db import open_engine
from zerodoctor.store.ingest import Ingestor
from zerodoctor.store.schema import events, files, quarantine, step_chunks


def step(rank: int, n: int, **fields) -> dict:
    return {"v": 1, "t": 1000.0 + n, "run": "r", "rank": rank, "kind": "step", "step": n, **fields}


def comm(rank: int, total_s: float, **fields) -> dict:
    return {"v": 1, "t": 2000.0, "run": "r", "rank": rank, "kind": "comm", "op": "all_reduce", "calls": 1,
            "total_s": total_s, **fields}


@pytest.fixture
def store(tmp_path: Path, store_url: str):
    engine = open_engine(store_url)
    source = tmp_path / "rank-0.jsonl"
    source.write_text("")
    ingestor = Ingestor()
    with engine.begin() as conn:
        file_id = stored_files.register(conn, source, "jsonl")["id"]
    yield engine, ingestor, file_id
    engine.dispose()


def counts(engine, file_id: int) -> tuple[int, int, int, int]:
    with engine.connect() as conn:
        return (conn.execute(select(func.coalesce(func.sum(step_chunks.c.rows), 0))).scalar(),
                conn.execute(select(func.count()).select_from(events)).scalar(),
                conn.execute(select(func.count()).select_from(quarantine)).scalar(),
                conn.execute(select(files.c.offset).where(files.c.id == file_id)).scalar())


def test_batch_rows_and_offset_commit_together(store):
    engine, ingestor, file_id = store
    batch = Batch.of([step(0, 1), step(0, 2), comm(0, 0.5)], [Rejected("f", 4, "bad", b"{", 1)], end=321, last_line=4)
    with engine.begin() as conn:
        ingestor.add(conn, file_id, batch)
    assert counts(engine, file_id) == (2, 1, 1, 321)


def test_rolled_back_batch_leaves_neither_rows_nor_offset(store):
    engine, ingestor, file_id = store
    batch = Batch.of([step(0, 1), comm(0, 0.5)], [Rejected("f", 3, "bad", b"{", 1)], end=99, last_line=3)
    with engine.connect() as conn:
        trans = conn.begin()
        ingestor.add(conn, file_id, batch)
        trans.rollback()
    assert counts(engine, file_id) == (0, 0, 0, 0)


def test_non_finite_payload_floats_are_stored_as_strict_json(store):
    engine, ingestor, file_id = store
    batch = Batch([comm(0, math.nan, interval_s=math.inf), comm(1, -math.inf, extra={"x": [math.nan]})],
                  end=10, last_line=2)
    with engine.begin() as conn:
        ingestor.add(conn, file_id, batch)
    with engine.connect() as conn:
        stored = [text for (text,) in conn.exec_driver_sql("SELECT CAST(payload AS TEXT) FROM events ORDER BY rank")]

    def reject(constant: str) -> None:  # PostgreSQL's json accepts no NaN/Infinity tokens
        raise AssertionError(f"non-standard JSON constant {constant} in a payload")

    bodies = [json.loads(text, parse_constant=reject) for text in stored]
    assert (bodies[0]["total_s"], bodies[0]["interval_s"]) == ("NaN", "Infinity")
    assert (bodies[1]["total_s"], bodies[1]["extra"]) == ("-Infinity", {"x": ["NaN"]})


def test_the_store_takes_only_sealed_batches_and_a_read_hands_them_sealed(store, tmp_path: Path):
    """Steps travel as columns from the reader on: a batch that still holds step records was not read
    by a reader, and the store refuses it rather than seal it itself (it calls nothing above it)."""
    engine, ingestor, file_id = store
    unsealed = Batch(end=1, last_line=1)
    unsealed.add([step(0, 1)], 1)
    with engine.begin() as conn, pytest.raises(ValueError, match="unsealed"):
        ingestor.add(conn, file_id, unsealed)
    log = tmp_path / "rank-1.jsonl"
    log.write_text("".join(json.dumps(step(1, n)) + "\n" for n in range(1, 4)))
    (read,) = read_batches(log, make_parser("jsonl", run_id="r"))
    assert not read.steps and read.columns["r"].n == 3
    with engine.begin() as conn:
        ingestor.add(conn, file_id, read)
    assert counts(engine, file_id)[0] == 3
