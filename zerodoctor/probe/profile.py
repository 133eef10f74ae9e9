"""Probe, profile: ``zerodoctor run --profile 10-12`` → a torch.profiler window over those optimizer steps on
every rank, written as ``rank-<r>.pt.trace.json.gz`` into the run directory.

The window opens when the step before the first one has ended (so the first step's forward is in
it) and closes when the last one has: each optimizer step is one ``ProfilerStep#N`` range, N the
engine's own step number, which is what ``sources/profiler_trace.py`` reads back. CPU activity
always, CUDA's where there is a GPU; shapes, stacks and memory off (they multiply the trace's size
and the profiler's overhead). Outside the window the profiler is not running and nothing is wrapped
but ``engine.step``, which then only compares a step counter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from zerodoctor.probe.privacy import file_mode

PROFILE_ENV = "ZERODOCTOR_PROFILE"


def parse_steps(text: str) -> tuple[int, int]:
    """``"10-12"`` → (10, 12); ``"7"`` → (7, 7). ValueError with the reason when it is neither."""
    first, sep, last = text.strip().partition("-")
    try:
        lo, hi = int(first), int(last) if sep else int(first)
    except ValueError:
        raise ValueError(f"{text!r}: give optimizer steps as FIRST-LAST (e.g. 10-12) or one step") from None
    if lo < 1 or hi < lo:
        raise ValueError(f"{text!r}: steps count from 1 and the last is not before the first")
    return lo, hi


def trace_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank-{rank}.pt.trace.json.gz"


class ProfileWindow:
    """Starts the profiler before optimizer step ``first`` and stops it after ``last``, then writes the trace."""

    def __init__(self, engine: Any, first: int, last: int, path: Path) -> None:
        self.engine, self.first, self.last, self.path = engine, first, last, path
        self.profiler: Any = None
        self.done = False

    def install(self) -> None:
        step = self.engine.step

        def profiled_step(*args: Any, **kwargs: Any) -> Any:
            before = self.engine.global_steps
            out = step(*args, **kwargs)
            if not self.done and self.engine.global_steps != before:  # a micro-batch's step() is no optimizer step
                self._safely(self._after_step, self.engine.global_steps)
            return out

        object.__setattr__(self.engine, "step", profiled_step)
        self._safely(self._after_step, self.engine.global_steps)  # first == 1: open before any step

    def _after_step(self, done: int) -> None:
        """``done``: the optimizer steps completed so far."""
        if self.profiler is None:
            if self.first - 1 <= done < self.last:
                self._open(done + 1)
        elif done >= self.last:
            self._close()
        else:
            self.profiler.step()

    def _open(self, number: int) -> None:
        import torch
        from torch.profiler import ProfilerAction, ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        # a schedule that always records: it is what makes the profiler mark each step as ProfilerStep#N
        self.profiler = profile(activities=activities, schedule=lambda _: ProfilerAction.RECORD,
                                record_shapes=False, with_stack=False, profile_memory=False)
        self.profiler.step_num = number
        self.profiler.start()

    def _close(self) -> None:
        profiler, self.profiler, self.done = self.profiler, None, True
        profiler.stop()
        profiler.export_chrome_trace(str(self.path))
        os.chmod(self.path, file_mode(self.path.parent))  # as private as the rank's own event file

    def _safely(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - a profiler that fails costs its trace, never the training
            self.done, self.profiler = True, None
            print(f"zerodoctor: profile window abandoned, training continues: {type(exc).__name__}: {exc}",
                  file=sys.stderr, flush=True)


def install_from_env(engine: Any, run_dir: Path) -> ProfileWindow | None:
    """The window ``$ZERODOCTOR_PROFILE`` asks for, on this engine; None when none is asked."""
    spec = os.environ.get(PROFILE_ENV)
    if not spec:
        return None
    first, last = parse_steps(spec)
    window = ProfileWindow(engine, first, last, trace_path(run_dir, engine.global_rank))
    window.install()
    return window
