"""Probe, failures: exceptions, OOMs, signals and interpreter exit → ``exception``/``oom``/``run_end``.

Each exception is recorded once, by whichever sees it first (the engine wrappers, which
know the step, or ``sys.excepthook``). Everything pending is flushed before the process
can die: at exit, on an uncaught exception and on SIGTERM, so a run that aborts later in
interpreter teardown (ZeRO-3 on gloo sometimes does) has already written its events.
A fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) runs no Python code: CPython's fault handler
writes the stacks to ``rank-<r>.fault`` beside the events, and the wrapper turns that file into events
once the job ended (``wrapper.finish_run_dir``), unless the user pointed the fault handler elsewhere.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import signal
import sys
import time
import traceback
from typing import Any

from zerodoctor.probe import STARTED
from zerodoctor.probe.writer import EventWriter

TRACEBACK_LINES = 12
_SEEN = "_zerodoctor_recorded"
FAULT_SUFFIX = ".fault"


def is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def oom_fields(exc: BaseException) -> dict[str, Any]:
    """The allocator's message and its numbers at the moment of failure.

    The message's numbers, read as a text log's are, stand where the live counters cannot be
    read; the counters win where they can.
    """
    # torch loads only when a rank actually runs out of memory; the allocator's grammar is messages/' (no
    # pydantic, no plugin machinery on a crash path)
    import torch

    from zerodoctor.messages.oom import oom_numbers

    message = str(exc)
    fields: dict[str, Any] = {"message": message, **oom_numbers(message),
                              "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}
    if torch.cuda.is_available():
        device = torch.cuda.current_device()
        stats = torch.cuda.memory_stats(device)
        free, total = torch.cuda.mem_get_info(device)
        fields.update(device=device, free_bytes=free, capacity_bytes=total,
                      allocated_bytes=stats.get("allocated_bytes.all.current"),
                      reserved_bytes=stats.get("reserved_bytes.all.current"),
                      alloc_retries=stats.get("num_alloc_retries"),
                      inactive_split_bytes=stats.get("inactive_split_bytes.all.current"))
    return fields


def traceback_tail(exc: BaseException, limit: int = TRACEBACK_LINES) -> list[str]:
    """The last frames and the message, starting at a ``File`` line so the tail reads whole."""
    chunks = traceback.format_exception(type(exc), exc, exc.__traceback__)
    lines = [line for chunk in chunks for line in chunk.rstrip("\n").split("\n")]
    tail = lines[-limit:]
    starts = [i for i, line in enumerate(tail) if line.lstrip().startswith("File ")]
    return tail[starts[0]:] if starts else tail


class CrashRecorder:
    """Records failures of one process into its writer; installed once per process."""

    def __init__(self, writer: EventWriter) -> None:
        self.writer = writer
        self.step: int | None = None
        self.uncaught = False
        self._ended = False

    def record(self, exc: BaseException) -> None:
        """Write ``exception`` (and ``oom``) for ``exc`` unless already written, then flush."""
        if getattr(exc, _SEEN, False) or isinstance(exc, (SystemExit, GeneratorExit)):
            return
        try:
            setattr(exc, _SEEN, True)
        except AttributeError:
            pass  # an exception type without __dict__: may be recorded twice, never lost
        if is_oom(exc):
            self.writer.emit("oom", step=self.step, **oom_fields(exc))
        self.writer.emit("exception", type=type(exc).__name__, message=str(exc),
                         traceback=traceback_tail(exc), step=self.step)
        self.writer.flush()

    def end(self, *, signum: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        self.writer.close(duration_s=time.time() - STARTED, signal=signum, exit_code=1 if self.uncaught else None)

    def install(self) -> None:
        previous_hook = sys.excepthook

        def excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
            if not isinstance(exc, KeyboardInterrupt):
                self.uncaught = True
            self.record(exc)
            previous_hook(kind, exc, tb)

        sys.excepthook = excepthook
        atexit.register(self.end)
        self._on_sigterm()
        self._on_fatal_signal()

    def _on_fatal_signal(self) -> None:
        """Point CPython's fault handler at ``rank-<r>.fault``; one the user enabled stays where they put it."""
        if faulthandler.is_enabled():
            return
        self._fault_file = open(self.writer.path.with_suffix(FAULT_SUFFIX), "w")  # noqa: SIM115 - open till exit
        faulthandler.enable(self._fault_file, all_threads=True)

    def _on_sigterm(self) -> None:
        """Flush on SIGTERM, then die of it as before; a handler the user installed stays in charge."""
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return

            def handler(signum: int, frame: Any) -> None:
                self.end(signum=signum)
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

            signal.signal(signal.SIGTERM, handler)
        except ValueError:
            pass  # not the main thread: no signal handlers there; atexit still flushes
