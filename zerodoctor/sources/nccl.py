"""Sources, text: NCCL watchdog timeouts (``ProcessGroupNCCL.cpp``) → ``log`` events ``collective_timeout``.

Old form: ``[E ProcessGroupNCCL.cpp:N] [Rank R] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=S, OpType=OP, [NumelIn=…, NumelOut=…,] Timeout(ms)=T) ran for M milliseconds
before timing out.`` New form (torch 2.2+): the same message behind ``[rankR]:[E… ProcessGroupNCCL.cpp:N]``
and a ``[PG ID 0 PG GUID 0(default_pg) Rank R]`` (or ``[PG 0 (default_pg) Rank R]``) tag. The
watchdog repeats the message when it tears the process down, so each (rank, SeqNum) counts once.
A message a terminal wrapped (``Watchdog caught`` / `` collective operation …`` / ``…Timeout(ms)=18000``) is read
whole from up to ``MAX_WRAPPED_LINES`` lines; one no later line completes (the next starts a message of its own, or
the log ends) was cut, and is read for the rank, SeqNum and op it still shows.
The other wordings of the same fault, each read as a ``collective_timeout`` with what it names:
``Work WorkNCCL(SeqNum=S, OpType=OP, …) timed out in blocking wait`` (``TORCH_NCCL_BLOCKING_WAIT=1``, 1.x–2.x),
``ProcessGroupNCCL's watchdog got stuck for N seconds`` (2.2+: a CUDA or NCCL call hung the watchdog itself),
gloo's ``Timed out waiting Nms for send/recv operation to complete`` (``transport/tcp/unbound_buffer.cc``), the
store-based barrier of a new process group (``Timed out initializing process group in store based barrier``) and
the generic ``Some NCCL operations have failed or timed out`` (1.x–2.x, after the watchdog). That epitaph is
``WorkNCCL::handleException``'s for any failed work, a timeout or an NCCL or CUDA error the watchdog found: it is held
for ``EPITAPH_LINES`` lines and dropped when the exception it announces names another fault (``terminate called …
what():  NCCL error: unhandled system error``), so an NCCL failure is no timeout; that exception may follow on the
epitaph's own line, in a paste that lost its line breaks.

Before its timeout the store-based barrier says it still waits, every 10 s or more (``Waiting in store based barrier
to initialize process group for [N seconds]rank: R, key: K (world_size=W, worker_count|num_workers_joined=C, …)``):
a ``log`` ``store_barrier_wait`` (``signals/barrier.py``) once per rank, key and count, and again when the seconds it
states grew by ``WAIT_GROWTH``, so a wait of hours is a few events; ``Rank R: Completed store-based barrier for
key:K with W nodes.`` is its end, a ``store_barrier_done``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zerodoctor.events import Event
from zerodoctor.messages import crashes
from zerodoctor.messages.deferred import deferred
from zerodoctor.sources.text import Context, Line, joined, keyword_search

_TIMEOUT = deferred(
    r"(?:Watchdog c|C)aught collective operation timeout: WorkNCCL\((?:SeqNum=(\d+), )?OpType=(\w+)"
    r"(?:, TensorShape=\[[^\]]*\])?(?:, NumelIn=(\d+), NumelOut=(\d+))?, Timeout\(ms\)=(\d+)\)"
    r"(?: ran for (\d+) milliseconds)?")
_BLOCKING = deferred(
    r"Work WorkNCCL\(SeqNum=(\d+), OpType=(\w+)(?:, NumelIn=(\d+), NumelOut=(\d+))?, Timeout\(ms\)=(\d+)\)"
    r"() timed out in blocking wait")
# The same line cut after its op type (a paste, a terminal or a log collector that keeps a line's first columns:
# "WorkNCCL(SeqNum=956300, OpType=_ALLGATHER_BASE, ."): the rank, the sequence number and the op it still shows
_CUT = deferred(r"(?:Watchdog c|C)aught collective operation timeout: WorkNCCL\((?:SeqNum=(\d+), )?OpType=(\w+)")
_STUCK = deferred(r"ProcessGroupNCCL's watchdog got stuck for (\d+) seconds")
_GLOO = deferred(r"Timed out waiting (\d+) ?ms for (send|recv) operation to complete")
# torch/distributed/distributed_c10d.py _store_based_barrier (1.x-2.x): the ranks of a new process group never all
# joined ("rank: 7" before 2.0, "rank 7" since; "worker_count" then "num_workers_joined")
_BARRIER = deferred(r"Timed out initializing process group in store based barrier on rank:? (\d+), for key: \S+ "
                    r"\(world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+), timeout=([\d:.]+)")
# the same function before its timeout: 1.8-1.13 "rank: R, key: K (world_size=W, worker_count=C, timeout=T)" (info);
# 2.0-2.1 "num_workers_joined=C"; 2.2+ (debug) "for N secondsrank: R, …, timeout=T error=E)" (no space before "rank")
_WAITING = deferred(r"Waiting in store based barrier to initialize process ?group for (?:([\d.]+) seconds)?\s*"
                    r"rank: (\d+), key: (\S+) \(world_size=(\d+), (?:worker_count|num_workers_joined)=(\d+), "
                    r"timeout=((?:\d+ days?, )?[\d:.]+)")
_DONE = deferred(r"Rank (\d+): Completed store-based barrier for key:(\S+) with (\d+) nodes")
# A waiting rank's line is told again once the seconds it states grew by this factor: a 30 min wait is about 13
# events per rank (2,048 ranks log one line each every 10 s), and the wait a finding states is at most a third short
WAIT_GROWTH = 1.5
_FAILED = "Some NCCL operations have failed or timed out"
# 1.3-1.7: a blocking wait (NCCL_BLOCKING_WAIT=1) raised this, naming nothing else
_BLOCKING_1X = "RuntimeError: Operation timed out!"
_RANK_TAG = deferred(r"\bRank (\d+)\]")
_OPENERS = ("Watchdog caught", "aught collective operation timeout", "Work WorkNCCL(", "ProcessGroupNCCL's watchdog",
            "Timed out initializing process group")
MAX_WRAPPED_LINES = 4
# After the epitaph: "To avoid data inconsistency, …", 2.2+'s "Process group watchdog thread terminated with exception:
# <the exception>", "terminate called after throwing …", "  what():  <the exception>" (lines a terminal may wrap): the
# exception is read within this many lines
EPITAPH_LINES = 12
# What the watchdog found when it is no timeout: a result NCCL returned (crashes.NCCL_RESULT) or a CUDA fault. Not
# "NCCL communicator was aborted" nor a bare DistBackendError: the watchdog's abort says those of a timeout too
_NCCL_FAILURE = deferred(crashes.NCCL_RESULT)
_CUDA_FAULTS = {"illegal_memory_access", "device_side_assert", "cuda_error", "cuda_oom"}


def _names_a_failure(text: str) -> bool:
    """The text names a fault that is no timeout: what the epitaph announced when the watchdog found an error."""
    return bool(_NCCL_FAILURE.search(text)) or crashes.classify(text) in _CUDA_FAULTS


def _work(text: str) -> re.Match | None:
    return _TIMEOUT.search(text) or _BLOCKING.search(text)


def _whole(text: str) -> re.Match | None:
    """A timeout message whose end is there: a WorkNCCL, or the store barrier's."""
    return _work(text) or _BARRIER.search(text)


