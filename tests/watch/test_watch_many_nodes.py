"""Many nodes, one PostgreSQL store: one watcher per node, the ranks of one job merged into one run,
the single-writer rule held by the database (not the URL's spelling), watchers started together,
each finding sent by one of them."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url

from tests.conftest import NO_PG, PG_URL, ROOT, run_cli
from tests.watch.conftest import (
    ENV,
    Node,
    append,
    start_watch,
    step_line,
    stalled_run,
    stop,
    stored_steps,
    two_nodes,
    wait_for,
)
from tests.watch.test_watch_daemon import (
    KILLED_WHILE_WRITING_S,
    assert_every_line_stored_once,
    kill_repeatedly,
    start_writer,
    status_json,
    stored_count,
    written,
)
from zerodoctor.pipeline import Pipeline, expand_inputs
from zerodoctor.store import findings as stored_findings
from zerodoctor.store import nodes
from zerodoctor.store.db import open_engine
from zerodoctor.store.ingest import Ingestor
from zerodoctor.store.schema import deliveries, files
from zerodoctor.watch.daemon import Watcher
from zerodoctor.watch.lock import writer_lock
from zerodoctor.watch.notify import deliver_pending, enrol

pytestmark = pytest.mark.skipif(not PG_URL, reason=NO_PG)


@pytest.mark.parametrize("same_path", [False, True], ids=["own-paths", "same-local-path"])
def test_two_nodes_one_job_survive_6_sigkills_each_with_none_lost_or_duplicated(tmp_path, pg_url, same_path):
    """Node A holds ranks 0-3 of run "job" in its run directory, node B ranks 4-7 in its own: at a path of
    its own, or at the same local path on each node's disk (``/local/runs/job`` on both, the usual layout).
    Each node's watcher is killed 6 times while the ranks write, then both run at once to the end; the store
    holds one run of 8 ranks, every line once, each file's offset at its end on its own node."""
    nodes = two_nodes(tmp_path, same_path=same_path)
    for node in nodes:  # before any watcher starts: a watcher faster than the writer's mkdir exits 2, rightly
        (node.disk / "job").mkdir()
    writers = [start_writer(node.disk / "job", 4, 1500, KILLED_WHILE_WRITING_S, first_rank=4 * i)
               for i, node in enumerate(nodes)]
    stored: list[list[int]] = [[], []]

    def run_node(i: int) -> None:
        stored[i] = kill_repeatedly(nodes[i].local, pg_url, 6, random.Random(i), total=8 * 1500,
                                    start=nodes[i].watch)

    threads = [threading.Thread(target=run_node, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        for w in writers:
            assert w.wait(timeout=2 * KILLED_WHILE_WRITING_S) == 0
    # six kills each (a thread that raised left fewer), at least one of them with part of the lines stored
    assert [len(n) for n in stored] == [6, 6] and all(any(0 < c < 8 * 1500 for c in n) for n in stored), stored
    # then both nodes' watchers at once, as they run for days, until every line is stored
    together = [node.watch("--db", pg_url, str(node.local)) for node in nodes]
    try:
        wait_for(lambda: any(w.poll() is not None for w in together) or (
            all(_holds_a_lock(pg_url, w.pid) for w in together) and stored_count(pg_url) == 8 * 1500), timeout=60)
    finally:
        ended = [stop(w) for w in together]
    assert [code for code, _, _ in ended] == [0, 0], [err for _, _, err in ended]

    lines = written(*(node.disk for node in nodes))
    assert len(lines) == 8 * 1500
    disks = {node.id: node for node in nodes}
    report = assert_every_line_stored_once(
        pg_url, lines, on_disk=lambda node, path: disks[node].disk / Path(path).relative_to(disks[node].local))
    (run,) = report["runs"]
    assert run["run"] == "job" and len(run["files"]) == 8


def test_two_nodes_console_logs_at_the_same_local_path_are_each_read_once(tmp_path, pg_url, rules):
    """No probe: each node's wrapper keeps the job's console in ``/local/runs/job/console.log`` on its own
    disk, one path, two files. Both nodes' watchers read their own log as it grows (two passes each, taking
    turns): each log's lines are stored once, under its node, as a watcher reading that log alone stores them."""
    # consoles of real DeepSpeed runs (samples/record.py)
    logs = [ROOT / "samples" / "fp16-static-65536" / "console.log", ROOT / "samples" / "fp16-min-scale" / "console.log"]
    nodes = two_nodes(tmp_path, same_path=True)
    alone = [tmp_path / f"alone-{node.id}" / "runs" for node in nodes]
    halves = []
    for log in logs:
        lines = log.read_bytes().splitlines(keepends=True)
        halves.append((lines[:len(lines) // 2], lines[len(lines) // 2:]))
    for half in range(2):
        for log, node, runs in zip(halves, nodes, alone):
            for root in (node.disk, runs):
                (root / "job").mkdir(parents=True, exist_ok=True)
                with open(root / "job" / "console.log", "ab") as f:
                    f.writelines(log[half])
            watched = node.run("watch", "--once", "-q", "--db", pg_url, str(node.local))
            assert watched.returncode == 0, watched.stderr
            watcher = Watcher(open_engine(runs / "zerodoctor.db"), [runs], rules, lambda finding, config, change: None)
            watcher.once()
            watcher.engine.dispose()
    each = [stored_count(runs / "zerodoctor.db") for runs in alone]
    assert min(each) > 0  # the logs were read
    # the events of both logs, each once (a row shared by the two nodes read each log again from its start)
    assert stored_count(pg_url) == sum(each)
    expected = {node.id: _file_rows(f"sqlite:///{runs / 'zerodoctor.db'}") for node, runs in zip(nodes, alone)}
    stored = _file_rows(pg_url)
    assert sorted(stored) == sorted((node.id, str(node.local / "job" / "console.log"), events, offset)
                                    for node in nodes for _, _, events, offset in expected[node.id])
    assert [node.disk.joinpath("job", "console.log").stat().st_size for node in nodes] == [
        offset for _, _, _, offset in sorted(stored)]
    (run,) = status_json(pg_url)["runs"]
    assert run["run"] == "job" and len(run["files"]) == 2
    assert sorted(f["node"] for f in run["files"]) == sorted(node.id for node in nodes)
    # status's text names each node's file of the one path apart (it printed two identical lines)
    shown = run_cli("status", "--db", pg_url, timeout=60).stdout.splitlines()
    files = [line for line in shown if "console.log" in line]
    assert len(files) == 2 and len(set(files)) == 2 and all(f"on node {n.id}" in "".join(files) for n in nodes)


def _holds_a_lock(pg_url: str, pid: int) -> bool:
    """The watcher ``pid`` holds the advisory lock of a run directory (its first look is done)."""
    engine = open_engine(pg_url)
    try:
        with engine.connect() as conn:
            return bool(conn.execute(text(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = :me"),
                {"me": f"zerodoctor watch pid {pid} on {socket.gethostname()}"[:63]}).scalar())
    finally:
        engine.dispose()


def _file_rows(url: str) -> list[tuple]:
    """(node, path, events, offset) of every file the store holds."""
    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(select(files.c.node, files.c.path, files.c.events, files.c.offset))]
    finally:
        engine.dispose()


def test_a_run_directory_is_its_nodes_and_a_network_filesystems_every_nodes(tmp_path, pg_url, monkeypatch):
    """``/local/runs/job`` on two nodes is two directories, each node's watcher writes its own; a directory
    on a network filesystem is one that every node sees, and a second node's watcher is refused it."""
    local, shared = tmp_path / "local" / "job", tmp_path / "nfs" / "job"
    for run_dir in (local, shared):
        run_dir.mkdir(parents=True)
    table = tmp_path / "mounts"
    table.write_text(f"dev0 / ext4 rw 0 0\nserver:/export {tmp_path / 'nfs'} nfs4 rw 0 0\n")
    monkeypatch.setattr(nodes, "MOUNTS", table)
    nodes._on_network_filesystem.cache_clear()
    engine = open_engine(pg_url)
    try:
        with writer_lock(engine) as node_a, writer_lock(engine) as node_b:
            monkeypatch.setenv(nodes.NODE_ENV, "node-a")
            assert (node_a.claim(local), node_a.claim(shared)) == (None, None)
            monkeypatch.setenv(nodes.NODE_ENV, "node-b")
            assert node_b.claim(local) is None
            assert f"pid {os.getpid()}" in node_b.claim(shared)
    finally:
        engine.dispose()
        nodes._on_network_filesystem.cache_clear()


def test_localhost_and_127_0_0_1_are_one_writer(tmp_path, pg_url):
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 50))
    url = make_url(pg_url)
    assert url.host == "localhost"
    same_db = url.set(host="127.0.0.1").render_as_string(hide_password=False)
    first = start_watch("--db", pg_url, str(runs))
    try:
        wait_for(lambda: stored_count(pg_url) == 49, timeout=30)
        for extra in ((), ("--once",)):
            second = run_cli("watch", *extra, "--db", same_db, str(runs), timeout=30)
            assert second.returncode == 2
            assert f"pid {first.pid}" in second.stderr and "already writing" in second.stderr
            assert url.password not in second.stderr and "Traceback" not in second.stderr
            assert [line for line in second.stderr.splitlines() if "error" in line] == [
                line for line in second.stderr.splitlines() if "already writing" in line]
        assert stored_count(pg_url) == 49
    finally:
        code, _, err = stop(first)
    assert code == 0, err


def test_watchers_started_together_never_crash(tmp_path, pg_url):
    """Six nodes' watchers start at the same moment on a fresh store: one creates the tables, all
    create the same run and its findings' rows, none fails."""
    roots = [tmp_path / f"node-{i}" / "runs" for i in range(6)]
    for i, runs in enumerate(roots):
        append(runs / "job" / f"rank-{i}.jsonl", "job", i, range(1, 200))
    procs = [subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", "--once", "-q", "--db", pg_url, str(r)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV) for r in roots]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert [code for code, _ in results] == [0] * 6, results
    (run,) = status_json(pg_url)["runs"]
    assert run["run"] == "job" and sum(f["events"] for f in run["files"]) == 6 * 199


def test_a_run_directory_another_node_writes_is_skipped_until_it_is_free(tmp_path, pg_url):
    """The lock is per run directory: a watcher whose root holds one run directory another watcher
    already writes starts (it was not there at start), skips that directory, and takes it once free."""
    runs = tmp_path / "runs"
    append(runs / "a" / "rank-0.jsonl", "a", 0, range(1, 11))
    first = start_watch("--db", pg_url, str(runs / "a"))
    try:
        wait_for(lambda: stored_count(pg_url) == 10, timeout=30)
        append(runs / "b" / "rank-0.jsonl", "b", 0, range(1, 6))
        second = start_watch("--db", pg_url, str(runs / "b"))
        wait_for(lambda: stored_count(pg_url) == 15, timeout=30)
        code, _, err = stop(second)
        assert code == 0, err
    finally:
        code, _, err = stop(first)
    assert code == 0, err
    rerun = run_cli("watch", "--once", "-q", "--db", pg_url, str(runs), timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert stored_count(pg_url) == 15


class SlowEndpoint:
    """A notifier whose send takes a while, as a webhook does; counts what it was asked to send."""

    name = "slow"

    def __init__(self, sent: list[str]) -> None:
        self.sent = sent

    def send(self, finding: dict) -> None:
        time.sleep(0.5)
        self.sent.append(finding["rule"])


def test_two_nodes_send_each_finding_once(pg_url):
    """Both nodes' watchers judge the job and see its finding pending; one of them sends it."""
    engines = [open_engine(pg_url), open_engine(pg_url)]
    try:
        sent: list[str] = []
        enrol(engines[0], [SlowEndpoint(sent)])  # the notifier was there before the finding: it is to send it
        with engines[0].begin() as conn:
            run_id = Ingestor().run_id(conn, "job")
            stored_findings.record(conn, run_id, [{"rule": "ZD201", "severity": "error"}], time.time())
        nodes = [threading.Thread(target=deliver_pending, args=(engine, [SlowEndpoint(sent)])) for engine in engines]
        for t in nodes:
            t.start()
        for t in nodes:
            t.join(timeout=30)
        assert sent == ["ZD201"]
        with engines[0].connect() as conn:
            assert conn.execute(select(func.count()).select_from(deliveries)).scalar() == 1
        assert [deliver_pending(engine, [SlowEndpoint(sent)]) for engine in engines] == [(0, 0), (0, 0)]
    finally:
        for engine in engines:
            engine.dispose()


def test_diagnose_db_on_one_node_judges_the_whole_job(tmp_path, pg_url, rules):
    """Node B's watcher stored ranks 2-3; ``diagnose --db`` reads node A's ranks 0-1 and judges all four."""
    for node, ranks in (("a", (0, 1)), ("b", (2, 3))):
        for rank in ranks:
            append(tmp_path / node / "runs" / "job" / f"rank-{rank}.jsonl", "job", rank, range(1, 51))
    watched = run_cli("watch", "--once", "-q", "--db", pg_url, str(tmp_path / "b" / "runs"), timeout=60)
    assert watched.returncode == 0, watched.stderr
    engine = open_engine(pg_url)
    try:
        pipeline = Pipeline(engine, rules)
        pipeline.ingest(expand_inputs([tmp_path / "a" / "runs" / "job"]))
        judged = pipeline.judge("job")
    finally:
        engine.dispose()
    assert (judged.values["run.ranks_seen"], judged.values["run.steps"]) == (4, 50)
    assert {f["path"] for r in status_json(pg_url)["runs"] for f in r["files"]} == {
        str(tmp_path / node / "runs" / "job" / f"rank-{rank}.jsonl") for node, rank in
        (("a", 0), ("a", 1), ("b", 2), ("b", 3))}


def test_a_watcher_whose_lock_connection_is_cut_takes_its_locks_again_and_goes_on(tmp_path, pg_url):
    """The server ends the session holding the locks (a restart, a network cut): the watcher takes them
    again on a new session, reads its offsets again from the store and stores every later line once
    (before: exit 2, 'start it again'). ``test_watch_store_away.py``: the same when another watcher took one."""
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 20))
    watch = start_watch("--db", pg_url, str(runs))
    try:
        wait_for(lambda: stored_count(pg_url) == 19, timeout=30)
        assert cut_lock_session(pg_url, watch.pid) == [(True,)]
        append(runs / "r" / "rank-0.jsonl", "r", 0, range(20, 40))
        wait_for(lambda: stored_count(pg_url) == 39, timeout=30)
    finally:
        code, _, err = stop(watch)
    assert code == 0, err
    assert "took this watcher's run directories again" in err
    assert make_url(pg_url).password not in err
    assert sorted(s for _, _, s in stored_steps(pg_url)) == list(range(1, 40))


def cut_lock_session(pg_url: str, pid: int) -> list:
    """End the server session where the watcher ``pid`` holds its locks, as a restart or a network cut would."""
    engine = open_engine(pg_url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                     "WHERE application_name = :me"),
                                {"me": f"zerodoctor watch pid {pid} on {socket.gethostname()}"[:63]}).all()
    finally:
        engine.dispose()


def _session_holding(pg_url: str, run_dir, name: str):
    """A server session named ``name`` holding ``run_dir``'s lock, as a watcher's does."""
    from zerodoctor.watch.lock import lock_key

    engine = open_engine(pg_url)
    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    conn.execute(text("SELECT set_config('application_name', :me, false)"), {"me": name})
    assert conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": lock_key(run_dir)}).scalar()
    return engine, conn


def test_a_dead_watchers_lock_still_held_by_its_session_is_waited_for(tmp_path, pg_url):
    """A watcher SIGKILLed mid-query keeps its lock until the server notices: its successor waits, then writes."""
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 20))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid of this host no process has any more
    holder = f"zerodoctor watch pid {gone.pid} on {socket.gethostname()}"[:63]
    engine, conn = _session_holding(pg_url, runs / "r", holder)
    threading.Timer(1.5, conn.invalidate).start()  # its socket closes: the server drops the lock
    try:
        started = time.monotonic()
        once = run_cli("watch", "--once", "-q", "--db", pg_url, str(runs), timeout=60)
        assert once.returncode == 0, once.stderr
        assert time.monotonic() - started > 1.5
        assert stored_count(pg_url) == 19
    finally:
        engine.dispose()


