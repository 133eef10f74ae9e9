"""Chunked reading: where a chunk ends never changes a line, its number, its offsets or its verdict."""

from __future__ import annotations

import io
import json
import tracemalloc
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, parsed
from zerodoctor.sources import batches
from zerodoctor.sources.batches import make_parser, read_batches
from zerodoctor.sources.jsonl import JsonlParser
from zerodoctor.sources.lines import KEEP_OVERSIZE_PREFIX, KEEP_OVERSIZE_TAIL, read_blocks

STEP = {"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": 1}


def _lines(data: bytes, **kw) -> list[tuple[int, int, int, bytes, int]]:
    """``(number, start, end, line, oversize)`` of every line ``read_blocks`` yields; an oversize line's
    bytes are ``b"..."`` once checked to be its first bytes (``KEEP_OVERSIZE_PREFIX`` at most), then its
    ``tail`` (what follows its last ``\r``)."""
    out = []
    for b in read_blocks(io.BytesIO(data), **kw):
        if b.oversize:
            prefix = b.lines[0]
            assert 0 < len(prefix) <= KEEP_OVERSIZE_PREFIX and data[b.start:b.start + len(prefix)] == prefix
            out.append((b.first, b.start, b.end, b"..." + b.tail, b.oversize))
            continue
        at = b.start
        for i, line in enumerate(b.lines):
            size = len(line) + (not (b.unterminated and i == len(b.lines) - 1))
            out.append((b.first + i, at, at + size, line, 0))
            at += size
        assert at == b.end
    return out


def test_a_line_split_across_two_chunks_is_one_line_with_its_offsets() -> None:
    data = b"first\nsecond line\nthird\n"
    assert _lines(data, chunk=10) == [(1, 0, 6, b"first", 0), (2, 6, 18, b"second line", 0), (3, 18, 24, b"third", 0)]


def test_a_cr_at_a_chunk_edge_stays_with_its_line() -> None:
    data = b"one\r\ntwo\r\n"
    assert data[:4].endswith(b"\r")
    assert _lines(data, chunk=4) == [(1, 0, 5, b"one\r", 0), (2, 5, 10, b"two\r", 0)]


@pytest.mark.parametrize("chunk", [3, 8, 64])
def test_an_oversize_line_across_chunks_is_skipped_with_its_size_and_the_next_line_read(chunk: int) -> None:
    data = b"ok\n" + b"x" * 40 + b"\nafter\n"
    assert _lines(data, cap=16, chunk=chunk) == [(1, 0, 3, b"ok", 0), (2, 3, 44, b"...", 41), (3, 44, 50, b"after", 0)]


@pytest.mark.parametrize("final", [True, False])
def test_an_oversize_unterminated_last_line_waits_while_tailing(final: bool) -> None:
    data = b"ok\n" + b"x" * 40
    expected = [(1, 0, 3, b"ok", 0)] + ([(2, 3, 43, b"...", 40)] if final else [])
    assert _lines(data, cap=16, chunk=8, final=final) == expected


