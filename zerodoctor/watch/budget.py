"""Watch: each judgement of one run has a time budget and a cost, and a stop signal need not wait for one to end.

A judgement reads one run's view, computes its signals and rules, and records its findings in a
transaction of its own: abandoning it at any instruction leaves nothing half written (the
transaction rolls back, the stored rows and offsets are untouched). So a judgement is the one
place where ``watch`` is interrupted rather than asked: past the budget SIGALRM raises
``OverBudget`` in it (an ``Exception``: the pipeline sets that run aside with the reason, every
other run goes on), and SIGTERM/SIGINT raise ``Stopping`` in it (a ``BaseException``: nothing sets
a run aside for it, the loop ends). Everywhere else a stop signal only sets ``stop``, which the
ingest pass checks between files and every wait of the loop checks while it waits (the next safe
point: a committed transaction). Signals reach Python's main thread only; elsewhere the budget is
not kept (a watcher driven from another thread still stops between runs).
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from typing import Iterator

JUDGE_BUDGET_S = 60.0  # a large run's judgement costs ~1 s; an endless one is set aside after this


class Cost:
    """How long a judgement held the watch loop, less the time it waited for a CPU (Linux's per-thread run
    queue time, ``/proc/thread-self/schedstat``; elsewhere the wall time alone).

    A run's judgement interval stretches to four times this, so a large run never takes most of the loop. On
    a machine the watcher shares with busier processes (64 nodes' watchers on one 2-core box in
    ``bench/pg_nodes.py``, or a login node), a judgement of 30 ms of CPU took 1.5 s of wall time waiting its
    turn, and its run was judged once every 6 s: slower judging frees no CPU for the others."""

    def __init__(self) -> None:
        self._wall, self._queued = time.monotonic(), _queued_s()

    def seconds(self) -> float:
        return max(0.0, time.monotonic() - self._wall - (_queued_s() - self._queued))


def _queued_s() -> float:
    """Seconds this thread has waited on a run queue so far (0 where the kernel does not say)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class OverBudget(Exception):
    """A judgement ran past its budget (a loop no input should cause: a bug, or a value nothing validated)."""


class Stopping(BaseException):
    """SIGTERM or SIGINT arrived during a judgement: it is abandoned and the watch ends."""


class Interrupts:
    """Where a signal may interrupt the watch thread: inside ``judging`` only."""

    def __init__(self, stop: threading.Event, wake: threading.Event) -> None:
        self.stop, self.wake = stop, wake
        self._judging: tuple[str, float] | None = None

    @contextmanager
    def judging(self, what: str, budget_s: float) -> Iterator[None]:
        """Run the block under ``budget_s`` seconds (``what``: the judgement, for the reason given)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGALRM, self._alarm)
        self._judging = what, budget_s
        if budget_s > 0:  # 0: no budget, a stop signal still ends the judgement
            signal.setitimer(signal.ITIMER_REAL, budget_s)
        try:
            if self.stop.is_set():  # a signal between two judgements: do not start another
                raise Stopping()
            yield
        finally:
            self._judging = None  # first: an alarm landing now finds nothing to interrupt
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def stop_signal(self, signum: int, _frame: object) -> None:
        """The SIGTERM/SIGINT handler: stop the loop; abandon a judgement in flight."""
        self.stop.set()
        self.wake.set()
        if self._judging is not None:
            self._judging = None
            raise Stopping(signal.Signals(signum).name)

    def _alarm(self, _signum: int, _frame: object) -> None:
        if self._judging is not None:
            what, budget_s = self._judging
            self._judging = None
            raise OverBudget(f"{what} took more than {budget_s:g} s, the watch's budget for one judgement")
