"""Probe, phase: where the training thread is now → the fields of each ``heartbeat`` event.

The training thread only swaps one tuple on the ``PHASE`` object (no lock; its one clock read,
``perf_counter``, is the one the wrappers time their calls with anyway); the writer's thread reads it
every ``HEARTBEAT_EVERY_S`` and writes a ``heartbeat``, so a rank that waits, sleeps or loads data still
says so, and a rank that says nothing at all is dead or frozen with the interpreter lock held. A phase's
start is kept on that monotonic clock and turned into unix time by the heartbeat, by an offset between
the two clocks that stays put (so every heartbeat of one phase gives the same ``since_t``, which is how
the hang signals tell one phase run from the next) until the wall clock is stepped.

Phases nest one level: a collective runs inside an engine phase (``outer``). Leaving an
engine phase for the user's code starts a new "outside" phase at that moment; leaving a
collective returns to the engine phase around it, with its own start time.
"""

from __future__ import annotations

import os
import threading
import time
from time import perf_counter
from typing import Any

HEARTBEAT_EVERY_S = float(os.environ.get("ZERODOCTOR_HEARTBEAT_S", "5"))
OUTSIDE = ("user", "eval", "data")  # outside the engine: the user's code, evaluation, the data loader
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# (phase, since, outer, op, group, seq): what the heartbeat reports, ``since`` on ``perf_counter``'s clock. In a
# collective, ``group`` is the live process group itself while the op runs, named and counted by the heartbeat
# (``group_place``); an async op's wait carries the name and number read when it was issued.
State = tuple[str, float, "str | None", "str | None", Any, "int | None"]
# c10d counts a collective when it is issued, on the calling thread, before it waits (see ``group_place``); an
# op this old has long passed that line, so the group's count is its number
SETTLED_S = 1.0
# the wall clock moved this far against the monotonic one (a clock step): phases start from the new offset on
STEPPED_S = 0.5


class RankPhase:
    """The phase of this process's training thread; one per process (``PHASE``)."""

    def __init__(self) -> None:
        self.now: State = ("user", perf_counter(), None, None, None, None)
        self.last_step: int | None = None
        self.thread: int | None = None  # the thread that drives the engine; others' data loaders don't count
        self.data_s = 0.0  # time in the data loader since the last optimizer step
        self._wall = time.time() - perf_counter()  # unix time = perf_counter() + this

    def enter(self, phase: str, at: float | None = None) -> State:
        """Enter an engine phase or the data loader (at ``at``, a ``perf_counter`` reading the caller took
        anyway); returns what ``leave`` restores."""
        previous = self.now
        self.now = (phase, perf_counter() if at is None else at, None, None, None, None)
        return previous

    def enter_collective(self, op: str, group: str | None, seq: int | None) -> State:
        previous = self.now
        self.now = ("collective", perf_counter(), previous[0], op, group, seq)
        return previous

    def leave(self, previous: State, outside: str | None = None, at: float | None = None) -> None:
        """Back to ``previous``; back outside the engine (as ``outside`` when given) starts a new phase now.

        Except within an evaluation: its forwards and data loading return to the same evaluation,
        which is one phase from its first forward on.
        """
        name = outside or previous[0]
        if previous[0] not in OUTSIDE or (name == previous[0] == "eval"):
            self.now = previous
        else:
            self.now = (name, perf_counter() if at is None else at, None, None, None, None)

    def heartbeat(self) -> dict[str, Any]:
        """The fields of one ``heartbeat`` event (called on the writer's thread).

        Once the main thread has finished, the interpreter is exiting: what training kept is
        already freed, so the memory read then is no point on the run's memory curve (it would
        read as a leak that stopped at the last step). The heartbeat still says the rank lives.
        """
        state = self.now
        phase, since, outer, op, group, seq = state
        if group is not None and not isinstance(group, str):
            group, seq = group_place(group, since)
            if self.now is not state:  # the op ended meanwhile: the count read may be a later op's
                return self.heartbeat()
        exiting = not threading.main_thread().is_alive()
        wall = time.time() - perf_counter()
        if abs(wall - self._wall) > STEPPED_S:
            self._wall = wall
        since_t = since + self._wall
        return {"phase": phase, "since_t": since_t, "outer": outer, "op": op, "group": group, "seq": seq,
                "last_step": self.last_step, "rss_bytes": None if exiting else rss_bytes(),
                "pinned_bytes": None if exiting else pinned_bytes()}


def group_place(group: Any, since: float) -> tuple[str | None, int | None]:
    """(name, sequence number) of the process group a collective that began at ``since`` runs on, read now.

    The number is c10d's count of the group's collectives: gloo counts an op in the op itself before it queues
    the work (``++seq_`` in each ``ProcessGroupGloo`` collective), NCCL at the top of ``collective()``
    (``seqCollective_++``, which ``getSequenceNumberForGroup`` returns), both on the calling thread before
    anything that can block. So while the op runs, the count is the op's own number, once the training thread
    has got from the probe's wrapper to that line: microseconds of Python, unless the thread waits for the
    interpreter lock this heartbeat holds. An op younger than ``SETTLED_S`` gets no number rather than one too
    low; a stuck one gets its number from its second heartbeat on.
    """
    try:
        name = group.group_name
        seq = group._get_sequence_number_for_group() if perf_counter() - since >= SETTLED_S else None
    except (AttributeError, RuntimeError):  # a group destroyed meanwhile, or a backend without c10d's counter
        return None, None
    return name, seq


def issued_place(group: Any) -> tuple[str | None, int | None]:
    """(name, sequence number) of a group right after an op on it was issued: that op's own number."""
    try:
        return group.group_name, group._get_sequence_number_for_group()
    except (AttributeError, RuntimeError):
        return None, None


def rss_bytes() -> int | None:
    """Resident set size of this process, from ``/proc/self/statm`` (Linux); None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def pinned_bytes() -> int | None:
    """Page-locked host memory held by PyTorch's host allocator (DeepSpeed's offload buffers), CUDA only."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        return torch.cuda.host_memory_stats().get("allocated_bytes.current")
    except (AttributeError, RuntimeError):
        return None


def watch_data_loader(phase: RankPhase) -> None:
    """Count time in ``DataLoader`` iteration as the ``data`` phase, on the training thread only.

    Wrapped once per process at the class every loader iterator derives from; the iterator the
    user holds and the batches it yields are untouched.
    """
    from torch.utils.data import dataloader

    cls = dataloader._BaseDataLoaderIter
    if getattr(cls.__next__, "_zerodoctor", False):
        return
    original = cls.__next__
    perf = time.perf_counter

    def __next__(self: Any) -> Any:  # noqa: N807 - it stands in for the method it wraps
        if phase.thread != threading.get_ident():
            return original(self)
        start = perf()
        previous = phase.enter("data", start)
        try:
            return original(self)
        finally:
            end = perf()
            phase.data_s += end - start
            phase.leave(previous, at=end)

    __next__._zerodoctor = True  # type: ignore[attr-defined]
    __next__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__next__ = __next__


PHASE = RankPhase()
