"""The text parser never raises: random text, binary, keyword soup, and a 20 MB line."""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from zerodoctor.sources.batches import make_parser, read_batches
from zerodoctor.sources.lines import MAX_LINE_BYTES
from zerodoctor.sources.text import MAX_INTERVAL
from tests.conftest import parsed

PROGRESS = ("[2026-01-12 09:00:{s:02d},007] [INFO] [logging.py:107:log_dist] [Rank 0] step={n}, skipped={k}, "
            "lr=[0.0001]\n")

# Fragments of every dialect's messages, so random lines reach the dialects, not just the prefilter.
FRAGMENTS = [
    "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: ", "Grad overflow on iteration ",
    "Reducing dynamic loss scale from ", "Current loss scale already at minimum", "Exiting run.", " != ",
    "has to be greater than 0", "step=", ", skipped=", "time (ms) | fwd: ", "| step: ", "RunningAvgSamplesPerSec=",
    "cache flushes", "MA 1 GB Max_MA 2 GB CA 3 GB Max_CA 4 GB", "DeepSpeedEngine configuration:", "  json = {",
    "Comm. Op            Message Size        Count", "CUDA out of memory. Tried to allocate ", " GiB", "(GPU ",
    "is reserved by PyTorch but unallocated", "Failures:", "  rank      : ", "  exitcode  : -", "Root Cause (first",
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=", "{'loss': ", "'grad_norm': nan",
    "Updating DeepSpeed's gradient accumulation steps to ", "Please correct the following DeepSpeed",
    "- ds a=1 vs hf b=2", "***** Running training", "  Total train batch size = ", " iteration ",
    "number of skipped iterations: ", "[rank1]:", "\r",
    "Invoked with: ", "'1e-5'", "torch.Size([0])", "copying a param with shape torch.Size([0]) from checkpoint",
    "used a DP world size of ", " but the current world size is ", "No module named 'torch._six'",
    "fatal error: cuda_profiler_api.h: No such file or directory", "buffer nbytes != file bytes ",
    "Not enough buffers ", " for swapping ", "Using /x as PyTorch extensions root...", "Loading extension module",
    "wait (torch/utils/file_baton.py:42)", "failed (exitcode: -9) local_rank: ", "exits with return code = -9",
    " allowed; ", "Timeout(ms)=", "Gradient accumulation steps:0 has to be greater than 0",
    "requires you to pass at least one of training or evaluation dataloaders", "- ds a=1 vs hf b (calculated)=2",
    "{", "}", "[", "]", "│", "0", "65536", "-1", "1e309", "nan",
    # numbers a resumed run or a garbled line prints: neither may invent steps without bound
    "step=0, skipped=0, lr=[", "step=200010, skipped=150, lr=[", "9" * 25, "18446744073709551616",
    "9223372036854775807",
    "step=" + "9" * 25 + ", skipped=0, lr=[",
]
lines = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=12).map("".join)


def _parser_errors(path: Path) -> list[str]:
    """Reasons of the lines a parser's own exception cost (read_batches turns those into rejects).

    Every byte goes through the parsers, past the binary check ``open_log`` makes (the parsers are what is fuzzed).
    """
    parser = make_parser("text", "fuzz")
    with open(path, "rb") as raw:
        return [r.reason for b in read_batches(path, parser, stream=raw) for r in b.rejected
                if r.reason.startswith("parser error")]


@settings(max_examples=150, deadline=None)
@given(st.lists(lines, max_size=30))
# found by this test: a timer line cut short is held to the end, then read with a step past 2^63
@example(text_lines=["time (ms) | fwd: ", "step=9999999999999999999999999, skipped=0, lr=["])
def test_random_text_never_raises(tmp_path_factory, text_lines: list[str]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "console.log"
    path.write_text("\n".join(text_lines), encoding="utf-8", errors="replace")
    assert _parser_errors(path) == []


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=4096))
@example(b"CUDA out of memory")  # found by this test: the words without the period, no request after them
def test_binary_never_raises(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("bin") / "console.log"
    path.write_bytes(data)
    assert _parser_errors(path) == []


def test_a_20_mb_line_is_quarantined_and_parsing_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "console.log"
    with open(path, "wb") as f:
        f.write(b"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768 " * 1)
        f.write(b"x" * (20 * 1024 * 1024) + b"\n")
        f.write(b"[Rank 0] time (ms) | fwd: 1.00 | bwd: 2.00 | step: 3.00\n")
    batches = list(read_batches(path, make_parser("text", "big")))
    rejected = [r for b in batches for r in b.rejected]
    events = parsed(batches)
    assert len(rejected) == 1 and rejected[0].size > MAX_LINE_BYTES
    assert [e["kind"] for e in events if e["kind"] == "step"] == ["step"]


def _read(path: Path) -> tuple[list[dict], list]:
    batches = list(read_batches(path, make_parser("text", "t")))
    return [e for e in parsed(batches) if e["kind"] == "step"], [r for b in batches for r in b.rejected]


def test_a_resumed_run_is_counted_from_its_first_step_not_from_zero(tmp_path: Path) -> None:
    # deepspeed.initialize prints step=0 before load_checkpoint restores the counters
    path = tmp_path / "console.log"
    path.write_text(PROGRESS.format(s=0, n=0, k=0) + "".join(
        PROGRESS.format(s=i, n=200_000 + 10 * i, k=150 + (i == 30)) for i in range(1, 31)))
    steps, rejected = _read(path)
    assert not rejected
    assert [s["step"] for s in steps] == list(range(200_010, 200_301))
    assert "overflow" not in steps[0]  # 150 skipped before the resume say nothing about this step
    assert [s["step"] for s in steps if s.get("overflow")] == [200_291]  # the one skip since, in the last gap


def test_a_garbled_step_number_neither_crashes_nor_invents_unbounded_steps(tmp_path: Path) -> None:
    path = tmp_path / "console.log"
    path.write_text(PROGRESS.format(s=0, n=0, k=0) + PROGRESS.format(s=1, n=10, k=0)
                    + PROGRESS.format(s=2, n="9" * 25, k=0) + PROGRESS.format(s=3, n=10**15, k=0))
    steps, rejected = _read(path)
    assert [(r.line, r.reason) for r in rejected] == [
        (3, f"step number {'9' * 25} is past {2**63 - 1}: a garbled line")]
    assert len(steps) == 10 + MAX_INTERVAL + 1 and steps[-1]["step"] == 10**15


def test_the_keyword_trie_finds_exactly_what_the_keywords_do() -> None:
    """The prefilter's trie regex hits a line if and only if one of the keywords is in it (prefixes of one another
    included: 'SIG' and 'SIGSEGV', 'Error' and 'Errors')."""
    import re

    from zerodoctor.sources.text import trie_pattern

    words = [b"SIG", b"SIGSEGV", b"Error", b"Errors", b"(core dumped)", b"=nan", b"{'", b"a.b", b"a*b"]
    hit = re.compile(trie_pattern(words)).search
    for line in [b"got SIGSEGV", b"SIG", b"Errors here", b"an Erro r", b"Aborted (core dumped)", b"loss=nan",
                 b"loss = nan", b"{'loss': 1}", b"axb", b"a.b", b"aab", b"a*b", b"", b"S I G"]:
        assert (hit(line) is not None) == any(w in line for w in words), line
