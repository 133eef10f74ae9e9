"""Launch: the processes of one job, found by the run directory the wrapper put in their environment.

A signal to the job's process group reaches the launcher, not always its ranks: torchrun starts
each rank in a session of its own (``start_new_session``), forwards SIGTERM to them, and when it is
SIGKILLed leaves them running, still holding their GPUs and writing into the attempt it was told
to stop. Every process of the job was started with ``RUN_DIR_ENV`` in its environment
(``wrapper.child_env``), which ``/proc/<pid>/environ`` shows whatever the process did since, so
the job's processes are those that carry this run directory there (none where there is no /proc).
"""

from __future__ import annotations

import os
from pathlib import Path

from zerodoctor.probe import RUN_DIR_ENV


def job_processes(run_dir: Path) -> list[int]:
    """The pids started with ``run_dir`` as their run directory, this process left out."""
    marker = f"{RUN_DIR_ENV}={Path(run_dir).resolve()}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone meanwhile, or another user's
            continue
        if marker in environ.split(b"\0"):
            found.append(int(name))
    return sorted(found)


def signal_job(pgid: int, run_dir: Path, sig: int) -> bool:
    """``sig`` to the job's process group and to every process of the job outside it; False when none was left."""
    reached = False
    try:
        os.killpg(pgid, sig)
        reached = True
    except ProcessLookupError:
        pass
    for pid in job_processes(run_dir):
        try:
            os.kill(pid, sig)
            reached = True
        except ProcessLookupError:
            pass
    return reached
