"""Probe, phase: where the training thread is now → the fields of each ``heartbeat`` event.

The training thread only swaps one tuple on the ``PHASE`` object (no lock, no system call
beyond ``time.time()``); the writer's thread reads it every ``HEARTBEAT_EVERY_S`` and writes
a ``heartbeat``, so a rank that waits, sleeps or loads data still says so, and a rank that
says nothing at all is dead or frozen with the interpreter lock held.

Phases nest one level: a collective runs inside an engine phase (``outer``). Leaving an
engine phase for the user's code starts a new "outside" phase at that moment; leaving a
collective returns to the engine phase around it, with its own start time.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

HEARTBEAT_EVERY_S = float(os.environ.get("ZERODOCTOR_HEARTBEAT_S", "5"))
OUTSIDE = ("user", "eval", "data")  # outside the engine: the user's code, evaluation, the data loader
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

# (phase, since_t, outer, op, group, seq): what the heartbeat reports
State = tuple[str, float, "str | None", "str | None", "str | None", "int | None"]


class RankPhase:
    """The phase of this process's training thread; one per process (``PHASE``)."""

    def __init__(self) -> None:
        self.now: State = ("user", time.time(), None, None, None, None)
        self.last_step: int | None = None
        self.thread: int | None = None  # the thread that drives the engine; others' data loaders don't count
        self.data_s = 0.0  # time in the data loader since the last optimizer step

    def enter(self, phase: str) -> State:
        """Enter an engine phase or the data loader; returns what ``leave`` restores."""
        previous = self.now
        self.now = (phase, time.time(), None, None, None, None)
        return previous

    def enter_collective(self, op: str, group: str | None, seq: int | None) -> State:
        previous = self.now
        self.now = ("collective", time.time(), previous[0], op, group, seq)
        return previous

    def leave(self, previous: State, outside: str | None = None) -> None:
        """Back to ``previous``; back outside the engine (as ``outside`` when given) starts a new phase now.

        Except within an evaluation: its forwards and data loading return to the same evaluation,
        which is one phase from its first forward on.
        """
        name = outside or previous[0]
        if previous[0] not in OUTSIDE or (name == previous[0] == "eval"):
            self.now = previous
        else:
            self.now = (name, time.time(), None, None, None, None)

    def heartbeat(self) -> dict[str, Any]:
        """The fields of one ``heartbeat`` event (called on the writer's thread).

        Once the main thread has finished, the interpreter is exiting: what training kept is
        already freed, so the memory read then is no point on the run's memory curve (it would
        read as a leak that stopped at the last step). The heartbeat still says the rank lives.
        """
        phase, since, outer, op, group, seq = self.now
        exiting = not threading.main_thread().is_alive()
        return {"phase": phase, "since_t": since, "outer": outer, "op": op, "group": group, "seq": seq,
                "last_step": self.last_step, "rss_bytes": None if exiting else rss_bytes(),
                "pinned_bytes": None if exiting else pinned_bytes()}


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

    def __next__(self: Any) -> Any:
        if phase.thread != threading.get_ident():
            return original(self)
        previous = phase.enter("data")
        start = perf()
        try:
            return original(self)
        finally:
            phase.data_s += perf() - start
            phase.leave(previous)

    __next__._zerodoctor = True  # type: ignore[attr-defined]
    __next__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__next__ = __next__


PHASE = RankPhase()
