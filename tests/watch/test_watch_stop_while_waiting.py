"""SIGTERM while ``watch`` waits at startup for a dead watcher's lock (PostgreSQL keeps it until the
server notices the closed socket, ``watch/lock.py``): the watch ends at once, as any stop does."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from sqlalchemy import text

from tests.watch.conftest import append, start_watch, stop, wait_for
from tests.watch.test_watch_many_nodes import _session_holding
from zerodoctor.store.db import open_engine

PROMPT_S = 2.0


def _session_name(pid: int) -> str:
    return f"zerodoctor watch pid {pid} on {socket.gethostname()}"[:63]


def _asking_who_holds(pg_url: str, pid: int) -> bool:
    """The watcher ``pid`` found the lock taken and asked the server who holds it: it is in its wait."""
    engine = open_engine(pg_url)
    try:
        with engine.connect() as conn:
            return bool(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :me "
                                          "AND query LIKE '%pg_locks%'"), {"me": _session_name(pid)}).scalar())
    finally:
        engine.dispose()


def test_sigterm_while_waiting_for_a_dead_watchers_lock_stops_at_once(tmp_path, pg_url):
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 20))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid of this host no process has any more: its session's lock is waited for (10 s)
    engine, conn = _session_holding(pg_url, runs / "r", _session_name(gone.pid))
    try:
        watch = start_watch("--db", pg_url, str(runs))
        try:
            wait_for(lambda: _asking_who_holds(pg_url, watch.pid) or watch.poll() is not None)
            assert watch.poll() is None, watch.communicate()
        finally:
            sent = time.monotonic()
            code, out, err = stop(watch, signal.SIGTERM)
            took = time.monotonic() - sent
    finally:
        conn.close()
        engine.dispose()
    assert took < PROMPT_S, (took, err)
    assert code == 0, err
    assert "stopped; everything read is committed" in err
    assert "already writing" not in err and "Traceback" not in err
