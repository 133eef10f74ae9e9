"""Sources, text: stack dumps of a live process (py-spy, faulthandler) → ``log`` events ``stack_dump``.

People dump a job's stacks when it hangs: ``py-spy dump --pid N`` (``Process N: …`` then, per thread,
``Thread T (idle|active): "name"`` and its frames ``    func (path/file.py:line)``, innermost first) or
CPython's ``faulthandler`` (``Thread 0x… (most recent call first):`` and ``  File "…", line N in func``,
also printed by ``faulthandler.dump_traceback_later`` and on SIGABRT). A thread whose stack holds a
``torch.distributed`` collective (``distributed_c10d.py``, ``deepspeed/comm/``) is waiting in it; one event per
dumped process names the collective, the frame of the caller outside torch.distributed and the thread.
The dumped process's rank is its ``[rankN]:`` prefix, else the order of the dumps in the log (0, 1, …).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.sources.text import Context, Line

_PROCESS = deferred(r"^Process (\d+): ")
_PYSPY_THREAD = deferred(r"^Thread (\S+) \((?:idle|active|gil|waiting)[^)]*\)(?::\s*\"([^\"]*)\")?")
_PYSPY_FRAME = deferred(r"^\s+(\S+) \(([^():]+):(\d+)\)\s*$")
_FH_THREAD = deferred(r"^(?:Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):")
_FH_FRAME = deferred(r'^\s+File "([^"]+)", line (\d+) in (\S+)')
COLLECTIVES = frozenset((
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast", "broadcast_object_list", "barrier",
    "monitored_barrier", "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv", "reduce", "gather",
    "scatter", "inference_all_reduce", "all_reduce_coalesced", "allgather_fn", "reduce_scatter_fn"))
_DISTRIBUTED = deferred(r"distributed_c10d\.py$|deepspeed[/\\]comm[/\\]")
_C10D_LAYERS = deferred(r"torch[/\\]distributed[/\\]|deepspeed[/\\]comm[/\\]|torch[/\\]_dynamo[/\\]")
MAX_THREAD_FRAMES = 200


@dataclass
class _Dump:
    """One dumped process being read."""

    line: Line
    rank: int
    thread: str = ""
    frames: list[tuple[str, str, int]] = field(default_factory=list)  # (function, path, line) of the current thread
    found: dict[str, str] | None = None  # the first thread waiting in a collective


class StackDumpDialect:
    name = "stackdump"
    keywords = (b"Process ", b"Thread ", b"Current thread 0x")

    def __init__(self, context: Context) -> None:
        self.context = context
        self._dump: _Dump | None = None
        self._dumps = 0

    @property
    def holding(self) -> bool:
        return self._dump is not None

    def feed(self, line: Line) -> list[Event]:
        text = line.text
        frame = self._frame(text) if self._dump is not None else None
        if frame is not None:
            if len(self._dump.frames) < MAX_THREAD_FRAMES:
                self._dump.frames.append(frame)
            return []
        thread = _PYSPY_THREAD.match(text) or _FH_THREAD.match(text)
        if thread is None:
            if self._dump is not None and text.strip() and not text.startswith(("Python v", " ")):
                return self._close(line)  # the dump ended
            return []
        out: list[Event] = []
        if self._dump is None or _PROCESS.match(text) or (self._dump.line.rank != line.rank):
            out += self._close(line) if self._dump is not None else []
            self._start(line)
        self._end_thread()
        self._dump.thread = " ".join(g for g in thread.groups() if g)
        return out

    def finish(self) -> list[Event]:
        return self._close(None) if self._dump is not None else []

    def _start(self, line: Line) -> None:
        rank = line.rank if line.rank is not None else self._dumps
        self._dumps += 1
        self._dump = _Dump(line, rank)

    def _frame(self, text: str) -> tuple[str, str, int] | None:
        match = _PYSPY_FRAME.match(text)
        if match:
            function, path, number = match.groups()
            return function, path, int(number)
        match = _FH_FRAME.match(text)
        if match:
            path, number, function = match.groups()
            return function, path, int(number)
        return None

    def _end_thread(self) -> None:
        """The thread just read: does it wait in a collective? (frames innermost first)"""
        dump = self._dump
        if dump is None or dump.found is not None:
            if dump is not None:
                dump.frames = []
            return
        waits = next((f for f in dump.frames if f[0] in COLLECTIVES and _DISTRIBUTED.search(f[1])), None)
        if waits is not None:
            caller = next((f for f in dump.frames[dump.frames.index(waits):] if not _C10D_LAYERS.search(f[1])), None)
            dump.found = {"op": waits[0], "thread": dump.thread,
                          **({"caller": f"{caller[1]}:{caller[2]} in {caller[0]}"} if caller else {})}
        dump.frames = []

    def _close(self, line: Line | None) -> list[Event]:
        self._end_thread()
        dump, self._dump = self._dump, None
        if dump is None or dump.found is None:
            return []
        return [self.context.event("log", dump.line, rank=dump.rank,
                                   message=f"stack dump: waiting in {dump.found['op']}",
                                   source=self.name, what="stack_dump", data=dump.found)]
