"""The store's server going away under a running ``watch`` is waited for, with backoff, never a crash:
a PostgreSQL restart (real ``pg_ctl restart``, twice, lines written across it) costs no line and stores
none twice (before: exit 3, or exit 2 'start it again'); a run directory another watcher took while
the locks were lost is still refused (exit 2, one line); ``--once`` ends in one line, exit 2."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.watch.conftest import ENV, append, stop, stored_steps, wait_for
from tests.watch.test_watch_many_nodes import cut_lock_session
from zerodoctor.store.db import open_engine
from zerodoctor.watch.lock import lock_key

PG_STOP = os.environ.get("ZERODOCTOR_TEST_PG_STOP", "")


def _watch(err: Path, *args: str) -> subprocess.Popen:
    """``watch`` with its log in a file, read while it runs."""
    return subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", *args], stdout=subprocess.DEVNULL,
                            stderr=open(err, "w"), text=True, env=ENV)


def _restart_server() -> None:
    data = re.search(r"-D (\S+)", PG_STOP)
    assert data, PG_STOP
    command = PG_STOP.replace("-m fast stop", f"-m fast -w -l {Path(data.group(1)).parent / 'server.log'} restart")
    subprocess.run(command, shell=True, check=True, capture_output=True, timeout=120)


@pytest.mark.skipif(" stop" not in PG_STOP, reason="needs ZERODOCTOR_TEST_PG_STOP (.ci/postgres) to restart the server")
def test_a_postgresql_restart_under_a_running_watch_costs_no_line(tmp_path: Path, pg_url: str) -> None:
    runs, err = tmp_path / "runs", tmp_path / "watch.err"
    log = runs / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 101))
    watch = _watch(err, "--db", pg_url, str(runs))
    try:
        wait_for(lambda: len(stored_steps(pg_url)) == 100, timeout=60)
        for restart in range(2):
            _restart_server()
            append(log, "r", 0, range(101 + 100 * restart, 201 + 100 * restart))
            wait_for(lambda: len(stored_steps(pg_url)) == 200 + 100 * restart, timeout=120)
    finally:
        code, _, _ = stop(watch)
    said = err.read_text()
    assert code == 0, said
    assert "the store is unreachable" in said or "took this watcher's run directories again" in said, said
    assert "Traceback" not in said and "internal error" not in said, said
    assert sorted(s for _, _, s in stored_steps(pg_url)) == list(range(1, 301))  # every line once


def test_a_run_directory_another_watcher_took_while_the_locks_were_lost_is_refused(tmp_path: Path,
                                                                                    pg_url: str) -> None:
    runs, err = tmp_path / "runs", tmp_path / "watch.err"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 20))
    watch = _watch(err, "--db", pg_url, str(runs))
    engine = open_engine(pg_url)
    try:
        wait_for(lambda: len(stored_steps(pg_url)) == 19, timeout=60)
        watch.send_signal(signal.SIGSTOP)  # frozen: the other session surely takes the lock first
        assert cut_lock_session(pg_url, watch.pid) == [(True,)]
        other = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        other.execute(text("SELECT set_config('application_name', 'zerodoctor watch pid 1 on elsewhere', false)"))
        assert other.execute(text("SELECT pg_advisory_lock(:k)"), {"k": lock_key(runs / "r")}).all()
        watch.send_signal(signal.SIGCONT)
        watch.wait(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        engine.dispose()
    said = err.read_text()
    assert watch.returncode == 2, said
    assert said.strip().splitlines()[-1].startswith("zerodoctor: error: another 'zerodoctor watch' "
                                                    "(pid 1 on elsewhere) is already writing"), said


def test_watch_once_with_a_store_that_went_away_is_one_line_exit_2(tmp_path: Path) -> None:
    """A server that is not there at all: one line, exit 2, the password masked (as for every --db)."""
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 5))
    url = "postgresql+psycopg://u:sekrit@127.0.0.1:9/none"
    done = subprocess.run([sys.executable, "-m", "zerodoctor", "watch", "--once", "--db", url, str(runs)],
                          capture_output=True, text=True, timeout=120, env=ENV)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "sekrit" not in done.stderr