def test_a_live_watchers_lock_is_not_waited_for(tmp_path, pg_url):
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 20))
    holder = f"zerodoctor watch pid {os.getpid()} on {socket.gethostname()}"[:63]
    engine, conn = _session_holding(pg_url, runs / "r", holder)
    try:
        once = run_cli("watch", "--once", "-q", "--db", pg_url, str(runs), timeout=60)
        assert once.returncode == 2 and f"pid {os.getpid()}" in once.stderr, once.stderr
    finally:
        conn.close()
        engine.dispose()


def _judge_of(pg_url: str, run: str) -> int | None:
    """The pid of the watcher holding ``run``'s judge lock in this store, from its session's name; None if none."""
    from zerodoctor.watch.lock import judge_key

    engine = open_engine(pg_url)
    try:
        with engine.connect() as conn:
            key = judge_key(conn.execute(text("SELECT current_schema()")).scalar(), run)
            holder = conn.execute(text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :hi AND l.objid = :lo "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
                {"hi": key >> 32, "lo": key & 0xFFFF_FFFF}).scalar()
    finally:
        engine.dispose()
    return int(holder.split()[3]) if holder else None  # "zerodoctor watch pid N on HOST"


def _announced(pg_url: str, rule: str) -> bool:
    engine = open_engine(pg_url)
    try:
        with engine.connect() as conn:
            return bool(conn.execute(text("SELECT count(*) FROM findings WHERE rule = :r AND notified"),
                                     {"r": rule}).scalar())
    finally:
        engine.dispose()


