"""The JSONL source keeps every bad line aside with file, line and reason, and goes on."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.conftest import parsed, run_cli
from zerodoctor import events
from zerodoctor.sources.batches import make_parser, read_batches
from zerodoctor.sources.jsonl import JsonlParser
from zerodoctor.sources.rejects import BadLine
from zerodoctor.sources.lines import MAX_LINE_BYTES

GOOD = {"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": 1}

BAD_LINES = [
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": 2', "invalid JSON"),
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "log", "message": "\xff\xfe"}', "invalid UTF-8"),
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": "three"}', "field 'step'"),
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": "zero", "kind": "step", "step": 3}', "field 'rank'"),
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "teleport"}', "unknown kind 'teleport'"),
    (b'{"v": 2, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": 4}', "unsupported schema version 2"),
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step"}', "missing field 'step'"),
    (b'[1, 2, 3]', "not a JSON object"),
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": 0}', "missing 'kind'"),
    # past int64 the store cannot hold the number: once this crashed the whole ingest
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": 99999999999999999999}', "field 'step'"),
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": 99999999999999999999, "kind": "log", "message": "m"}', "field 'rank'"),
    (b'{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "oom", "free_bytes": -99999999999999999999}',
     "field 'free_bytes'"),
    (b'{"v": 1, "t": 1e400, "run": "r", "rank": 0, "kind": "step", "step": 5}', "field 't': Input should be a finite"),
    (b'{"v": 1, "t": NaN, "run": "r", "rank": 0, "kind": "step", "step": 5}', "field 't': Input should be a finite"),
]


def _read(path: Path, **kw):
    batches = list(read_batches(path, make_parser("jsonl"), **kw))
    return parsed(batches), [r for b in batches for r in b.rejected], batches


@pytest.mark.parametrize(("line", "reason"), BAD_LINES, ids=[r for _, r in BAD_LINES])
def test_bad_line_is_quarantined_with_its_reason_and_reading_goes_on(tmp_path: Path, line: bytes, reason: str) -> None:
    path = tmp_path / "rank-0.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + line + b"\n"
                     + json.dumps({**GOOD, "step": 9}).encode() + b"\n")
    events, rejected, _ = _read(path)
    assert [e["step"] for e in events] == [1, 9]
    assert len(rejected) == 1
    assert rejected[0].line == 2 and reason in rejected[0].reason, rejected[0].reason
    assert rejected[0].raw == line
    assert str(rejected[0]).startswith(f"{path}:2: ")


def test_oversize_line_is_quarantined_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    big = b'{"v": 1, "junk": "' + b"x" * (3 * MAX_LINE_BYTES) + b'"}\n'
    path.write_bytes(big + json.dumps(GOOD).encode() + b"\n")
    events, rejected, _ = _read(path)
    assert len(events) == 1
    assert rejected[0].line == 1 and rejected[0].size == len(big) and "over the" in rejected[0].reason
    assert len(rejected[0].raw) <= 4096


def test_nothing_is_lost_every_nonblank_line_is_an_event_or_a_reject(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps({**GOOD, "step": i}).encode() if i % 3 else b"garbage %d" % i for i in range(1, 301)]
    path.write_bytes(b"\n".join(lines[:150]) + b"\n\n   \n" + b"\n".join(lines[150:]) + b"\n")
    events, rejected, batches = _read(path, batch_lines=7)
    assert len(events) + len(rejected) == 300
    assert len(rejected) == 100
    assert batches[-1].end == path.stat().st_size


def test_unterminated_last_line_waits_while_tailing_and_is_read_when_final(tmp_path: Path) -> None:
    path = tmp_path / "tail.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + json.dumps({**GOOD, "step": 2}).encode()[:20])
    events, _, batches = _read(path, final=False)
    assert len(events) == 1 and batches[-1].end == len(json.dumps(GOOD)) + 1
    with path.open("ab") as f:
        f.write(json.dumps({**GOOD, "step": 2}).encode()[20:] + b"\n")
    more, rejected, _ = _read(path, start=batches[-1].end, first_line=2, final=False)
    assert [e["step"] for e in more] == [2] and not rejected


def test_cli_reports_quarantined_lines_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.jsonl"
    huge = b'{"v": 1, "t": 1.0, "run": "r", "rank": 0, "kind": "step", "step": 99999999999999999999}'
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + BAD_LINES[4][0] + b"\n" + huge + b"\n")
    proc = run_cli("diagnose", str(path))
    assert proc.returncode == 0, proc.stderr
    assert f"{path}:2: unknown kind 'teleport'" in proc.stdout
    assert f"{path}:3: field 'step'" in proc.stdout


class _Buggy:
    """A parser with a bug on one line and another at the end, as a plugin's might have."""

    format = "buggy"

    def feed(self, data: bytes) -> list:
        if b"boom" in data:
            raise KeyError("boom")
        return [json.loads(data)]

    def finish(self) -> list:
        return [{}["held"]]


