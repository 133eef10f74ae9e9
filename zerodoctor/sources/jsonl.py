"""Sources: lines of our own events JSONL → validated events (schema v1), one a line.

``step`` lines, nearly all of any run, take a lighter path, ``feed_lines``: msgspec decodes and
type-checks a block of them straight into ``StepRecord``s (measured 1.9 µs against
pydantic-core's 3.3 µs per step line into a dict, CPU time, same machine; ~1 µs a line in a
block). Anything it refuses or cannot express (another kind, NaN, lax coercions such as
``"1.5"`` or ``0`` for a bool) goes to ``feed``: the pydantic schema in ``events.py``, which
stays the one judge of what is valid and of the reason a line is not.
"""

from __future__ import annotations

import msgspec
from pydantic import ValidationError

from zerodoctor.events import EVENT_ADAPTER, SCHEMA_VERSION, Event, StepRecord, step_record
from zerodoctor.sources.rejects import BadLine

_FAST_STEP = msgspec.json.Decoder(StepRecord).decode


class JsonlParser:
    """Parses zerodoctor's event lines; every bad line raises ``BadLine`` with its reason."""

    format = "jsonl"

    def __init__(self, run_id: str | None = None) -> None:
        # The run id comes from each line's envelope; the argument keeps the parser
        # interface shared with the text dialects, which have no envelope.
        del run_id

    # pydantic-core's validator itself: TypeAdapter's Python wrapper costs ~10% of a step line
    _validate = staticmethod(EVENT_ADAPTER.validator.validate_json)

    def feed(self, data: bytes) -> tuple[Event | StepRecord, ...]:
        """The schema's verdict on one line: ``read_batches`` feeds only the lines ``feed_lines`` left,
        so trying msgspec here again would cost each of them a second refusal (~0.9 µs)."""
        if data.isspace():
            return ()
        try:
            event = self._validate(data)
        except ValidationError as exc:
            raise BadLine(_reason(data, exc)) from None
        return (step_record(event),) if event["kind"] == "step" else (event,)

    def feed_lines(self, lines: list[bytes]) -> tuple[list[StepRecord], list[int]]:
        """The batch path: the step lines msgspec takes as they are, and the indices of the rest for ``feed``.

        ``list.extend`` over a ``map`` decodes without a Python loop; a line msgspec refuses
        stops it with the lines before appended, so the refused line's index is the count of
        lines consumed so far, and the same ``map`` goes on past it: no line is decoded twice.
        """
        steps: list[StepRecord] = []
        left: list[int] = []
        decoding = map(_FAST_STEP, lines)
        while True:
            try:
                steps.extend(decoding)
                return steps, left
            except msgspec.DecodeError:
                left.append(len(steps) + len(left))

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
