"""Sources, flight recorder: a PyTorch flight recorder dump (one file per rank) → ``log`` events ``flight_recorder``.

c10d's flight recorder keeps each rank's last collectives in a ring buffer and, with
``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` (or on request: ``_dump_fr_trace``, the control plane's
``dump_nccl_trace_pickle``), writes ``FlightRecorder::dump`` to ``$TORCH_FR_DUMP_TEMP_FILE<rank>``
(default ``/tmp/nccl_trace_rank_<rank>``; any prefix is legal, so a dump is known by its content and
its rank is the number its name ends with, as torch's own ``fr_trace`` loader reads it).

The dump is a protocol-2 pickle of one dict (``torch/csrc/distributed/c10d/FlightRecorder.hpp`` and
``FlightRecorderDetail.hpp``; ``TraceUtils.h`` in older torch): ``version`` (``"2.10"`` in torch
2.13), ``pg_config`` (process group name → name, desc, ranks), ``pg_status`` (present in version 2.3
on: per ``pg_id``, ``last_enqueued_collective`` / ``last_started_collective`` /
``last_completed_collective``) and ``entries`` (absent when dumped without collectives; each with
``pg_id``, ``process_group`` = (name, desc), ``collective_seq_id``, ``is_p2p``, ``profiling_name``,
``state``, ``time_created_ns``…). A version 1.x dump puts ``entries`` first, and its entries have
``pg_id`` and ``seq_id`` but no group name. The pickle holds only dicts, lists, tuples, strings,
numbers, booleans and None, so it is read with an unpickler that refuses every class: a crafted
file cannot run code here.

One event per process group and rank: how far the rank got on it (``seq``), from its last recorded
collective and from ``pg_status``'s last enqueued one, so a rank whose ring buffer is empty,
overwritten by other groups' traffic or left out of the dump is still placed, and the group's
``members`` as ``pg_config`` lists them. A ``pg_id`` is the rank's own count of the groups it joined
(rank 0's ``pg_id`` 5 and rank 12's are different groups in a Megatron job), so ``pg_status`` is
named by this dump's own entries only; the group name is what ranks share. Across a group's members,
one whose ``seq`` is behind the others' never joined the collective they wait in (``signals/hang.py``).
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

from zerodoctor import events
from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred

DUMP_PATTERN = "*_rank_[0-9]*"  # nccl_trace_rank_3: the default prefix; any other is found by content
_RANK = deferred(r"(\d+)$")
PICKLE_PROTOCOL_2 = b"\x80\x02"
# The writer's first bytes: a protocol-2 pickle of a dict (an optional memo put, as Python's pickler
# adds) whose first key is "version" (or "entries", version 1.x's order).
_DUMP_HEAD = deferred(rb"\x80\x02\}(?:q.|r....)?\(X\x07\x00\x00\x00(?:version|entries)", re.DOTALL)
HEAD_BYTES = 32
_STATUS = (("last_enqueued_collective", "enqueued_seq"), ("last_started_collective", "started_seq"),
           ("last_completed_collective", "completed_seq"))


class FlightRecorderError(ValueError):
    """The file is not a flight recorder dump this reader understands; the message says why."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle opcodes build by themselves; any class or function lookup is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a flight recorder dump holds plain values only")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id: a flight recorder dump has none")


def is_dump(head: bytes) -> bool:
    """The first bytes are those the c10d writer begins every dump with (checked before anything is parsed)."""
    return _DUMP_HEAD.match(head) is not None


def load(data: bytes, name: str = "<dump>") -> dict[str, Any]:
    """The dump as plain Python values; ``FlightRecorderError`` naming ``name`` when it is not one."""
    if not data.startswith(PICKLE_PROTOCOL_2):
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


def is_dump_file(path: Path) -> bool:
    """A regular file named ``<any prefix><rank>`` that begins as the writer's dumps do."""
    if _RANK.search(path.name) is None:
        return False
    try:
        if not path.is_file():  # a FIFO would block the read below
            return False
        with open(path, "rb") as f:
            return is_dump(f.read(HEAD_BYTES))
    except OSError:
        return False


def dumps_in(directory: Path) -> list[Path]:
    """The flight recorder dumps a run directory holds, whatever their prefix, known by their first bytes."""
    return [path for path in sorted(directory.iterdir()) if is_dump_file(path)]


def _group_name(group: Any) -> tuple[str | None, str | None]:
    """An entry's ``process_group``: (name, desc) in every version that has it."""
    if isinstance(group, (tuple, list)) and len(group) == 2:
        return str(group[0]), str(group[1])
    return (str(group), None) if group is not None else (None, None)


def _op_type(profiling_name: Any) -> str:
    """``nccl:send 1->2`` → ``send``, as torch's ``fr_trace`` splits it."""
    return str(profiling_name).partition(":")[2].split(" ")[0]