_RANK = deferred(r"Rank (\d+)\]\s*(?:Process group watchdog[^:]*: \[Rank \d+\] )?Watchdog caught")


class NcclDialect:
    name = "nccl"
    keywords = (b"Watchdog caught", b"Caught collective", b"ProcessGroupNCCL's watchdog", b"Operation timed out!",
                b"Work WorkNCCL(", b"Timed out waiting", b"Some NCCL operations",
                b"Timed out initializing process group", b"Waiting in store based barrier",
                b"Completed store-based barrier")

    def __init__(self, context: Context) -> None:
        self.context = context
        self._mine = keyword_search(self.keywords)
        self._seen: set[tuple[int, int]] = set()
        self._wrapped: list[Line] = []  # the lines of a message whose end is still to come
        self._epitaphs: dict[int, _Epitaph] = {}  # per rank: the generic epitaph, until its exception is read
        self._waits: dict[tuple[int, str], tuple[int, float]] = {}  # (rank, key) → the count and seconds last told

    @property
    def holding(self) -> bool:
        return bool(self._wrapped) or bool(self._epitaphs)

    def feed(self, line: Line) -> list[Event]:
        held = self._weigh_epitaphs(line) if self._epitaphs else []
        if not self._wrapped and self._mine(line.text) is None:  # another dialect's line
            return held
        return held + self._feed(line)

    def _feed(self, line: Line) -> list[Event]:
        out: list[Event] = []
        if self._wrapped and any(s in line.text for s in _OPENERS):  # a new message: the one held was cut
            out = self._cut(self._wrapped)
            self._wrapped = []
        if not self._wrapped and (barrier := _WAITING.search(line.text) or _DONE.search(line.text)):
            return out + self._barrier(line, barrier)
        lines, self._wrapped = [*self._wrapped, line], []
        text = joined(lines, _whole) if len(lines) > 1 else line.text
        match = _work(text)
        if not match:
            other = self._other_wording(line, text)
            if other or not any(s in lines[0].text for s in _OPENERS):
                return out + other
            if len(lines) < MAX_WRAPPED_LINES:
                self._wrapped = lines  # a terminal wrapped it: the rest is on the next lines
                return out
            return out + self._cut(lines)
        seq, op, numel_in, numel_out, timeout_ms, ran_ms = match.groups()
        data = {"timeout_s": int(timeout_ms) / 1000.0, "ran_s": int(ran_ms) / 1000.0 if ran_ms else None,
                "numel_in": int(numel_in) if numel_in else None, "numel_out": int(numel_out) if numel_out else None}
        return out + self._timeout(line, text, match.group(0), seq, op, data)

    def _timeout(self, line: Line, text: str, said: str, seq: str | None, op: str,
                 data: dict[str, float | int | None]) -> list[Event]:
        """One rank's timed-out work, once per (rank, SeqNum): the watchdog repeats it when it tears down."""
        tag = _RANK.search(text)
        rank = int(tag.group(1)) if tag else (line.rank if line.rank is not None else 0)
        key = (rank, int(seq) if seq else -1)
        if key in self._seen:
            return []
        self._seen.add(key)
        read = {"op": op, "seq": int(seq) if seq else None, **data}
        return [self.context.event("log", line, rank=rank, message=said, source=self.name, level="ERROR",
                                   what="collective_timeout", data={k: v for k, v in read.items() if v is not None},
                                   step=self.context.last_step())]

    def _barrier(self, line: Line, match: re.Match) -> list[Event]:
        """A store-based barrier still waiting, told when its count changed or its stated wait grew; or done."""
        if match.re.pattern == _DONE.pattern:
            rank, key, world = match.groups()
            self._waits.pop((int(rank), key), None)
            return [self.context.event("log", line, rank=int(rank), message=match.group(0), source=self.name,
                                       level="INFO", what="store_barrier_done",
                                       data={"key": key, "world_size": int(world)}, step=self.context.last_step())]
        waited, rank, key, world, joined, timeout = match.groups()
        said = self._waits.get((int(rank), key))
        seconds = float(waited) if waited else 0.0
        if said is not None and said[0] == int(joined) and (not seconds or seconds < WAIT_GROWTH * said[1]):
            return []
        self._waits[(int(rank), key)] = (int(joined), seconds)
        data = {"key": key, "world_size": int(world), "joined": int(joined), "timeout_s": _seconds(timeout),
                "waited_s": seconds if waited else None}
        return [self.context.event("log", line, rank=int(rank), message=match.group(0), source=self.name,
                                   level="WARNING", what="store_barrier_wait", step=self.context.last_step(),
                                   data={k: v for k, v in data.items() if v is not None})]

    def _cut(self, lines: list[Line]) -> list[Event]:
        """Held lines no later line completed: a timeout cut after its op type, read for what it shows."""
        text = joined(lines)
        cut = _CUT.search(text)
        if cut is None:
            return self._other_wording(lines[-1], text)
        return self._timeout(lines[0], text, cut.group(0), cut.group(1), cut.group(2), {})

    def finish(self) -> list[Event]:
        lines, self._wrapped = self._wrapped, []
        out = self._cut(lines) if lines else []
        epitaphs, self._epitaphs = self._epitaphs, {}
        return out + [e.event for e in epitaphs.values()]

    def _weigh_epitaphs(self, line: Line) -> list[Event]:
        """The held epitaphs after one more line: dropped when the line names a fault that is no timeout (on their
        rank, or on any when the line names none), told as timeouts once their window is over."""
        fault = _names_a_failure(line.text)
        out: list[Event] = []
        for rank, held in list(self._epitaphs.items()):
            if fault and line.rank in (None, rank):
                del self._epitaphs[rank]
            elif held.lines_left <= 1:
                out.append(self._epitaphs.pop(rank).event)
            else:
                held.lines_left -= 1
        return out

    def _other_wording(self, line: Line, text: str) -> list[Event]:
        """A timeout that names no WorkNCCL: a stuck watchdog, gloo's transport, the generic epitaph."""
        stuck, gloo, barrier = _STUCK.search(text), _GLOO.search(text), _BARRIER.search(text)
        if barrier:
            data, said = {"op": "store_based_barrier", "world_size": int(barrier.group(2)),
                          "joined": int(barrier.group(3))}, barrier.group(0)
        elif stuck:
            data, said = {"stuck_s": float(stuck.group(1))}, stuck.group(0)
        elif gloo:
            data, said = {"op": gloo.group(2), "timeout_s": int(gloo.group(1)) / 1000.0}, gloo.group(0)
        elif _FAILED in text or _BLOCKING_1X in text:
            data, said = {}, _FAILED if _FAILED in text else _BLOCKING_1X
        else:
            return []
        said_rank = barrier or _RANK_TAG.search(text)
        rank = int(said_rank.group(1)) if said_rank else (line.rank if line.rank is not None else 0)
        if (rank, -1) in self._seen:  # one such line per rank: the watchdog repeats itself
            return []
        self._seen.add((rank, -1))
        event = self.context.event("log", line, rank=rank, message=said, source=self.name, level="ERROR",
                                   what="collective_timeout", data=data, step=self.context.last_step())
        if said == _FAILED:  # a timeout unless the exception it announces names another fault
            if not _names_a_failure(text[text.index(_FAILED) + len(_FAILED):]):
                self._epitaphs[rank] = _Epitaph(event, EPITAPH_LINES)
            return []
        return [event]


def _seconds(timeout: str) -> float:
    """A ``datetime.timedelta`` as ``str`` prints it ("0:30:00", "1 day, 0:00:00") in seconds."""
    days, _, clock = timeout.rpartition(", ")
    h, m, s = clock.split(":") if clock.count(":") == 2 else ("0", "0", "0")
    return (int(days.split()[0]) * 86400.0 if days else 0.0) + int(h) * 3600 + int(m) * 60 + float(s)


@dataclass
class _Epitaph:
    """The generic epitaph of one rank, told as a timeout unless an error follows within ``lines_left`` lines."""

    event: Event
    lines_left: int
