"""Hostile run directories: nothing freezes the tail, nothing is read twice, nothing is lost quietly.

Real FIFOs, real symlinks, a real ``ulimit -n`` in a real subprocess: what someone with write
access to a shared ``runs/`` (or a busy filesystem) can put there.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
import pytest
from sqlalchemy import event

from tests.conftest import run_cli
from tests.watch.conftest import ENV, append, step_line, stored_steps
from zerodoctor.store.db import open_engine
from zerodoctor.watch.daemon import Watcher


def one_pass(watcher: Watcher) -> None:
    watcher.discover()
    while watcher.ingest():
        pass


def test_fifo_named_rank_file_is_skipped_not_opened_and_once_exits_2(tmp_path):
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 6))
    os.mkfifo(runs / "r" / "rank-1.jsonl")  # no writer: a blocking open() never returns
    proc = run_cli("watch", "--once", str(runs), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "rank-1.jsonl: not a regular file (a FIFO), not read; skipped" in proc.stderr
    assert "1 file(s) could not be read and were skipped" in proc.stderr
    assert sorted(stored_steps(runs / "zerodoctor.db")) == [("r", 0, s) for s in range(1, 6)]


def test_unreadable_file_costs_no_transaction_at_a_rescan_and_is_read_once_it_changes(tmp_path, make_watcher,
                                                                                     caplog):
    """A FIFO named like a rank file is reported once and then left alone: a rescan only stats it
    (it used to open a write transaction at every 5 s rescan to fail again), until the path
    changes: replaced by a regular file, it is read."""
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 4))
    fifo = runs / "r" / "rank-1.jsonl"
    os.mkfifo(fifo)
    watcher = make_watcher()
    transactions = []
    event.listen(watcher.engine, "begin", lambda conn: transactions.append(conn))
    with caplog.at_level(logging.ERROR, logger="zerodoctor.watch"):
        one_pass(watcher)
        before = len(transactions)
        for _ in range(3):
            watcher.discover()  # a rescan; nothing changed
    assert len(transactions) == before
    assert [r.getMessage() for r in caplog.records] == [f"{fifo}: not a regular file (a FIFO), not read; skipped"]
    assert list(watcher.skipped) == [fifo]

    fifo.unlink()
    append(fifo, "r", 1, range(1, 4))
    one_pass(watcher)
    assert not watcher.skipped
    assert sorted(stored_steps(runs / "zerodoctor.db")) == [("r", rank, s) for rank in (0, 1) for s in range(1, 4)]


def test_fifo_console_log_makes_diagnose_exit_2_not_hang(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    os.mkfifo(run_dir / "console.log")
    proc = run_cli("diagnose", str(run_dir), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"zerodoctor: error: {run_dir / 'console.log'}: not a regular file (a FIFO), not read"]
    named = run_cli("diagnose", str(run_dir / "console.log"), timeout=60)  # the FIFO itself as the argument
    assert (named.returncode, named.stderr) == (2, proc.stderr)


def test_symlink_loop_in_run_dir_is_one_clear_error(tmp_path):
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 4))
    (runs / "r" / "rank-1.jsonl").symlink_to("rank-1.jsonl")
    loop = f"{runs / 'r' / 'rank-1.jsonl'}: a symlink loop (too many levels of symbolic links)"

    diagnosed = run_cli("diagnose", str(runs / "r"), timeout=60)
    assert diagnosed.returncode == 2
    assert diagnosed.stderr.strip().splitlines() == [f"zerodoctor: error: {loop}"]

    watched = run_cli("watch", "--once", str(runs), timeout=60)
    assert watched.returncode == 2, watched.stderr
    assert f"{loop}; skipped" in watched.stderr
    assert len(stored_steps(runs / "zerodoctor.db")) == 3


def test_run_dir_reachable_twice_is_read_once(tmp_path, rules):
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 11))
    (runs / "alias").symlink_to("r", target_is_directory=True)
    # A root given twice under two spellings, and a run directory with a symlink alias beside it.
    watcher = Watcher(open_engine(tmp_path / "z.db"), [runs, runs / "r" / ".." / "r", runs / "alias"], rules,
                      lambda finding, config, change: None)
    try:
        one_pass(watcher)
    finally:
        watcher.close()
        watcher.engine.dispose()
    assert sorted(stored_steps(tmp_path / "z.db")) == [("r", 0, s) for s in range(1, 11)]

    proc = run_cli("watch", "--once", str(runs), str(runs / ".." / "runs"), "--db", str(tmp_path / "cli.db"))
    assert proc.returncode == 0, proc.stderr
    assert len(stored_steps(tmp_path / "cli.db")) == 10


def _limit_fds(soft: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, soft))


def test_ten_thousand_rank_files_under_ulimit_1024_are_all_read(tmp_path):
    """Scaled to 2,000 files under ``ulimit -n 512`` (CI time): the old tail held a handle per
    file and lost every file past ~500, as it lost 8,985 of 10,000 under 1,024."""
    run_dir = tmp_path / "runs" / "wide"
    run_dir.mkdir(parents=True)
    ranks = 2000
    for rank in range(ranks):
        (run_dir / f"rank-{rank}.jsonl").write_text(step_line("wide", rank, 1) + step_line("wide", rank, 2))
    proc = subprocess.run([sys.executable, "-m", "zerodoctor", "watch", "--once", "-q", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=600, env=ENV, preexec_fn=lambda: _limit_fds(512))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = stored_steps(tmp_path / "runs" / "zerodoctor.db")
    assert len(rows) == len(set(rows)) == 2 * ranks


def test_recreated_file_with_reused_inode_is_read_from_start(tmp_path, make_watcher):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    first = make_watcher()
    one_pass(first)
    first.close()
    inode = log.stat().st_ino
    log.unlink()  # while watch is down, the job is restarted: a new file at the same path
    append(log, "r", 0, range(101, 131))  # longer than the old one: no sign of truncation either
    if log.stat().st_ino != inode:
        pytest.skip("this filesystem did not reuse the inode (ext4 does, at once)")
    one_pass(make_watcher())
    assert sorted(stored_steps(tmp_path / "runs" / "zerodoctor.db")) == (
        [("r", 0, s) for s in range(1, 11)] + [("r", 0, s) for s in range(101, 131)])


def test_diagnose_db_leaves_an_unterminated_last_line_for_the_next_read(tmp_path):
    log = tmp_path / "growing.jsonl"
    whole = step_line("g", 0, 6)
    log.write_text("".join(step_line("g", 0, s) for s in range(1, 6)) + whole[:25])  # the writer is mid-line
    db = str(tmp_path / "kept.db")

    def inputs() -> dict:
        proc = run_cli("diagnose", "--db", db, "--format", "json", "--fail-on", "never", str(log))
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["inputs"][0]

    assert (inputs()["events"], inputs()["quarantined"]) == (5, 0)  # twice: nothing is read twice either
    with open(log, "a") as f:
        f.write(whole[25:] + step_line("g", 0, 7))
    assert (inputs()["events"], inputs()["quarantined"]) == (7, 0)


def test_diagnose_without_db_still_reads_a_final_unterminated_line(tmp_path):
    log = tmp_path / "finished.jsonl"
    log.write_text("".join(step_line("f", 0, s) for s in range(1, 4)) + step_line("f", 0, 4).rstrip("\n"))
    proc = run_cli("diagnose", "--format", "json", "--fail-on", "never", str(log))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["inputs"][0]["events"] == 4


def test_diagnose_reads_every_file_to_its_unterminated_end_under_a_low_ulimit(tmp_path):
    """More rank files than handles: a file whose handle was closed is reopened for its final line."""
    run_dir = tmp_path / "wide"
    run_dir.mkdir()
    ranks = 400  # ``ulimit -n 128`` keeps 32 handles open
    for rank in range(ranks):
        (run_dir / f"rank-{rank}.jsonl").write_text(step_line("wide", rank, 1) + step_line("wide", rank, 2).rstrip())
    proc = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                           str(run_dir)], capture_output=True, text=True, timeout=300, env=ENV,
                          preexec_fn=lambda: _limit_fds(128))
    assert proc.returncode == 0, proc.stderr[-2000:]
    inputs = json.loads(proc.stdout)["inputs"]
    assert len(inputs) == ranks and {(i["events"], i["quarantined"]) for i in inputs} == {(2, 0)}
