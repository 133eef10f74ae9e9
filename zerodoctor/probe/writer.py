"""Probe, writer: event fields → validated lines appended to ``runs/<id>/rank-<r>.jsonl``.

The training thread only appends a dict to a bounded queue, and never waits: when the writer is
``MAX_PENDING`` events behind (a stalled disk, a full pipe) an event is dropped and counted, and the
count goes into the rank's last line, ``run_end.dropped_events``. A daemon thread validates, serialises
and writes the pending events at least every ``FLUSH_EVERY_S``; ``flush`` does the same
synchronously at exit, on a crash and on a signal. Each event is validated against the schema by its
kind's msgspec twin (``events.EventLine``, under 1 µs), and by the pydantic model only when that refuses it
(the model coerces what msgspec is strict about, or refuses it too), since the writer's thread shares
the interpreter lock with training: ~16 µs an event through pydantic alone. Validation and ``float()`` of 0-dim
tensors (loss, grad norm) happen there too, off the training thread, so the probe never
adds a device synchronisation to a step. The same thread writes a ``heartbeat`` every
``HEARTBEAT_EVERY_S`` from the rank's phase, so a rank blocked in a collective, a data loader
or a sleep is still heard from.
"""

from __future__ import annotations

import json
import os
import threading
import time
import typing
from collections import deque
from pathlib import Path
from typing import Any, Callable

import msgspec

from zerodoctor import events
from zerodoctor.probe.privacy import RUN_DIR_MODE, file_mode
from zerodoctor.probe.phase import HEARTBEAT_EVERY_S

FLUSH_EVERY_S = 0.5
# ~30 s of a 3 ms step's events (one ``step``, a ``comm`` per op every second): a writer that far
# behind is stalled, and holding more would grow the training process without bound.
MAX_PENDING = 10_000


# Each kind's msgspec twin of its model (one struct each: converting into their union tries them all, ~10 µs)
_TWINS = {twin.__struct_config__.tag: twin for twin in typing.get_args(events.EventLine)}
# kinds whose fields are all scalars, so a scan of them finds every non-finite float; msgspec encodes those
_FLAT = frozenset(("step", "comm", "heartbeat"))
_encode = msgspec.json.encode


class EventWriter:
    """One writer per rank; ``emit`` is cheap, thread-safe and never waits, ``flush`` is idempotent."""

    def __init__(self, run_dir: Path, run_id: str, rank: int, *,
                 heartbeat: Callable[[], dict[str, Any]] | None = None,
                 heartbeat_every_s: float = HEARTBEAT_EVERY_S, max_pending: int = MAX_PENDING) -> None:
        self.path = Path(run_dir) / f"rank-{rank}.jsonl"
        self.run_id, self.rank = run_id, rank
        Path(run_dir).mkdir(mode=RUN_DIR_MODE, parents=True, exist_ok=True)
        self._pending: deque[dict[str, Any]] = deque()  # append/popleft are atomic: no lock on the hot path
        # One flush at a time, so lines never interleave; re-entrant because the SIGTERM handler
        # flushes on the main thread, which may be inside ``flush`` when the signal lands.
        self._lock = threading.RLock()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, file_mode(run_dir))
        self._file = os.fdopen(fd, "ab", buffering=0)  # lives as long as the process
        self._stop = threading.Event()
        self.dropped = 0  # events lost: queue full, refused by the schema or JSON, or a failed write
        self.max_pending = max_pending
        self._heartbeat, self._heartbeat_every_s = heartbeat, heartbeat_every_s
        self._next_beat = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="zerodoctor-writer", daemon=True)
        self._thread.start()

    def emit(self, kind: str, **fields: Any) -> None:
        """Queue one event; fields may hold 0-dim tensors, resolved at flush time."""
        self.put(kind, fields)

    def put(self, kind: str, fields: dict[str, Any]) -> None:
        """``emit`` for a dict the caller built and hands over (the step's, every step: no copy of it)."""
        pending = self._pending
        if len(pending) >= self.max_pending:  # the writer is stuck: drop rather than grow or wait
            self.dropped += 1
            return
        if not fields.get("t"):
            fields["t"] = time.time()
        fields["kind"] = kind
        pending.append(fields)

    def flush(self) -> None:
        with self._lock:
            lines = []
            while self._pending:
                line = self._line(self._pending.popleft())
                if line is not None:
                    lines.append(line)
            if lines:
                try:
                    self._file.write(b"".join(lines))
                except OSError:  # a full disk must not kill training; its lines are counted instead
                    self.dropped += len(lines)

    def close(self, **run_end: Any) -> None:
        """Flush; with ``run_end`` fields, that event last, past the bound, with ``dropped_events``."""
        self._stop.set()
        with self._lock:
            self.flush()
            if run_end:
                run_end.update(t=time.time(), kind="run_end", dropped_events=self.dropped or None)
                self._pending.append(run_end)
                self.flush()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_EVERY_S):
            try:
                self._beat()
                self.flush()
            except Exception:  # noqa: BLE001 - the writer must outlive a heartbeat that fails; counted
                self.dropped += 1

    def _beat(self) -> None:
        if self._heartbeat is None or time.monotonic() < self._next_beat:
            return
        self._next_beat = time.monotonic() + self._heartbeat_every_s
        self.emit("heartbeat", **self._heartbeat())

    def _line(self, fields: dict[str, Any]) -> bytes | None:
        kind = fields.pop("kind")
        try:
            event = {"v": events.SCHEMA_VERSION, "t": fields.pop("t"), "run": self.run_id, "rank": self.rank,
                     "kind": kind}
            finite = True
            for key, value in fields.items():
                if value is not None:  # absent, not null
                    value = _plain(value)
                    if value.__class__ is float and value - value != 0.0:  # NaN or ±inf: NaN - NaN, inf - inf
                        finite = False
                    event[key] = value
            try:
                msgspec.convert(event, _TWINS[kind])
            except (KeyError, msgspec.ValidationError):
                event = events.new(**event)
            if finite and kind in _FLAT:
                return _encode(event) + b"\n"
            # NaN and ±inf as JSON's NaN/Infinity (the schema keeps a NaN loss; msgspec would write null)
            return json.dumps(event, allow_nan=True, separators=(",", ":")).encode() + b"\n"
        except Exception:  # noqa: BLE001 - the schema or JSON refuses a field: drop the event, not the batch
            self.dropped += 1
            return None


def _plain(value: Any) -> Any:
    """0-dim tensors and numpy scalars → Python numbers (non-finite floats stay: the schema allows them)."""
    if value is None or isinstance(value, (str, bool, int, float, dict, list)):
        return value
    return value.item() if hasattr(value, "item") else value