def test_four_nodes_judge_their_run_once_and_the_judge_fails_over_when_killed(tmp_path, pg_url):
    """Four nodes of one job, two ranks each, each node's watcher live into one store. One watcher judges
    the run for all (before, each of the four judged the whole run at every pass and each printed its
    findings): only it takes the run's judge lock and says the run's state. SIGKILLed, its lock goes with
    its session and a survivor takes the run over; a NaN then written on a rank of another node is
    announced once, across the three survivors."""
    nodes = [Node(f"node-{i}", tmp_path / f"node-{i}" / "runs", tmp_path / f"node-{i}" / "runs") for i in range(4)]
    for i, node in enumerate(nodes):
        for rank in (2 * i, 2 * i + 1):
            append(node.disk / "job" / f"rank-{rank}.jsonl", "job", rank, range(1, 21))
    watchers = [node.watch("--db", pg_url, str(node.disk)) for node in nodes]
    pids = [w.pid for w in watchers]
    killed = None
    try:
        wait_for(lambda: stored_count(pg_url) == 8 * 20, timeout=60)
        judge = wait_for(lambda: _judge_of(pg_url, "job"), timeout=30)
        for step in range(21, 31):  # every node keeps writing: every watcher stores, one judges
            for i, node in enumerate(nodes):
                for rank in (2 * i, 2 * i + 1):
                    append(node.disk / "job" / f"rank-{rank}.jsonl", "job", rank, [step])
            time.sleep(0.1)
        wait_for(lambda: stored_count(pg_url) == 8 * 30, timeout=60)
        time.sleep(2.5)  # the others ask again for the judge lock (every 2 s): still the judge's
        assert _judge_of(pg_url, "job") == judge
        killed = pids.index(judge)
        watchers[killed].kill()
        watchers[killed].wait(timeout=10)
        alive = (killed + 1) % 4
        with open(nodes[alive].disk / "job" / f"rank-{2 * alive}.jsonl", "a") as f:
            f.write(step_line("job", 2 * alive, 31, loss=float("nan")))
        successor = wait_for(lambda: _judge_of(pg_url, "job") not in (None, judge) and _judge_of(pg_url, "job"),
                             timeout=30)
        wait_for(lambda: _announced(pg_url, "ZD204"), timeout=30)
        time.sleep(2.5)  # more passes of every survivor: none says it again
    finally:
        # the judge last: one stopped before the others could hand the run to one of them
        order = sorted(range(4), key=lambda i: _judge_of(pg_url, "job") == pids[i])
        stopped = {i: stop(watchers[i]) if i != killed else (watchers[i].returncode, *watchers[i].communicate())
                   for i in order}
        ended = [stopped[i] for i in range(4)]
    assert successor in pids
    assert [code for i, (code, _, _) in enumerate(ended) if i != killed] == [0, 0, 0], [e for _, _, e in ended]
    took = [err.count("judging run job for every watcher") for _, _, err in ended]
    said = [err.count("zerodoctor: run job:") for _, _, err in ended]
    # the killed judge and its successor each took the run once; the two others never judged it
    assert took == [1 if pid in (judge, successor) else 0 for pid in pids], took
    assert [bool(n) for n in said] == [bool(n) for n in took], said
    assert sum(out.count("ZD204") for _, out, _ in ended) == 1, [out for _, out, _ in ended]


