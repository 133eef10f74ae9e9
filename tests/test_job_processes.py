"""The processes of a job: torchrun's ranks run in sessions of their own, so a SIGKILL to the job's process group
ends the launcher and leaves the ranks running; ``launch/processes.py`` finds them by the run directory in their
environment, and the live stop of ``run --fix-and-resume`` ends them too. Real torchrun, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from zerodoctor.launch.processes import job_processes, signal_job
from zerodoctor.probe import RUN_DIR_ENV
from zerodoctor.resume.live import LiveJudge
from zerodoctor.rulebook.finding import Finding

# a rank that ignores SIGTERM (as a script with a checkpoint-on-SIGTERM handler stuck in a collective would)
RANK = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(600)\n"


def _start_job(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    run_dir = (tmp_path / "run").resolve()
    run_dir.mkdir()
    (tmp_path / "rank.py").write_text(RANK)
    env = {**os.environ, RUN_DIR_ENV: str(run_dir)}
    launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                 "2", str(tmp_path / "rank.py")], env=env, process_group=0,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _until(lambda: len(job_processes(run_dir)) >= 3, "torchrun and its 2 ranks up")
    return launcher, run_dir


def _until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _ranks(run_dir: Path, launcher: subprocess.Popen) -> list[int]:
    return [pid for pid in job_processes(run_dir) if pid != launcher.pid]


def test_a_sigkill_to_the_group_leaves_torchruns_ranks_and_signal_job_ends_them(tmp_path: Path) -> None:
    launcher, run_dir = _start_job(tmp_path)
    ranks = _ranks(run_dir, launcher)
    try:
        assert len(ranks) == 2 and all(os.getpgid(pid) == pid for pid in ranks)  # each rank leads its own session
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        time.sleep(1.0)
        assert _ranks(run_dir, launcher) == ranks  # the launcher is gone, its ranks are not
        assert signal_job(launcher.pid, run_dir, signal.SIGKILL)
        _until(lambda: not job_processes(run_dir), "the orphaned ranks gone", timeout=30)
    finally:
        for pid in job_processes(run_dir):
            os.kill(pid, signal.SIGKILL)


def test_the_live_stop_kills_ranks_that_ignore_sigterm(tmp_path: Path) -> None:
    launcher, run_dir = _start_job(tmp_path)
    said: list[str] = []
    live = LiveJudge(run_dir, "job", lambda f: True, said.append, grace_s=3.0)
    live._pgid = launcher.pid  # what ``started`` records; the judging thread is not needed to stop the job
    hang = Finding("ZD701", "collective-hang", "hang", "error", "all ranks wait in all_reduce", "job")
    try:
        started = time.monotonic()
        live._terminate(hang)
        assert not job_processes(run_dir), "ranks left running after the live stop"
        assert 3.0 <= time.monotonic() - started < 30  # SIGTERM first; SIGKILL once the grace ran out
        assert said and "SIGKILL after 3 s" in said[0]
    finally:
        for pid in job_processes(run_dir):
            os.kill(pid, signal.SIGKILL)
        launcher.wait(timeout=30)
