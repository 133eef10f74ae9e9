"""Sources: lines of our own events JSONL → validated events (schema v1), one a line.

Lines come in blocks (``feed_lines``): msgspec decodes and type-checks each into the one union
of every kind, tagged by ``kind`` (``events.EventLine``). A ``step`` line, nearly all of any
run, becomes a ``StepRecord`` (0.94 µs a line in a block against pydantic-core's 3.3 µs into a
dict; a decoder of steps alone takes 0.88); a ``comm`` or ``heartbeat`` line its Struct, then
its dict (1.25 µs, where a refusal by the steps' decoder and then pydantic took 2.4; CPU time,
``bench/decode.py``). Anything msgspec refuses or cannot express (NaN, lax coercions such as
``"1.5"`` or ``0`` for a bool, a ``trace``, a bad line) goes to ``feed``: the pydantic schema in
``events.py``, which stays the one judge of what is valid and of the reason a line is not.

A file of nothing but steps (a run without the comms logger) is decoded steps-first: the decoder of
``StepRecord`` alone takes a step line in 12% less time than the union, which must find the tag before
it decodes; a line it refuses is then decoded by the union. A block with more than one line in
``STEPS_FIRST`` of another kind sends the file's next blocks to the union, a block of steps alone (and
lines no decoder takes) back.
"""

from __future__ import annotations

import msgspec
from pydantic import ValidationError

from zerodoctor.events import EVENT_ADAPTER, SCHEMA_VERSION, Event, EventLine, StepRecord, step_record
from zerodoctor.sources.rejects import BadLine

_DECODE = msgspec.json.Decoder(EventLine).decode
_DECODE_STEP = msgspec.json.Decoder(StepRecord).decode
STEPS_FIRST = 64  # steps-first while at most one line in this many of a block is of another kind
_as_dict = msgspec.to_builtins  # a tagged Struct → the event dict, its tag as ``kind``, UNSET fields left out


class JsonlParser:
    """Parses zerodoctor's event lines; every bad line raises ``BadLine`` with its reason."""

    format = "jsonl"

    def __init__(self, run_id: str | None = None) -> None:
        # The run id comes from each line's envelope; the argument keeps the parser
        # interface shared with the text dialects, which have no envelope.
        del run_id
        self._steps_first = True

    def feed(self, data: bytes) -> tuple[Event | StepRecord, ...]:
        """The schema's verdict on one line: ``read_batches`` feeds only the lines ``feed_lines`` left,
        so trying msgspec here again would cost each of them a second refusal (~0.9 µs)."""
        if data.isspace():
            return ()
        try:
            # pydantic-core's validator itself (TypeAdapter's Python wrapper costs ~10% of a step line), built at
            # the first line msgspec refused: an events file whose every line it takes never builds it
            event = EVENT_ADAPTER.validator.validate_json(data)
        except ValidationError as exc:
            raise BadLine(_reason(data, exc)) from None
        return (step_record(event),) if event["kind"] == "step" else (event,)

    def feed_lines(self, lines: list[bytes]) -> tuple[list[StepRecord], list[tuple[int, Event | None]]]:
        """The batch path: the step lines msgspec takes, and the others by index, each with its event, or
        ``None`` for one msgspec refused (``feed`` judges it).

        ``list.extend`` over a ``map`` decodes without a Python loop; a line msgspec refuses
        stops it with the lines before appended, so the refused line's index is the count of
        lines consumed so far, and the same ``map`` goes on past it. Steps-first, each line the steps'
        decoder refused is decoded again by the union; else no line is decoded twice. A block of
        steps alone (one type, seen in C) is returned as it was decoded.
        """
        decoded: list = []
        refused: list[int] = []  # where the decoder gave up
        decoding = map(_DECODE_STEP if self._steps_first else _DECODE, lines)
        while True:
            try:
                decoded.extend(decoding)
                break
            except msgspec.DecodeError:
                refused.append(len(decoded))
                decoded.append(None)  # keeps each line's index
        if self._steps_first:
            for i in refused:
                decoded[i] = _decode_or_none(lines[i])
            # a line both refuse (a NaN loss, a bad line) is no sign of another kind: the union would refuse it too
            self._steps_first = sum(decoded[i] is not None for i in refused) * STEPS_FIRST <= len(lines)
        kinds = set(map(type, decoded))
        self._steps_first = self._steps_first or kinds <= {StepRecord, type(None)}
        if kinds == {StepRecord}:
            return decoded, []
        steps = [r for r in decoded if type(r) is StepRecord]
        return steps, [(i, r if r is None else _as_dict(r)) for i, r in enumerate(decoded) if type(r) is not StepRecord]

    def finish(self) -> tuple[Event, ...]:
        return ()


def _decode_or_none(line: bytes) -> object:
    """The union's reading of a line the steps' decoder refused: another kind, or None (``feed`` judges it)."""
    try:
        return _DECODE(line)
    except msgspec.DecodeError:
        return None


def _reason(data: bytes, exc: ValidationError) -> str:
    """Turn pydantic's error into the one reason a person needs (slow path, bad lines only)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"invalid UTF-8 at byte {err.start}"
    first = exc.errors(include_url=False)[0]
    kind, loc, msg = first["type"], first["loc"], first["msg"]
    if kind == "json_invalid":
        return msg.replace("Invalid JSON: ", "invalid JSON: ")
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return "not a JSON object"
    if kind == "union_tag_invalid":
        return f"unknown kind {first['ctx']['tag']!r}"
    if kind == "union_tag_not_found":
        return "missing 'kind'"
    if loc and loc[-1] == "v" and kind == "literal_error":
        return f"unsupported schema version {first['input']!r} (this reader knows v{SCHEMA_VERSION})"
    field = ".".join(str(p) for p in loc[1:]) or str(loc[0])
    if kind == "missing":
        return f"missing field '{field}'"
    return f"field '{field}': {msg} (got {first['input']!r})"
