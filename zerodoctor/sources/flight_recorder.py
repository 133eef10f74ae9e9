"""Sources, flight recorder: a PyTorch ``fr_trace`` dump (one file per rank) → ``log`` events ``flight_recorder``.

c10d's flight recorder keeps each rank's last collectives in a ring buffer and, with
``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` (or on request), writes it to ``$TORCH_FR_DUMP_TEMP_FILE<rank>``
(default ``/tmp/nccl_trace_rank_<rank>``) as a pickle made by the C++ writer
(``FlightRecorderDetail.hpp``: ``version``, ``pg_config``, ``pg_status``, ``entries`` with
``process_group``, ``collective_seq_id``, ``profiling_name``, ``state``, ``time_created_ns``…).
That pickle holds only dicts, lists, tuples, strings, numbers, booleans and None, so it is read
with an unpickler that refuses every class: a crafted file cannot run code here.

One event per process group and rank: its last recorded collective (sequence number, op,
state) and what ``pg_status`` says was last started and completed. Across ranks, the one whose
last sequence number is behind the others' never joined the collective they wait in.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

from zerodoctor import events
from zerodoctor.events import Event

DUMP_PATTERN = "*_rank_[0-9]*"  # nccl_trace_rank_3, fr_trace_rank_3: the writer appends the rank
_RANK = re.compile(r"(\d+)$")
PICKLE_PROTOCOL_2 = b"\x80\x02"


class FlightRecorderError(ValueError):
    """The file is not a flight recorder dump this reader understands; the message says why."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle opcodes build by themselves; any class or function lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a flight recorder dump holds plain values only")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id: a flight recorder dump has none")


def is_dump(head: bytes) -> bool:
    """A protocol-2 pickle: what the c10d writer produces (checked before anything is parsed)."""
    return head.startswith(PICKLE_PROTOCOL_2)


def load(data: bytes, name: str = "<dump>") -> dict[str, Any]:
    """The dump as plain Python values; ``FlightRecorderError`` naming ``name`` when it is not one."""
    if not is_dump(data):
        raise FlightRecorderError(f"{name}: not a flight recorder dump (no pickle protocol 2 header)")
    try:
        dump = _PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        raise FlightRecorderError(f"{name}: unreadable flight recorder dump: {exc}") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list) or "version" not in dump:
        raise FlightRecorderError(f"{name}: a pickle, but not a flight recorder dump (no version/entries)")
    return dump


def rank_of(path: Path) -> int:
    """The writer names each rank's file by appending the rank to the prefix, as torch's own loader reads it."""
    match = _RANK.search(path.name)
    if match is None:
        raise FlightRecorderError(f"{path}: no rank at the end of the file name")
    return int(match.group(1))


def last_collectives(dump: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per process group (by name): its last recorded collective and the group's status counters."""
    names = {str(pg_id): str(info.get("name", pg_id)) for pg_id, info in (dump.get("pg_config") or {}).items()
             if isinstance(info, dict)}
    out: dict[str, dict[str, Any]] = {}
    for entry in dump.get("entries") or []:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        group = entry.get("process_group") or ("?", "?")
        name, desc = (str(group[0]), str(group[1])) if isinstance(group, (tuple, list)) and len(group) == 2 else (
            str(group), "")
        seq = entry.get("collective_seq_id")
        if not isinstance(seq, int):
            continue
        if name not in out or seq >= out[name]["seq"]:
            out[name] = {"group": name, "desc": desc, "seq": seq, "op": entry.get("profiling_name"),
                         "state": entry.get("state"), "timeout_ms": entry.get("timeout_ms"),
                         "time_ns": entry.get("time_created_ns"), "pg_id": entry.get("pg_id")}
    for pg_id, status in (dump.get("pg_status") or {}).items():
        name = names.get(str(pg_id), str(pg_id))
        if isinstance(status, dict) and name in out:
            for key, field in (("last_started_collective", "last_started_seq"),
                               ("last_completed_collective", "last_completed_seq")):
                if isinstance(status.get(key), int) and status[key] >= 0:
                    out[name][field] = status[key]
    return out


def events_of(dump: dict[str, Any], rank: int, run_id: str, path: Path) -> list[Event]:
    """One ``log`` event per process group of one rank's dump."""
    try:
        fallback_t = path.stat().st_mtime
    except OSError:
        fallback_t = 0.0
    out = []
    for group, last in sorted(last_collectives(dump).items()):
        t = last["time_ns"] / 1e9 if isinstance(last.get("time_ns"), int) else fallback_t
        data = {k: v for k, v in last.items() if k not in ("time_ns", "pg_id") and v is not None}
        data["entries"] = len(dump.get("entries") or [])
        data["dump"] = path.name
        message = (f"flight recorder: rank {rank}'s last collective on group {group} ({last['desc']}) is "
                   f"#{last['seq']} {last['op']} ({last['state']})")
        out.append(events.new("log", t=t, run=run_id, rank=rank, message=message, source="flight_recorder",
                              level="INFO", what="flight_recorder", data=data))
    return out


class FlightRecorderParser:
    """The ``flight-recorder`` format: a whole dump, fed in pieces, parsed at the end of input.

    Its rank is in the file name, so the factory takes the path; a dump that cannot be read is
    one rejected "line" naming the file and why.
    """

    format = "flight-recorder"

    def __init__(self, run_id: str | None = None, *, path: Path | None = None) -> None:
        self.path, self._chunks = path, []
        self.run_id = run_id or (path.parent.name if path is not None else "flight-recorder")

    def feed(self, data: bytes) -> tuple[Event, ...]:
        self._chunks.append(data)
        return ()

    def finish(self) -> list[Event]:
        if self.path is None:
            raise FlightRecorderError("a flight recorder dump is read from a file (its rank is in the name)")
        data, self._chunks = b"".join(self._chunks), []
        return events_of(load(data, str(self.path)), rank_of(self.path), self.run_id, self.path)


def dumps_in(directory: Path) -> list[Path]:
    """The flight recorder dumps a run directory holds (files named ``<prefix>_rank_<r>`` that are pickles)."""
    found = []
    for path in sorted(directory.glob(DUMP_PATTERN)):
        if path.is_file():
            with open(path, "rb") as f:
                if is_dump(f.read(2)):
                    found.append(path)
    return found
