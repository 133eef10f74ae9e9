"""Tail: what a tail keeps of a line the store refuses, and what reading a file costs in opens."""

from __future__ import annotations

import codecs
import gzip
import json
import sys

import pytest
from sqlalchemy import select

from tests.conftest import step_rows
from tests.watch.conftest import append
from zerodoctor.pipeline import Pipeline
from zerodoctor.store.db import open_engine
from zerodoctor.store.schema import quarantine

# Non-ASCII, so that a UTF-16 file's raw offsets and its decoded ones part at the first line.
LINES = [json.dumps({"v": 1, "t": 1000.0 + i, "run": "r", "rank": 0, **e}, ensure_ascii=False) + "\n" for i, e in
         enumerate([{"kind": "step", "step": 1, "loss": 1.0}, {"kind": "step", "step": 2, "loss": 0.9},
                    {"kind": "exception", "type": "RuntimeError", "message": "Ausführung abgebrochen — rank 0"},
                    {"kind": "step", "step": 3, "loss": 0.8}])]
ENCODED = {
    "gzip": lambda text: gzip.compress(text.encode()),
    "utf-16-le": lambda text: codecs.BOM_UTF16_LE + text.encode("utf-16-le"),
}


@pytest.mark.parametrize("encoding", sorted(ENCODED))
def test_line_the_store_refuses_in_a_decoded_file_is_quarantined_with_its_decoded_bytes(tmp_path, encoding):
    """Offsets of a gzip or UTF-16 file count decoded bytes: the refused line kept aside is the decoded
    line (UTF-8, as the parser saw it), not the raw file's bytes at those offsets."""
    path = tmp_path / "r" / "rank-0.jsonl"
    path.parent.mkdir()
    path.write_bytes(ENCODED[encoding]("".join(LINES)))
    engine = open_engine(tmp_path / "store.db")
    try:
        with engine.begin() as conn:  # the store itself refuses the exception, as it would a value past its range
            conn.exec_driver_sql("CREATE TRIGGER refuse_exceptions BEFORE INSERT ON events "
                                 "WHEN NEW.kind = 'exception' BEGIN SELECT RAISE(ABORT, 'refused'); END")
        (row,) = Pipeline(engine, rules=[]).ingest([(path, "jsonl")])
        with engine.connect() as conn:
            stored = sorted(row["step"] for row in step_rows(conn))
            (line, raw, size), = conn.execute(select(quarantine.c.line, quarantine.c.raw, quarantine.c.size)).all()
    finally:
        engine.dispose()
    assert (row["events"], row["quarantined"], row["lines"], stored) == (3, 1, 4, [1, 2, 3])
    assert (line, bytes(raw), size) == (3, LINES[2].encode().rstrip(b"\n"), len(LINES[2].encode()))


_OPENED: list[str] | None = None  # while a test counts: every path this process opens (audit event "open")


def _count_opens(event: str, args: tuple) -> None:
    if event == "open" and _OPENED is not None and args[0] is not None:
        _OPENED.append(str(args[0]))


sys.addaudithook(_count_opens)  # hooks cannot be removed: it counts only while _OPENED is a list


@pytest.mark.parametrize("encoding", ["plain", *sorted(ENCODED)])
def test_a_new_tail_opens_its_file_once(tmp_path, encoding):
    """The tail checks what the file is when it is made (no row for what is no log) and reads it
    through that same open, rather than opening and sniffing it again at its first read."""
    global _OPENED
    path = tmp_path / "r" / "rank-0.jsonl"
    path.parent.mkdir()
    path.write_bytes(ENCODED[encoding]("".join(LINES)) if encoding in ENCODED else "".join(LINES).encode())
    append(path.with_name("rank-1.jsonl"), "r", 1, range(1, 4))
    engine = open_engine(tmp_path / "store.db")
    try:
        _OPENED = []
        rows = Pipeline(engine, rules=[]).ingest([(path, "jsonl"), (path.with_name("rank-1.jsonl"), "jsonl")])
        opened, _OPENED = _OPENED, None
    finally:
        _OPENED = None
        engine.dispose()
    assert [r["events"] for r in rows] == [4, 3]
    ours = sorted(p for p in opened if p.startswith(str(path.parent)))
    assert ours == [str(path), str(path.with_name("rank-1.jsonl"))]


def test_a_file_unchanged_since_a_read_to_its_end_is_not_read_again(tmp_path, monkeypatch):
    """A live pass over 4,096 rank files reads only those that grew: an unchanged one costs the poll's stat."""
    from zerodoctor.pipeline.tail import FileTail

    path = tmp_path / "r" / "rank-0.jsonl"
    append(path, "r", 0, range(1, 4))
    engine = open_engine(tmp_path / "store.db")
    pipeline = Pipeline(engine, rules=[])
    reads = []
    real = FileTail._read
    monkeypatch.setattr(FileTail, "_read", lambda self, *a, **kw: reads.append(1) or real(self, *a, **kw))
    try:
        with engine.begin() as conn:
            tail = pipeline.tail(conn, path, "jsonl")
        polls = []
        for _ in range(3):
            polls.append(pipeline.ingest_pass([tail])[tail])
        assert polls == ["idle"] * 3 and len(reads) == 1  # the first poll read to the end; the others only stat
        append(path, "r", 0, range(4, 6))
        pipeline.ingest_pass([tail])
        assert len(reads) == 2
        with engine.connect() as conn:
            assert sorted(r["step"] for r in step_rows(conn)) == [1, 2, 3, 4, 5]
        tail.close()
    finally:
        engine.dispose()