def test_a_look_on_another_node_names_the_watcher_that_judges_the_run(tmp_path, pg_url):
    """Node A's watcher runs live and judges "job"; ``watch --once`` on node B stores B's ranks and leaves the
    judgement to A. It used to say nothing of the run at all (no finding, no word why): it names A's watcher,
    once, and where the findings are."""
    nodes = [Node(f"node-{i}", tmp_path / f"node-{i}" / "runs", tmp_path / f"node-{i}" / "runs") for i in range(2)]
    for i, node in enumerate(nodes):
        append(node.disk / "job" / f"rank-{i}.jsonl", "job", i, range(1, 21))
    live = nodes[0].watch("--db", pg_url, str(nodes[0].disk))
    try:
        assert wait_for(lambda: _judge_of(pg_url, "job"), timeout=30) == live.pid
        look = subprocess.run(nodes[1].command("watch", "--once", "--db", pg_url, str(nodes[1].disk)),
                              capture_output=True, text=True, env=nodes[1].env, timeout=60)
    finally:
        stop(live)
    assert look.returncode == 0, look.stderr
    assert stored_count(pg_url) == 2 * 20
    named = [line for line in look.stderr.splitlines() if "is judged by another watcher" in line]
    assert named == [f"zerodoctor: run job is judged by another watcher (pid {live.pid} on {socket.gethostname()}), "
                     "which holds its judge lock: it says the run's findings, and 'zerodoctor status' shows them "
                     "from the store"], look.stderr