def _counter(value: Any) -> int | None:
    """A ``pg_status`` counter; -1 (nothing yet) is none. The JSON dump writes them as strings."""
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _members(config: Any) -> dict[str, list[int]]:
    """``pg_config``'s membership per group name: its ``ranks``, a string ``"[0, 1]"`` as the writer
    formats it (a list in the JSON dump). A group with no ranks listed (gloo's one empty entry) is left out."""
    out = {}
    for name, group in (config or {}).items() if isinstance(config, dict) else ():
        ranks = group.get("ranks") if isinstance(group, dict) else None
        text = ranks if isinstance(ranks, str) else " ".join(map(str, ranks or ()))
        listed = [int(r) for r in re.findall(r"\d+", text)]
        if listed:
            out[str(name)] = listed
    return out


def groups_in(dump: dict[str, Any]) -> list[dict[str, Any]]:
    """Per process group of one rank's dump: its last recorded collective, its ``pg_status`` counters and
    ``seq``, how far the rank got on it, and ``members``, the group's ranks as ``pg_config`` lists them.

    ``seq`` is the later of the two: the ring buffer may have lost the group's last entries (other
    groups' traffic, a dump without entries) and ``pg_status`` is bumped only once a collective is
    enqueued, after the entry is recorded. On a group where this dump shows p2p ops the counters may
    count those (NCCL's ``lastEnqueuedSeq`` is the work's own seq), so there only entries count; in a
    version 1.x dump (``seq_id``, no ``is_p2p``: a send or recv is known by its name) not even those.
    """
    groups: dict[str, dict[str, Any]] = {}
    for entry in dump.get("entries") or []:
        if not isinstance(entry, dict):
            continue
        name, desc = _group_name(entry.get("process_group"))
        pg_id = entry.get("pg_id") if isinstance(entry.get("pg_id"), int) else None
        group = groups.setdefault(str(pg_id) if pg_id is not None else f"name {name}",
                                  {"group": name, "desc": desc, "pg_id": pg_id})
        seq = entry.get("collective_seq_id", entry.get("seq_id"))  # seq_id: version 1.x, one count for every op
        if entry.get("is_p2p", _op_type(entry.get("profiling_name")) in ("send", "recv")):
            group["p2p"] = True
            group["one_count"] = group.get("one_count") or "is_p2p" not in entry
        elif isinstance(seq, int) and seq >= group.get("recorded_seq", -1):
            group.update(recorded_seq=seq, op=entry.get("profiling_name"), state=entry.get("state"),
                         timeout_ms=entry.get("timeout_ms"), time_ns=entry.get("time_created_ns"))
    for pg_id, status in (dump.get("pg_status") or {}).items():
        if not isinstance(status, dict):
            continue
        group = groups.setdefault(str(pg_id), {"pg_id": int(pg_id) if str(pg_id).isdigit() else None})
        group.update({field: _counter(status.get(key)) for key, field in _STATUS})
    members = _members(dump.get("pg_config"))
    for group in groups.values():
        if group.get("group") in members:
            group["members"] = members[group["group"]]
        if group.pop("one_count", False):  # 1.x counted p2p ops in seq_id too: on such a group no count compares
            group.pop("recorded_seq", None)
        reached = [group.get("recorded_seq"), None if group.get("p2p") else group.get("enqueued_seq")]
        group["seq"] = max((s for s in reached if s is not None), default=None)
    return list(groups.values())


def events_of(dump: dict[str, Any], rank: int, run_id: str, path: Path) -> list[Event]:
    """One ``log`` event per process group of one rank's dump."""
    try:
        fallback_t = path.stat().st_mtime
    except OSError:
        fallback_t = 0.0
    out = []
    entries = len(dump.get("entries") or [])
    for group in sorted(groups_in(dump), key=lambda g: (str(g.get("group")), str(g.get("pg_id")))):
        t = group["time_ns"] / 1e9 if isinstance(group.get("time_ns"), int) else fallback_t
        data = {k: v for k, v in group.items() if k != "time_ns" and v is not None}
        data.update(entries=entries, dump=path.name, version=str(dump.get("version")))
        out.append(events.new("log", t=t, run=run_id, rank=rank, message=_message(rank, group),
                              source="flight_recorder", level="INFO", what="flight_recorder", data=data))
    return out


def _message(rank: int, group: dict[str, Any]) -> str:
    """What one rank's dump says of one group, in words: where it got, and from which evidence."""
    name = group.get("group") or f"pg_id {group.get('pg_id')}"
    said = []
    if group.get("recorded_seq") is not None:
        said.append(f"last recorded #{group['recorded_seq']} {group.get('op')} ({group.get('state')})")
    if group.get("enqueued_seq") is not None:
        said.append(f"pg_status last enqueued #{group['enqueued_seq']}, completed #{group.get('completed_seq')}")
    reached = f"reached #{group['seq']}" if group.get("seq") is not None else "has no collective to compare"
    return f"flight recorder: rank {rank} on group {name} {reached} ({'; '.join(said) or 'p2p only'})"


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
