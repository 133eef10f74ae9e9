"""Launch, build lock: a job gone quiet while a JIT build lock no build holds sits in its extensions directory → a
``log`` ``extension`` event (state ``waiting``) per rank, in the run directory's ``wrapper.jsonl``.

torch's JIT builds (``torch.utils.cpp_extension.load``, which DeepSpeed's op builders call) take a ``FileBaton``: a
``lock`` file in the op's build directory, under ``TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions/<py…_…>``,
made with ``O_EXCL`` and removed when the build ends. A build killed meanwhile leaves it, and every later process
polls for it to go, forever and silent on torch 2.x (the "Using … as PyTorch extensions root" line is logged at INFO
by a logger left at WARNING). No log can show that wait; the wrapper sees it: no output and no event for
``QUIET_S`` (``ZERODOCTOR_LOCK_QUIET_S``), a lock older than that silence, and no build running in the lock's
directory (ninja or a compiler with it as their working directory, this job's or another's sharing the cache).
``signals/crashes.py`` counts the ranks it names, as it does a stack dump's (ZD712).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from zerodoctor.launch.processes import job_processes
from zerodoctor.probe.privacy import file_mode
from zerodoctor.sources.names import WRAPPER_EVENTS, rank_event_files

QUIET_S = float(os.environ.get("ZERODOCTOR_LOCK_QUIET_S", "120"))  # two minutes without a byte: no rank is starting
# What a build runs (ninja, then the compilers and the linker): where one runs in the lock's directory, it is held
BUILDERS = {"ninja", "c++", "g++", "gcc", "cc", "cc1plus", "clang", "clang++", "nvcc", "cicc", "ptxas", "ld", "hipcc"}


def extension_roots(env: dict[str, str]) -> list[Path]:
    """Where the job's JIT builds go: ``TORCH_EXTENSIONS_DIR`` (build directories right under it), else torch's
    default root, whose build directories sit one level down (``py311_cu121/fused_adam``)."""
    named = env.get("TORCH_EXTENSIONS_DIR")
    if named:
        return [Path(named)]
    return [Path(env.get("HOME") or Path.home()) / ".cache" / "torch_extensions"]


class BuildLockWatch:
    """Looks at a running job every ``poll_s``; once it finds the stale lock, writes its events once."""

    def __init__(self, run_dir: Path, run_id: str, env: dict[str, str], quiet_s: float = QUIET_S) -> None:
        self.run_dir, self.run_id, self.quiet_s = run_dir, run_id, quiet_s
        self.roots = extension_roots(env)
        self.poll_s = max(0.5, min(quiet_s / 4, 10.0))
        self.said: set[Path] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.look(time.time())

    def look(self, now: float) -> list[Path]:
        """The stale locks found at ``now`` (and written down, once each)."""
        last = self._last_output()
        if last is None or now - last < self.quiet_s:
            return []
        stale = [lock for lock in self._locks() if lock not in self.said and _mtime(lock) <= last]
        stale = [lock for lock in stale if not _building_in(lock.parent)]
        if not stale:
            return []
        for lock in stale:
            self._write(lock, now, now - last, now - _mtime(lock))
            self.said.add(lock)
        return stale

    def _last_output(self) -> float | None:
        """When the job last wrote: its console, or a rank's events."""
        times = [_mtime(p) for p in [self.run_dir / "console.log", *rank_event_files(self.run_dir)] if p.exists()]
        return max(times, default=None)

    def _locks(self) -> list[Path]:
        found: list[Path] = []
        for root in self.roots:
            found += [*root.glob("*/lock"), *root.glob("*/*/lock")]
        return sorted(p for p in found if p.is_file())

    def _ranks(self) -> list[int]:
        """The job's ranks, from the RANK their launcher gave them; rank 0 alone where none has one."""
        ranks: set[int] = set()
        for pid in job_processes(self.run_dir):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            ranks.update(int(e[5:]) for e in environ if e.startswith(b"RANK=") and e[5:].isdigit())
        return sorted(ranks) or [0]

    def _write(self, lock: Path, now: float, quiet_s: float, age_s: float) -> None:
        from zerodoctor import events

        message = (f"no output for {quiet_s:.0f} s while {lock}, left {age_s:.0f} s ago, is held by no build: "
                   "waiting on a stale JIT build lock")
        data = {"state": "waiting", "lock": str(lock), "quiet_s": round(quiet_s, 1), "lock_age_s": round(age_s, 1)}
        lines = [json.dumps(events.new("log", t=now, run=self.run_id, rank=rank, what="extension", level="ERROR",
                                       source="run", message=message, data=data)) for rank in self._ranks()]
        fd = os.open(self.run_dir / WRAPPER_EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, file_mode(self.run_dir))
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def _building_in(directory: Path) -> bool:
    """Whether a build runs in ``directory``: torch runs ninja there (``cwd=build_directory``) and the compilers
    inherit it, whichever job (this one, or another sharing the cache) started them."""
    try:
        entries = os.listdir("/proc")
        target = directory.resolve()
    except OSError:
        return False
    for pid in entries:
        if not pid.isdigit():
            continue
        try:
            if Path(os.readlink(f"/proc/{pid}/cwd")) != target:
                continue
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:  # gone meanwhile, or another user's
            continue
        if os.path.basename(argv0) in BUILDERS:
            return True
    return False


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
