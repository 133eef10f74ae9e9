"""Sources, Chrome trace: the bytes of a trace JSON, in pieces → its events one at a time, in bounded memory.

torch.profiler (``export_chrome_trace``, ``tensorboard_trace_handler``) writes Kineto's Chrome-trace
JSON: one object with metadata keys (``distributedInfo``, ``baseTimeNanoseconds``, …) and the
``traceEvents`` array; older tools write the bare array ("JSON Array Format"). Traces of several GB
exist, so the file is never parsed whole: the reader keeps only the bytes of the event being read
and hands each complete event on, decoded by the standard library's C scanner (``raw_decode``),
which also tells where it ended. The metadata keys (small) are kept in ``meta``.

Kineto writes each event as an indented block whose closing brace starts a line (``\n  },``); the run
of whole events up to the last such line is decoded in one call by msgspec into ``TraceEvent``s (the
fields read, ``args`` left raw until asked for), about three times as fast. Any other layout, or a cut
that turns out not to end an event (the decode then fails), is read event by event as above.

No third-party streaming JSON library is a dependency (ijson is not); the array's grammar is the
only part walked here, each value is decoded by ``json``.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any, Callable

import msgspec

from zerodoctor.messages.deferred import deferred
from zerodoctor.sources.readable import UnreadableFile, open_log

# How much of one value may be held while waiting for its end: far above any real event (a few
# hundred bytes; a stack-laden one some KB), so only a file that is no trace reaches it.
MAX_VALUE_CHARS = 64 << 20
_SKIP = deferred(r"[\s,]*")  # between values: whitespace, and the commas the array's grammar puts there
_DECODER = json.JSONDecoder()
HEAD_MARKERS = (b'"traceEvents"', b'"schemaVersion"')
HEAD_BYTES = 64 * 1024  # Kineto puts ``distributedInfo`` (its process groups: KBs at scale) before ``traceEvents``
_ARRAY_HEAD = deferred(rb'\A\s*\[\s*\{\s*"(?:ph|name|cat|pid|tid|ts)"\s*:')


_KINETO_EVENT_END = "\n  },"


class TraceEvent(msgspec.Struct):
    """The fields of an event the figures read; ``get`` as on the dict the slow path gives."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    args: msgspec.Raw = msgspec.Raw(b"")  # decoded only for the few events whose args are read

    def get(self, key: str, default: Any = None) -> Any:
        if key == "args":
            return msgspec.json.decode(self.args) if len(self.args) else default
        value = getattr(self, key, None)
        return default if value is None else value


_EVENTS = msgspec.json.Decoder(list[TraceEvent])


class TraceFormatError(ValueError):
    """The bytes are not a Chrome trace (or stop being one); the message says where and why."""


def looks_like_trace(head: bytes) -> bool:
    """The first bytes (decompressed) of a Chrome trace: an object naming ``traceEvents`` or ``schemaVersion``
    near its start, or an array whose first object is an event."""
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        return any(marker in head for marker in HEAD_MARKERS)
    return _ARRAY_HEAD.match(head) is not None


def is_trace_file(path: Path) -> bool:
    """A ``.json`` or ``.json.gz`` file (torch names them ``*.pt.trace.json[.gz]``, people anything) that
    begins as a Chrome trace once decompressed."""
    if not (path.name.endswith(".json") or path.name.endswith(".json.gz")):
        return False
    try:
        stream, _ = open_log(path)
        with stream as f:
            return looks_like_trace(f.read(HEAD_BYTES))
    except (OSError, UnreadableFile):
        return False


def traces_in(directory: Path) -> list[Path]:
    """The Chrome traces a folder holds (a run directory, TensorBoard's plugin folder), known by content."""
    return [path for path in sorted(directory.iterdir()) if is_trace_file(path)]