@pytest.mark.parametrize("skew_s", [0.0, 45.0, -45.0])
def test_a_dead_rank_on_another_node_is_named_whatever_its_clock_says(tmp_path, pg_url, rules, monkeypatch, skew_s):
    """Rank 0 on node A, whose watcher judges the run; rank 1 on node B, dead for 69 s (``stalled_run``), its events
    stamped ``skew_s`` off A's clock, B's watcher live. The judge measures rank 1's silence from when its file last
    grew on the store's clock (before: from the run's last event, which mixes the nodes' clocks; 45 s ahead,
    rank 1 looked 24 s silent, and the dead rank was not named)."""
    stalled_run(tmp_path / "made", 0.0, (0.0, skew_s))
    disks = {node: tmp_path / f"node-{node}" / "runs" for node in "ab"}
    for node, rank in (("a", 0), ("b", 1)):
        (disks[node] / "r").mkdir(parents=True)
        (tmp_path / "made" / "r" / f"rank-{rank}.jsonl").rename(disks[node] / "r" / f"rank-{rank}.jsonl")  # mtime kept
    monkeypatch.setenv(nodes.NODE_ENV, "node-a")
    announced: list = []
    engine = open_engine(pg_url)
    with writer_lock(engine) as lock:
        judge = Watcher(engine, [disks["a"]], rules, lambda finding, config, change: announced.append(finding),
                        lock=lock)
        try:
            judge.discover()
            judge.ingest()
            judge.judge(force=True)  # node A's watcher takes the run's judge lock first
            node_b = Node("node-b", disks["b"], disks["b"]).watch("--db", pg_url, str(disks["b"]))
            try:
                wait_for(lambda: stored_count(pg_url) == 2 * 12, timeout=60)
                announced.clear()
                judge.judge(force=True)
            finally:
                stop(node_b)
        finally:
            judge.close()
            engine.dispose()
    assert ("ZD705", [1]) in [(f.rule, f.ranks) for f in announced if f.rule.startswith("ZD7")], announced


def test_the_files_another_nodes_watcher_holds_are_watched_until_it_stops(tmp_path, pg_url, monkeypatch):
    """Another node's file tells its rank's silence (``files.grew_at``) only while that node's watcher holds its
    directory: a dead watcher's files go on growing on their disk, not in the store."""
    run_dir = tmp_path / "job"
    run_dir.mkdir()
    files = [("node-b", str(run_dir.resolve() / "rank-1.jsonl")), ("node-c", str(run_dir.resolve() / "rank-2.jsonl"))]
    engine, engine_b = open_engine(pg_url), open_engine(pg_url)
    try:
        with writer_lock(engine) as node_a:
            with writer_lock(engine_b) as node_b:
                monkeypatch.setenv(nodes.NODE_ENV, "node-b")
                assert node_b.claim(run_dir) is None
                assert node_a.watched(files) == {files[0]}  # node c's watcher holds nothing
            engine_b.dispose()  # node b's watcher gone: its session closed
            assert node_a.watched(files) == set()
    finally:
        engine.dispose()
        engine_b.dispose()
