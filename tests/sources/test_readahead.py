"""Sources, read-ahead: a file parsed ahead by worker processes is stored exactly as the in-process
reader stores it — the same events, steps, quarantined lines (numbers, reasons, bytes) and offsets,
whatever falls on a range's edge; and when a worker fails, the in-process reader takes over."""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.conftest import step_rows
from zerodoctor.pipeline import Pipeline, rules_from, tail
from zerodoctor.sources import readahead
from zerodoctor.store.db import open_engine
from zerodoctor.store.schema import events, files, quarantine


def _write_log(path: Path) -> None:
    """Steps of 3 ranks with, among them, every kind of line a range edge could cut badly."""
    lines = [json.dumps({"v": 1, "t": 0.0, "run": "r", "rank": r, "kind": "run_start", "world_size": 3})
             for r in range(3)]
    for n in range(1, 1201):
        for r in range(3):
            lines.append(json.dumps({"v": 1, "t": n + r / 10, "run": "r", "rank": r, "kind": "step", "step": n,
                                     "loss": 2.0 - n / 1e4, "samples": 8, "comm_s": 0.1 * r}))
        if n % 97 == 0:
            lines.append('{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": }')  # bad JSON
        if n % 131 == 0:
            lines.append("")  # a blank line
        if n % 401 == 0:
            lines.append(json.dumps({"v": 1, "t": 5.0, "run": "r", "rank": 1, "kind": "log", "message": "x" * 9000}))
        if n == 600:
            lines.append("x" * (2 << 20))  # over the 1 MiB line cap: kept aside with its size
    path.write_text("\r\n".join(lines[:50]) + "\r\n" + "\n".join(lines[50:]) + "\n" + '{"v": 1, "t": 9.0')


def _stored(path: Path, db: Path, jobs: int | None = None) -> dict:
    engine = open_engine(db, scratch=True)
    pipeline = Pipeline(engine, rules_from(), lasting=False)
    (row,) = pipeline.ingest([(path, "jsonl")], jobs=jobs)
    judged = pipeline.judge("r")
    with engine.connect() as conn:
        out = {
            "file": {k: row[k] for k in ("offset", "lines", "events", "quarantined")},
            "steps": sorted((r["rank"], r["step"], r["loss"], r["samples"]) for r in step_rows(conn)),
            "events": conn.execute(select(events.c.kind, events.c.rank, events.c.payload).order_by(events.c.id)).all(),
            "quarantine": conn.execute(select(quarantine.c.line, quarantine.c.reason, quarantine.c.size,
                                              quarantine.c.raw).order_by(quarantine.c.line)).all(),
            "offset": conn.execute(select(files.c.offset)).scalar_one(),
            "values": {k: v for k, v in judged.values.items() if k.startswith(("run.", "comm.", "batch."))},
        }
    engine.dispose()
    return out


@pytest.fixture
def small_ranges(monkeypatch):
    """Ranges of 16 KiB and no size floor: a 600 KB file becomes ~40 ranges, every edge case crossed."""
    monkeypatch.setattr(readahead, "MIN_BYTES", 0)
    monkeypatch.setattr(readahead, "RANGE_BYTES", 16 << 10)


def test_read_ahead_stores_what_the_in_process_reader_stores(tmp_path, small_ranges, monkeypatch):
    path = tmp_path / "events.jsonl"
    _write_log(path)
    ranges = []
    real = readahead.Pool.submit
    monkeypatch.setattr(readahead.Pool, "submit", lambda self, *a: ranges.append(a[3:]) or real(self, *a))
    ahead = _stored(path, tmp_path / "ahead.db")
    # it did read ahead, range by range, up to the 2 MiB line (a line longer than a range is read in process)
    assert len(ranges) > 10 and all(end > start for start, end, _ in ranges)
    assert max(end for _, end, _ in ranges) <= path.read_bytes().index(b"x" * (1 << 20))
    monkeypatch.setattr(readahead, "MIN_BYTES", 1 << 40)  # never worth it: read in process
    in_process = _stored(path, tmp_path / "plain.db")
    assert ahead == in_process
    assert ahead["file"]["quarantined"] == 12 + 1 + 1  # 12 bad lines, the oversize one, the unterminated last
    assert len(ahead["steps"]) == 3600


def test_a_range_of_several_batches_numbers_its_lines_on(tmp_path, small_ranges, monkeypatch):
    """Batches of 7 lines: a 16 KiB range holds a dozen, numbered on from the range's first line."""
    monkeypatch.setattr(tail, "BATCH_LINES", 7)
    path = tmp_path / "events.jsonl"
    _write_log(path)
    ahead = _stored(path, tmp_path / "ahead.db")
    monkeypatch.setattr(readahead, "MIN_BYTES", 1 << 40)
    assert ahead == _stored(path, tmp_path / "plain.db")