def test_an_oversize_line_costs_bounded_memory_whatever_its_length() -> None:
    data = b"y" * (40 << 20)  # 40 MiB with no newline, as a binary blob named like a log would be
    tracemalloc.start()
    try:
        lines = _lines(data, final=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert lines == [(1, 0, 40 << 20, b"...", 40 << 20)]
    assert peak < 6 << 20  # the cap and a few chunks (1 MiB each), not the line


_PIECES = st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\r", b"\r\n", b" ", b"x" * 20]), max_size=40).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(data=_PIECES, chunk=st.integers(1, 50), final=st.booleans())
def test_lines_and_offsets_do_not_depend_on_the_chunk_size(data: bytes, chunk: int, final: bool) -> None:
    """Against the file split whole: every line, its number, its offsets and whether it is over the cap (16)."""
    parts = data.split(b"\n")
    expected, at = [], 0
    for number, line in enumerate(parts, 1):
        last = number == len(parts)
        if last and (not line or not final):
            break
        size = len(line) + (not last)
        shown = b"..." + _tail(line, terminated=not last) if len(line) > 16 else line
        expected.append((number, at, at + size, shown, size if len(line) > 16 else 0))
        at += size
    assert _lines(data, cap=16, chunk=chunk, final=final) == expected


def _tail(line: bytes, *, terminated: bool) -> bytes:
    """What follows the last ``\r`` of a whole line (a CRLF's ``\r`` is the line's end, not a segment)."""
    body = line[:-1] if terminated and line.endswith(b"\r") else line
    return body[body.rfind(b"\r") + 1:] if b"\r" in body else b""


@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_an_oversize_progress_bar_keeps_the_line_glued_after_it(chunk: int) -> None:
    """Hours of a tqdm bar redrawn with \r make one console line past the cap; DeepSpeed's next line is glued
    to its end. The tail, the last \r segment, is what a terminal shows: it is kept, bounded."""
    glued = b"[INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step."
    bar = b"".join(b"\r 12%%|#  | %d/9 [00:01<00:09, 9.9it/s]" % i for i in range(4000))
    data = b"before\n" + bar + glued + b"\r\nafter\n"
    (_, _, _, shown, size), = [line for line in _lines(data, cap=1024, chunk=chunk) if line[4]]
    assert shown == b"..." + b" 12%|#  | 3999/9 [00:01<00:09, 9.9it/s]" + glued
    assert size == len(bar) + len(glued) + 2
    no_cr = b"x" * (KEEP_OVERSIZE_TAIL + 10)  # a last segment over its own cap is not kept
    assert _lines(b"\r" + no_cr + b"\n", cap=1024, chunk=chunk)[0][3] == b"..."


_LINES = st.lists(st.one_of(
    st.integers(1, 99).map(lambda i: json.dumps({**STEP, "step": i}).encode()),
    st.just(json.dumps({**STEP, "loss": float("nan")}).encode()),  # a step only the schema can take
    st.just(json.dumps({**STEP, "kind": "log", "message": "m"}).encode()),
    st.sampled_from([b"", b"  ", b"\r", b"garbage", b'{"v": 1}', b'{"v": 1, "t": 1.0']),
), max_size=30)


def _steps(batch) -> list[tuple[int, object]]:
    """A sealed batch's steps as (line, record), in line order."""
    return sorted((pair for name, cols in batch.columns.items() for pair in cols.records(name)), key=lambda p: p[0])


def _outcome(batches: list) -> tuple:
    """What a reader got: events in line order with their line, rejects, and the last batch's end."""
    lines = sorted([*(ln for b in batches for ln in b.event_lines), *(ln for b in batches for ln, _ in _steps(b))])
    rejects = [(r.line, r.reason, r.raw, r.size) for b in batches for r in b.rejected]
    return repr(parsed(batches)), lines, rejects, batches[-1].end, batches[-1].last_line


@settings(max_examples=150, deadline=None)
@given(lines=_LINES, crlf=st.booleans(), chunk=st.integers(1, 120), batch_lines=st.integers(1, 9))
def test_jsonl_batches_do_not_depend_on_chunks_nor_batch_size(tmp_path_factory, lines, crlf, chunk,
                                                              batch_lines) -> None:
    path = tmp_path_factory.mktemp("chunks") / "rank-0.jsonl"
    ended = [line + (b"\r\n" if crlf else b"\n") for line in lines]
    path.write_bytes(b"".join(ended))
    whole = list(read_batches(path, make_parser("jsonl")))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(batches, "read_blocks", partial(read_blocks, chunk=chunk))
        chunked = list(read_batches(path, make_parser("jsonl"), batch_lines=batch_lines))
    assert _outcome(chunked) == _outcome(whole)
    assert all(b.step_count() + len(b.events) + len(b.rejected) <= batch_lines for b in chunked[:-1])
    assert [b.last_line for b in chunked] == [*range(batch_lines, len(lines) + 1, batch_lines), len(lines)]
    assert [b.end for b in chunked] == [len(b"".join(ended[:b.last_line])) for b in chunked]  # each batch's own end


def test_the_deepspeed_line_glued_after_an_oversize_progress_bar_is_read(tmp_path: Path) -> None:
    """The pasted log (Chinese-LLaMA-Alpaca#534) with the bar before its second OVERFLOW line redrawn until the
    console line is 3 MiB: that line is counted as oversize, and its OVERFLOW is read as it was without the bar
    (before: the overflow was lost with the line)."""
    log = (ROOT / "tests/corpus/chinese-llama-alpaca-534-late-collapse/console.log").read_bytes().split(b"\n")
    bar, glued = log[3].split(b"s/it]", 1)  # line 4: " 14%|... 379/2724 [...132.28s/it][2023-06-07 ...] OVERFLOW!"
    log[3] = (bar + b"s/it]\r") * (3 * 2**20 // (len(bar) + 6)) + bar + b"s/it]" + glued
    path = tmp_path / "console.log"
    path.write_bytes(b"\n".join(log))
    read = list(read_batches(path, make_parser("text")))
    scales = [e.get("loss_scale") for e in parsed(read) if e["kind"] == "step"]
    original = parsed(read_batches(ROOT / "tests/corpus/chinese-llama-alpaca-534-late-collapse/console.log",
                                   make_parser("text")))
    assert scales == [e.get("loss_scale") for e in original if e["kind"] == "step"]
    assert 32.0 in scales  # the glued line's attempted scale
    (rejected,) = [r for b in read for r in b.rejected]
    assert rejected.line == 4 and rejected.size > 3 * 2**20 and "as a terminal shows it, was read" in rejected.reason


def test_lines_msgspec_refuses_among_steps_cost_only_themselves(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.jsonl"
    steps = [json.dumps({**STEP, "step": i}).encode() for i in range(1, 301)]
    for at in (0, 1, 133, 134, 299):  # first, adjacent, last: where the decoding restarts
        steps[at] = b'{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": "x"}'
    path.write_bytes(b"\n".join(steps) + b"\n")
    (batch,) = read_batches(path, make_parser("jsonl"))
    assert [r.line for r in batch.rejected] == [1, 2, 134, 135, 300]
    kept = [n for n in range(1, 301) if n not in (1, 2, 134, 135, 300)]
    assert [line for line, _ in _steps(batch)] == kept and [s.step for _, s in _steps(batch)] == kept


class _BrokenBatchPath(JsonlParser):
    def feed_lines(self, lines: list[bytes]):
        raise RuntimeError("bug")


def test_a_bug_in_feed_lines_costs_no_line_feed_reads_them_all(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.jsonl"
    path.write_bytes(b"".join(json.dumps({**STEP, "step": i}).encode() + b"\n" for i in range(1, 6)) + b"junk\n")
    (batch,) = read_batches(path, _BrokenBatchPath())
    assert [s.step for _, s in _steps(batch)] == [1, 2, 3, 4, 5]
    assert [(r.line, r.raw) for r in batch.rejected] == [(6, b"junk")]


@pytest.mark.parametrize("crlf", [False, True])
def test_a_console_log_reads_the_same_whatever_the_chunks(tmp_path: Path, crlf: bool) -> None:
    """The text parser holds state across lines (tracebacks, config blocks): chunk edges must not show."""
    text = (ROOT / "samples" / "fp16-min-scale" / "console.log").read_bytes()
    path = tmp_path / "console.log"
    path.write_bytes(text.replace(b"\n", b"\r\n") if crlf else text)
    whole = list(read_batches(path, make_parser("text", "t")))
    assert parsed(whole)
    for chunk in (2, 7, 4096):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(batches, "read_blocks", partial(read_blocks, chunk=chunk))
            chunked = list(read_batches(path, make_parser("text", "t"), batch_lines=5))
        assert _outcome(chunked) == _outcome(whole), chunk
