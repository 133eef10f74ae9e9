"""A judgement that never ends costs its own run, not the daemon: it is set aside after its budget and
every other run goes on; SIGTERM ends ``watch`` in every state it can be in — judging, idle, sending.

Real ``watch`` subprocesses and real signals; the endless judgement is ``endless_judgement.py``'s
plain Python loop (before: SIGTERM was only a flag the loop never read again, the healthy run was
never judged, and a send in flight held the exit for a minute).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.watch.conftest import ENV, stop, stored_steps, wait_for
from tests.watch.test_watch_isolation import _write_run


def _watch(tmp_path: Path, *args: str, budget_s: float, **env: str) -> subprocess.Popen:
    env = {**ENV, "ZERODOCTOR_TEST_MARK": str(tmp_path / "judging-endless"),
           "ZERODOCTOR_TEST_BUDGET_S": str(budget_s), **env}
    return subprocess.Popen([sys.executable, "-m", "tests.watch.endless_judgement", "watch", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=Path(__file__).parents[2])


def _status(db: Path) -> dict:
    if not db.exists():
        return {}
    shown = run_cli("status", "--format", "json", "--db", str(db), timeout=60)
    assert shown.returncode == 0, shown.stderr
    return {r["run"]: r for r in json.loads(shown.stdout)["runs"]}


def test_an_endless_judgement_is_set_aside_after_its_budget_and_every_other_run_goes_on(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write_run(runs, "endless", {}, list(range(1, 51)))
    _write_run(runs, "healthy", {"min_loss_scale": 0.5}, list(range(1, 51)))  # ZD605 fires on it
    watch = _watch(tmp_path, str(runs), budget_s=1)
    try:
        wait_for(lambda: "set_aside" in _status(runs / "zerodoctor.db").get("endless", {}), timeout=60, every=0.5)
        by_run = _status(runs / "zerodoctor.db")
        assert "took more than 1 s" in by_run["endless"]["set_aside"], by_run["endless"]
        _write_run(runs, "healthy", {}, list(range(51, 101)))
        _write_run(runs, "endless", {}, list(range(51, 101)))
        wait_for(lambda: len(stored_steps(runs / "zerodoctor.db")) == 200, timeout=60)
    finally:
        code, out, err = stop(watch)
    assert code == 0, err
    assert "ZD605" in out  # the healthy run judged and announced
    assert sorted(s for r, _, s in stored_steps(runs / "zerodoctor.db") if r == "healthy") == list(range(1, 101))
    assert err.count("set aside") == 1, err


class _Silent:
    """A TCP endpoint that accepts and never answers: a webhook send blocks in its read."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.accepted = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}/hook"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.server.close()
        for conn in self.conns:
            conn.close()


@pytest.mark.parametrize("state", ["judging", "idle", "sending"])
def test_sigterm_ends_watch_in_every_state(tmp_path: Path, state: str) -> None:
    runs = tmp_path / "runs"
    _write_run(runs, "endless" if state == "judging" else "healthy", {"min_loss_scale": 0.5}, list(range(1, 51)))
    endpoint = _Silent()
    env = {"ZERODOCTOR_WEBHOOK_URL": endpoint.url, "ZERODOCTOR_WEBHOOK_TIMEOUT": "600",
           "ZERODOCTOR_WEBHOOK_DEADLINE": "600"} if state == "sending" else {}
    watch = _watch(tmp_path, str(runs), budget_s=0, **env)  # no budget: only the signal can end the judgement
    try:
        if state == "judging":
            wait_for(lambda: (tmp_path / "judging-endless").exists(), timeout=60)
        elif state == "idle":
            wait_for(lambda: len(stored_steps(runs / "zerodoctor.db")) == 50, timeout=60)
        else:
            assert endpoint.accepted.wait(60), stop(watch)
        code, _, err = stop(watch, signal.SIGTERM, timeout=20)  # before: the judgement and the send held it
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
        endpoint.close()
    assert code == 0, err
    assert "stopped; everything read is committed" in err
    assert len(stored_steps(runs / "zerodoctor.db")) == 50


def test_a_judgements_cost_leaves_out_the_time_it_waited_for_a_cpu() -> None:
    """The interval a run's judgement stretches to is four times its cost: on one core shared with a busy
    process, 0.3 s of work takes about 0.6 s of wall time, and its cost is the work, not the wait (64 watchers
    on 2 cores judged their run once every 6 s for 30 ms of work each)."""
    import os
    import time

    from zerodoctor.watch.budget import Cost

    core = min(os.sched_getaffinity(0))
    mine = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.2)  # the hog is on the core
        cost, wall = Cost(), time.monotonic()
        worked = time.thread_time()
        while time.thread_time() - worked < 0.3:
            pass
        wall = time.monotonic() - wall
    finally:
        os.sched_setaffinity(0, mine)
        hog.kill()
        hog.wait()
    assert wall > 0.5, f"the core was not shared ({wall:.2f} s of wall time for 0.3 s of work): the test proves nothing"
    assert cost.seconds() == pytest.approx(0.3, abs=0.1)
