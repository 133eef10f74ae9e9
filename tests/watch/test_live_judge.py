"""``run --fix-and-resume``'s live stop judges a running attempt through the watcher's own look (``Watcher.look``):
its clocks, its tails, its handling of a console log the rank files replace, so the stop and ``watch`` judge a
run alike. (The whole loop runs on real 2-rank DeepSpeed runs in tests/probe/test_fix_and_resume.py.)"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.watch.conftest import stalled_run, wait_for
from zerodoctor.resume.live import JUDGE_DB, LiveJudge
from zerodoctor.store.status import collect


@pytest.mark.parametrize("skew_s", [0.0, -45.0, 45.0])
def test_a_live_stop_names_a_hang_as_watch_does_whatever_the_ranks_clocks_say(tmp_path, skew_s) -> None:
    """Rank 1 dead in its data loader 69 s ago, rank 0 waiting in all_reduce: ZD705 names rank 1, as the watcher
    does at every skew (tests/watch/test_watch_timer.py). Before, the live stop judged with the wall clock as now
    and no rank's own silence: with the ranks' clocks 45 s behind, every rank looked silent, the hang went
    unnamed and the job ran on."""
    stalled_run(tmp_path / "runs", skew_s)
    job = subprocess.Popen(["sleep", "300"], start_new_session=True)  # the job's process group, to be stopped
    threading.Thread(target=job.wait, daemon=True).start()  # reaped as it ends, as the wrapper reaps its job
    said: list[str] = []
    judge = LiveJudge(tmp_path / "runs" / "r", "r", lambda f: f.rule == "ZD705", said.append, every_s=0.1, grace_s=5)
    try:
        judge.started(job.pid)
        wait_for(lambda: job.returncode is not None, timeout=30)
    finally:
        judge.stop()
        job.kill()
    assert judge.finding is not None and judge.finding.ranks == [1], said
    assert job.returncode == -signal.SIGTERM and said == [
        "ZD705 rank-heartbeat-stopped while the job runs: stopping it (SIGTERM, SIGKILL after 5 s)"]
    assert not list((tmp_path / "runs" / "r").glob(f"{JUDGE_DB}*"))


def test_a_console_log_the_rank_files_replace_is_dropped_by_the_live_stop_as_by_watch(tmp_path) -> None:
    """The wrapper writes console.log before the probe's rank files appear: the first looks read it, and once
    rank files are there its rows go (``Watcher._forget_replaced_sources``), or every step would count twice."""
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    shutil.copy(ROOT / "samples" / "healthy-zero2" / "console.log", run_dir / "console.log")  # a real run's
    judge = LiveJudge(run_dir, "r", lambda f: False, print)
    try:
        judge.look()
        stalled_run(tmp_path / "runs", 0.0)
        judge.look()
        with judge._watcher.engine.connect() as conn:
            files = sorted(Path(f.path).name for run in collect(conn) for f in run.files)
        assert files == ["rank-0.jsonl", "rank-1.jsonl"]
    finally:
        judge.stop()
