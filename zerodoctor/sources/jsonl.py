"""Sources: lines of our own events JSONL → validated events (schema v1), one a line.

Lines come in blocks (``feed_lines``): msgspec decodes and type-checks each into the one union
of every kind, tagged by ``kind`` (``events.EventLine``). A ``step`` line, nearly all of any
run, becomes a ``StepRecord`` (0.94 µs a line in a block against pydantic-core's 3.3 µs into a
dict; a decoder of steps alone takes 0.88); a ``comm`` or ``heartbeat`` line its Struct, then
its dict (1.25 µs, where a refusal by the steps' decoder and then pydantic took 2.4; CPU time,
``bench/decode.py``). Anything msgspec refuses or cannot express (NaN, lax coercions such as
``"1.5"`` or ``0`` for a bool, a ``trace``, a bad line) goes to ``feed``: the pydantic schema in
``events.py``, which stays the one judge of what is valid and of the reason a line is not.
"""

from __future__ import annotations

import msgspec
from pydantic import ValidationError

from zerodoctor.events import EVENT_ADAPTER, SCHEMA_VERSION, Event, EventLine, StepRecord, step_record
from zerodoctor.sources.rejects import BadLine

_DECODE = msgspec.json.Decoder(EventLine).decode
_as_dict = msgspec.to_builtins  # a tagged Struct → the event dict, its tag as ``kind``, UNSET fields left out


class JsonlParser:
    """Parses zerodoctor's event lines; every bad line raises ``BadLine`` with its reason."""

    format = "jsonl"

    def __init__(self, run_id: str | None = None) -> None:
        # The run id comes from each line's envelope; the argument keeps the parser
        # interface shared with the text dialects, which have no envelope.
        del run_id

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
        lines consumed so far, and the same ``map`` goes on past it: no line is decoded twice.
        A block of steps alone (one type, seen in C) is returned as it was decoded.
        """
        decoded: list = []
        decoding = map(_DECODE, lines)
        while True:
            try:
                decoded.extend(decoding)
                break
            except msgspec.DecodeError:
                decoded.append(None)  # keeps each line's index
        if set(map(type, decoded)) == {StepRecord}:
            return decoded, []
        steps = [r for r in decoded if type(r) is StepRecord]
        return steps, [(i, r if r is None else _as_dict(r)) for i, r in enumerate(decoded) if type(r) is not StepRecord]

    def finish(self) -> tuple[Event, ...]:
        return ()


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