def test_any_parser_exception_quarantines_the_line_and_reading_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b'{"a": 1}\nboom\n{"a": 2}\n')
    batches = list(read_batches(path, _Buggy()))
    events, rejected = [e for b in batches for e in b.events], [r for b in batches for r in b.rejected]
    assert events == [{"a": 1}, {"a": 2}]
    assert [str(r) for r in rejected] == [f"{path}:2: parser error: KeyError: 'boom'",
                                          f"{path}:3: parser error: KeyError: 'held' at end of input"]
    assert rejected[0].raw == b"boom"


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["1.5", "x", "", "true"]),
                    st.lists(st.integers(), max_size=2), st.just({"a": 1}))
_STEP_FIELDS = sorted(events.Step.model_fields)


@settings(max_examples=400, deadline=None)
@given(fields=st.dictionaries(st.sampled_from([*_STEP_FIELDS, "extra"]), _VALUES, max_size=8),
       drop=st.sets(st.sampled_from(["v", "t", "run", "rank", "step"]), max_size=1))
def test_the_fast_step_path_agrees_with_the_schema(fields, drop):
    """msgspec's path for step lines (``feed_lines``, what it leaves going to ``feed``) accepts exactly what
    the pydantic schema accepts, with the same values."""
    body = {"v": 1, "t": 5.0, "run": "r", "rank": 0, "kind": "step", "step": 1, **fields}
    for key in drop:
        body.pop(key, None)
    line = json.dumps(body, allow_nan=True).encode()
    try:
        expected = events.EVENT_ADAPTER.validate_json(line)
    except ValidationError:
        expected = None
    parser = JsonlParser()
    steps, left = parser.feed_lines([line])
    assert (len(steps), left) in ((1, []), (0, [(0, None)]))
    try:
        (got,) = steps or parser.feed(line)
    except BadLine:
        got = None
    expected = expected and msgspec.structs.asdict(events.step_record(expected))
    got = got and msgspec.structs.asdict(got)
    assert repr(got and sorted(got.items())) == repr(expected and sorted(expected.items()))  # repr: NaN != NaN


_TAGGED = {m.model_fields["kind"].annotation.__args__[0]: sorted(m.model_fields) for m in events.TAGGED_KINDS}
_ANY_VALUES = st.one_of(_VALUES, st.sampled_from(["all_gather", "collective", "forward", "save", "fp16"]),
                        st.sampled_from([2**63, 2**64 - 1, -(2**63) - 1]),  # past int64, within msgspec's own ints
                        st.dictionaries(st.sampled_from(["a", "lr"]), st.one_of(st.none(), st.text(max_size=3)),
                                        max_size=2), st.lists(st.text(max_size=3), max_size=2))


def _by_both(line: bytes) -> tuple[str, str]:
    """(what the source makes of a line that is no step, what the pydantic schema alone makes of it), by repr."""
    try:
        expected = repr(sorted(events.EVENT_ADAPTER.validate_json(line).items()))
    except ValidationError:
        expected = "refused"
    parser = JsonlParser()
    _, [(_, event)] = parser.feed_lines([line])
    try:
        (event,) = (event,) if event is not None else parser.feed(line)  # msgspec refused it: the schema judges
        got = repr(sorted(event.items()))
    except BadLine:
        got = "refused"
    return got, expected


