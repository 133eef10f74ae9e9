"""A job silent on a stale JIT build lock is said to be stuck (issue 33, item 6): ``zerodoctor run`` notices the
silence and the lock no build holds (launch/build_lock.py), and ZD712 names it, where it was "nothing to judge".

The job is a real process waiting on a real lock: ``torch.utils.cpp_extension.load`` of a one-line op whose build
directory holds a ``lock`` left by a build killed earlier (bench/cure_rate.py's stale-lock fault touches one the
same way). torch 2.13's FileBaton polls for it to go and prints nothing. The quiet threshold is shortened to 3 s
(``ZERODOCTOR_LOCK_QUIET_S``; 120 s by default), and the job is stopped once the wrapper has written its event.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT, diagnose_json

WAITER = """
import torch.utils.cpp_extension as ext
print("loading the op", flush=True)
ext.load(name="toy", sources=[{source!r}])
print("loaded", flush=True)
"""


def _job(tmp_path: Path, lock_age_s: float) -> tuple[Path, subprocess.Popen]:
    source = tmp_path / "toy.cpp"
    source.write_text("int toy() { return 1; }\n")
    lock = tmp_path / "ext" / "toy" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    os.utime(lock, (time.time() - lock_age_s,) * 2)
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "ZERODOCTOR_LOCK_QUIET_S": "3"}
    job = subprocess.Popen([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp_path / "runs"), "--name",
                            "wait", "--", sys.executable, "-c", WAITER.format(source=str(source))],
                           env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return tmp_path / "runs" / "wait", job


def _stop(job: subprocess.Popen) -> None:
    job.send_signal(signal.SIGINT)  # forwarded to the job's process group
    job.wait(timeout=60)


def test_a_job_silent_on_a_stale_build_lock_is_stuck_not_nothing_to_judge(tmp_path: Path) -> None:
    run_dir, job = _job(tmp_path, lock_age_s=600)
    noted = run_dir / "wrapper.jsonl"
    try:
        deadline = time.monotonic() + 90
        while not noted.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        _stop(job)
    (event,) = [json.loads(line) for line in noted.read_text().splitlines()]
    assert event["what"] == "extension" and event["data"]["state"] == "waiting"
    assert event["data"]["lock"] == str(tmp_path / "ext" / "toy" / "lock") and event["data"]["quiet_s"] >= 3
    report = diagnose_json(run_dir)
    assert {Path(i["path"]).name for i in report["inputs"]} == {"console.log", "wrapper.jsonl"}  # read beside it
    finding = {f["rule"]: f for f in report["findings"]}["ZD712"]
    assert finding["severity"] == "error"
    assert f"waiting on {tmp_path / 'ext' / 'toy' / 'lock'}" in finding["message"], finding["message"]


def _stale_lock(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory whose console printed a line, beside a build lock ten minutes old."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lock = tmp_path / "ext" / "toy" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    os.utime(lock, (time.time() - 600,) * 2)
    (run_dir / "console.log").write_text("step 1\n")
    return run_dir, lock


def test_a_job_that_prints_is_not_waiting(tmp_path: Path) -> None:
    """The same lock beside a job that keeps printing: no event, however old the lock."""
    from zerodoctor.launch.build_lock import BuildLockWatch

    run_dir, lock = _stale_lock(tmp_path)
    watch = BuildLockWatch(run_dir, "r", {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}, quiet_s=3)
    assert watch.look(time.time()) == []  # printed just now
    assert watch.look(time.time() + 10) == [lock]  # ten seconds of silence: the lock is stale
    assert watch.look(time.time() + 20) == []  # said once


def test_a_lock_a_build_holds_is_not_stale(tmp_path: Path) -> None:
    """A ninja running in the lock's directory (torch runs it there: ``cwd=build_directory``), this job's or
    another's sharing the cache, holds the lock however long the job is silent. The "ninja" is a copy of sleep."""
    import shutil

    from zerodoctor.launch.build_lock import BuildLockWatch

    run_dir, lock = _stale_lock(tmp_path)
    ninja = tmp_path / "bin" / "ninja"
    ninja.parent.mkdir()
    shutil.copy(shutil.which("sleep") or "/bin/sleep", ninja)
    watch = BuildLockWatch(run_dir, "r", {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}, quiet_s=3)
    build = subprocess.Popen([str(ninja), "60"], cwd=lock.parent)
    try:
        time.sleep(0.5)
        assert watch.look(time.time() + 10) == []
    finally:
        build.kill()
        build.wait()
    assert watch.look(time.time() + 10) == [lock]