class TraceReader:
    """Feed bytes in any pieces; ``on_event`` gets each element of ``traceEvents`` as it completes.

    ``feed`` returns nothing and ``finish`` says whether the array was closed (a trace cut short by a
    killed job still gives every event written before the cut).
    """

    def __init__(self, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.on_event = on_event
        self.meta: dict[str, Any] = {}
        self.events = 0
        self.chars = 0  # decoded characters consumed: where an error is
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        self._buf, self._pos = "", 0
        self._state = "start"  # start → key → value → key …; "events" inside the array; "done" after the object
        self._key: str | None = None
        self._in_object = False  # the events are a key's value (Kineto), not the whole file (the bare array)
        self._kineto = True  # Kineto's layout, until a cut at its event ends fails to decode

    def feed(self, data: bytes) -> None:
        self._buf = self._buf[self._pos:] + self._decode(data) if self._pos else self._buf + self._decode(data)
        self.chars += self._pos
        self._pos = 0
        self._run(final=False)
        if len(self._buf) - self._pos > MAX_VALUE_CHARS:
            raise TraceFormatError(f"no complete JSON value in {MAX_VALUE_CHARS >> 20} MiB at character "
                                   f"{self.chars + self._pos}: not a Chrome trace")

    def finish(self) -> bool:
        """Read what is left; True when the trace ended as it should (its array and object closed)."""
        self._buf += self._decode(b"", final=True)
        self._run(final=True)
        return self._state == "done"

    def _value(self, final: bool) -> tuple[bool, Any]:
        """(True, value) decoded at the position, or (False, None) when it is not complete yet."""
        try:
            value, end = _DECODER.raw_decode(self._buf, self._pos)
        except json.JSONDecodeError as exc:
            # A value cut by the end of the buffer is waited for; anything else is no JSON.
            if exc.pos >= len(self._buf) - 1 or exc.msg.startswith("Unterminated"):
                return False, None
            raise TraceFormatError(f"invalid JSON at character {self.chars + exc.pos}: {exc.msg}") from None
        if end == len(self._buf) and not final and isinstance(value, (int, float)):
            return False, None  # a number may go on in the next piece
        self._pos = end
        return True, value

    def _whole_events(self) -> bool:
        """Decode every whole Kineto-laid-out event from the position in one call; False when there is none."""
        cut = self._buf.rfind(_KINETO_EVENT_END, self._pos)
        if cut < 0:
            return False
        try:
            events = _EVENTS.decode("[" + self._buf[self._pos:cut + 4] + "]")
        except msgspec.DecodeError:
            self._kineto = False
            return False
        self._pos = cut + 4
        self.events += len(events)
        for event in events:
            self.on_event(event)
        return True

    def _run(self, final: bool) -> None:
        buf = self._buf
        while True:
            self._pos = _SKIP.match(buf, self._pos).end()
            if self._pos >= len(buf):
                return
            char = buf[self._pos]
            state = self._state
            if state == "events":
                if char == "]":
                    self._pos += 1
                    self._state = "key" if self._in_object else "done"
                    continue
                if char == "{" and self._kineto and self._whole_events():
                    continue
                done, event = self._value(final)
                if not done:
                    return
                self.events += 1
                if isinstance(event, dict):
                    self.on_event(event)
            elif state == "start":
                if char not in "{[":
                    raise TraceFormatError(f"starts with {char!r}, not a JSON object or array: not a Chrome trace")
                self._pos += 1
                self._in_object = char == "{"
                self._state = "key" if char == "{" else "events"
            elif state == "key":
                if char == "}":
                    self._pos += 1
                    self._state = "done"
                    continue
                done, key = self._value(final)
                if not done:
                    return
                self._key, self._state = str(key), "colon"
            elif state == "colon":
                if char != ":":
                    raise TraceFormatError(f"expected ':' at character {self.chars + self._pos}")
                self._pos += 1
                self._state = "value"
            elif state == "value":
                if self._key == "traceEvents" and char == "[":
                    self._pos += 1
                    self._state = "events"
                    continue
                done, value = self._value(final)
                if not done:
                    return
                self.meta[self._key or ""] = value
                self._state = "key"
            else:  # done: trailing whitespace only
                raise TraceFormatError(f"data after the end of the trace at character {self.chars + self._pos}")