@settings(max_examples=600, deadline=None)
@given(kind=st.sampled_from(sorted(_TAGGED)), data=st.data())
def test_the_tagged_union_agrees_with_the_schema_on_every_other_kind(kind, data):
    """msgspec's tagged union (``feed_lines``) accepts exactly what the pydantic schema accepts, with
    the same values and types (repr tells 1 from 1.0 and NaN from None), absent fields absent."""
    fields = data.draw(st.dictionaries(st.sampled_from([*_TAGGED[kind], "extra"]), _ANY_VALUES, max_size=6))
    body = {"v": 1, "t": 5.0, "run": "r", "rank": 0, **fields, "kind": kind}
    got, expected = _by_both(json.dumps(body, allow_nan=True).encode())
    assert got == expected


def test_every_other_line_of_the_recorded_runs_decodes_as_the_schema_says(root: Path):
    """Every line but steps (``feed_lines``' own) of the real runs in samples/ and tests/fixtures/."""
    lines = [line for pattern in ("samples/**/*.jsonl", "tests/fixtures/**/*.jsonl")
             for path in sorted(root.glob(pattern)) for line in path.read_bytes().splitlines()
             if b'"kind": "step"' not in line and b'"kind":"step"' not in line and line.strip()]
    kinds = {line.split(b'"kind":')[-1].split(b'"')[1] for line in lines if b'"kind":' in line}
    assert {b"comm", b"heartbeat", b"run_start", b"run_end", b"exception", b"oom", b"log"} <= kinds
    for line in lines:
        got, expected = _by_both(line)
        assert got == expected, line


def test_blocks_read_steps_first_or_by_the_union_give_every_line_as_the_schema_does(root: Path):
    """One parser fed blocks of the real runs' lines (samples/): blocks of steps alone (read steps-first), blocks
    mixed with every other kind and bad lines (which send the next block to the union), steps again (back to
    steps-first). Every line comes out as the schema makes of it alone, in its place; a line of another kind that
    msgspec can take is decoded by ``feed_lines``, not left to ``feed``."""
    lines = [line for path in sorted(root.glob("samples/**/rank-*.jsonl")) for line in path.read_bytes().splitlines()
             if line.strip()]
    steps = [line for line in lines if b'"kind":"step"' in line]
    others = [line for line in lines if b'"kind":"step"' not in line] + [bad for bad, _ in BAD_LINES]
    assert len(steps) > 200 and len(others) > 20
    blocks = [steps[:100], others[:10] + steps[100:130] + others[10:], others + steps[130:160], steps[160:200],
              steps[:5] + others[:1] + steps[5:100]]
    parser, modes = JsonlParser(), []
    for block in blocks:
        modes.append(parser._steps_first)
        got_steps, left = parser.feed_lines(block)
        taken = iter(got_steps)
        others_at = dict(left)
        for i, line in enumerate(block):
            try:
                expected = events.EVENT_ADAPTER.validate_json(line)
            except ValidationError:
                expected = None
            if i not in others_at:
                assert expected is not None and expected["kind"] == "step"
                assert msgspec.structs.asdict(next(taken)) == msgspec.structs.asdict(events.step_record(expected))
            elif others_at[i] is not None:
                assert repr(sorted(others_at[i].items())) == repr(sorted(expected.items()))
            else:  # left to feed: the schema's own verdict
                try:
                    (event,) = parser.feed(line)
                except BadLine:
                    event = None
                assert repr(event) == repr(expected if expected is None or expected["kind"] != "step"
                                           else events.step_record(expected))
        assert next(taken, None) is None
        decodable = [line for line in block if b'"kind":"comm"' in line or b'"kind":"run_end"' in line]
        assert all(others_at.get(block.index(line)) is not None for line in decodable)
    assert modes == [True, True, False, False, True]