def test_a_failing_worker_hands_over_to_the_in_process_reader(tmp_path, small_ranges, monkeypatch):
    path = tmp_path / "events.jsonl"
    _write_log(path)
    in_process = _stored(path, tmp_path / "plain.db")
    calls = []
    real = readahead.Pool.submit

    def flaky(self, path, fmt, identity, start, end, batch_lines):
        calls.append(start)
        if len(calls) == 5:  # the fifth range: as if its file had been replaced
            identity = (-1, -1)
        return real(self, path, fmt, identity, start, end, batch_lines)

    monkeypatch.setattr(readahead.Pool, "submit", flaky)
    assert _stored(path, tmp_path / "ahead.db") == in_process
    assert len(calls) >= 5


def test_a_line_the_store_refuses_is_quarantined_at_its_own_number(tmp_path, small_ranges):
    """A refused chunk is split back into lines: the line numbers the worker gave its rows are the file's."""
    path = tmp_path / "events.jsonl"
    _write_log(path)
    engine = open_engine(tmp_path / "store.db", scratch=True)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TRIGGER refuse_step_1000 BEFORE INSERT ON step_chunks "
                             "WHEN NEW.first_step <= 1000 AND NEW.last_step >= 1000 "
                             "BEGIN SELECT RAISE(ABORT, 'refuse_step_1000'); END")
    Pipeline(engine, rules_from(), lasting=False).ingest([(path, "jsonl")])
    with engine.connect() as conn:
        refused = conn.execute(select(quarantine.c.line, quarantine.c.raw)
                               .where(quarantine.c.reason.like("%refuse_step_1000%"))).all()
    engine.dispose()
    lines = path.read_bytes().split(b"\n")
    assert len(refused) == 3  # step 1000 of each rank, each at its own line
    assert all(json.loads(lines[line - 1])["step"] == 1000 and lines[line - 1] == raw for line, raw in refused)


def test_every_large_file_of_a_run_is_read_ahead_by_the_one_pool(tmp_path, small_ranges, monkeypatch):
    """The pool's own thread runs once it starts: the second rank file must still be read ahead."""
    for rank in (0, 1):
        path = tmp_path / "run" / f"rank-{rank}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps({"v": 1, "t": float(n), "run": "run", "rank": rank, "kind": "step",
                                            "step": n, "samples": 8}) + "\n" for n in range(1, 3001)))
    submitted = []
    real = readahead.Pool.submit
    monkeypatch.setattr(readahead.Pool, "submit", lambda self, *a: submitted.append(Path(a[0]).name) or real(self, *a))
    engine = open_engine(tmp_path / "store.db", scratch=True)
    pipeline = Pipeline(engine, rules_from(), lasting=False)
    rows = pipeline.ingest([(tmp_path / "run" / "rank-0.jsonl", "jsonl"), (tmp_path / "run" / "rank-1.jsonl", "jsonl")])
    assert [r["events"] for r in rows] == [3000, 3000]
    assert {"rank-0.jsonl", "rank-1.jsonl"} == set(submitted)
    assert pipeline.view("run").per_rank[1]["samples"] == 3000 * 8
    engine.dispose()


def test_jobs_1_reads_in_process(tmp_path, small_ranges, monkeypatch):
    path = tmp_path / "events.jsonl"
    _write_log(path)
    monkeypatch.setattr(readahead.Pool, "submit", lambda *a: pytest.fail("a range went to a worker"))
    engine = open_engine(tmp_path / "store.db", scratch=True)
    (row,) = Pipeline(engine, rules_from(), lasting=False).ingest([(path, "jsonl")], jobs=1)
    assert row["events"] > 3600
    engine.dispose()


def test_a_killed_worker_breaks_the_pool_and_every_file_is_still_read(tmp_path, small_ranges, monkeypatch):
    """A worker the kernel kills (SIGKILL, as the OOM killer does) breaks the whole pool: the file being
    read and the next one go on in process, every line stored once."""
    path = tmp_path / "events.jsonl"
    _write_log(path)
    other = tmp_path / "other.jsonl"
    other.write_bytes(path.read_bytes())
    real = readahead._parse_range

    def killed_on_the_third(*args):
        if args[3] > 2 * (16 << 10):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args)

    in_process = _stored(path, tmp_path / "plain.db", jobs=1)["file"]
    monkeypatch.setattr(readahead, "_parse_range", killed_on_the_third)
    engine = open_engine(tmp_path / "store.db", scratch=True)
    rows = Pipeline(engine, rules_from(), lasting=False).ingest([(path, "jsonl"), (other, "jsonl")])
    engine.dispose()
    assert [{k: r[k] for k in in_process} for r in rows] == [in_process, in_process]


def test_a_pool_that_refuses_work_leaves_the_file_to_the_in_process_reader(tmp_path, small_ranges, monkeypatch):
    path = tmp_path / "events.jsonl"
    _write_log(path)
    in_process = _stored(path, tmp_path / "plain.db", jobs=1)

    def broken(self, *args):
        raise BrokenProcessPool("a worker was killed")

    monkeypatch.setattr(readahead.Pool, "submit", broken)
    assert _stored(path, tmp_path / "ahead.db") == in_process
