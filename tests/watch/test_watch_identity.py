"""File identity end to end: a file is its node, device, inode and first bytes, never its path.

A renamed or moved run directory is the same run at the same offsets (before: every line stored
again, 1000 of 1000, live or while watch was down); a file away from its path is missing for a
grace period, not gone at once; a file rewritten in place and grown past the old offset between two
polls is read again from its start (before: read from the old offset, the lines before it lost and
a half line quarantined); rotated generations left between two reads are read whole (before: lost).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tests.watch.conftest import ENV, append, start_watch, stop, stored_steps, wait_for
from tests.watch.test_watch_rotation import expect, one_pass
from zerodoctor.pipeline import tail as tail_module
from zerodoctor.store.schema import files, quarantine

LINES = 1000


@pytest.mark.parametrize("order", ["ingest-first", "discover-first"])
def test_a_run_directory_renamed_while_watched_is_the_same_run_at_the_same_offsets(tmp_path, make_watcher, order):
    runs = tmp_path / "runs"
    append(runs / "exp" / "rank-0.jsonl", "exp", 0, range(1, LINES + 1))
    watcher = make_watcher()
    one_pass(watcher)
    (runs / "exp").rename(runs / "exp-failed")
    append(runs / "exp-failed" / "rank-0.jsonl", "exp", 0, range(LINES + 1, LINES + 11))
    if order == "ingest-first":  # the old path's tail sees it missing before the rescan finds the new one
        watcher.ingest()
    one_pass(watcher)
    expect(runs / "zerodoctor.db", "exp", range(1, LINES + 11))
    assert list(watcher.tails) == [(runs / "exp-failed" / "rank-0.jsonl").resolve()]
    with watcher.engine.connect() as conn:
        assert conn.execute(select(files.c.path)).scalars().all() == [str(runs.resolve() / "exp-failed/rank-0.jsonl")]


def test_a_run_directory_moved_while_watch_is_down_reads_on_from_its_offset(tmp_path, make_watcher, caplog):
    runs = tmp_path / "runs"
    append(runs / "exp" / "rank-0.jsonl", "exp", 0, range(1, LINES + 1))
    first = make_watcher()
    one_pass(first)
    first.close()
    (runs / "archive").mkdir()
    shutil.move(runs / "exp", runs / "archive" / "exp")  # within the root, one level down: a root of its own
    append(runs / "archive" / "exp" / "rank-0.jsonl", "exp", 0, range(LINES + 1, LINES + 6))
    again = make_watcher()
    again.roots.append(runs / "archive")
    with caplog.at_level(logging.INFO):
        one_pass(again)
    expect(runs / "zerodoctor.db", "exp", range(1, LINES + 6))
    assert "exp/rank-0.jsonl moved (the same file" in caplog.text


def test_a_file_away_for_a_while_is_missing_then_reads_on_and_gone_only_after_the_grace(tmp_path, make_watcher,
                                                                                       monkeypatch):
    runs = tmp_path / "runs"
    append(runs / "exp" / "rank-0.jsonl", "exp", 0, range(1, LINES + 1))
    watcher = make_watcher()
    one_pass(watcher)
    (runs / "exp").rename(tmp_path / "away")  # out of the root: nothing finds it elsewhere
    append(tmp_path / "away" / "rank-0.jsonl", "exp", 0, range(LINES + 1, LINES + 3))  # drained while missing
    one_pass(watcher)
    one_pass(watcher)
    assert list(watcher.tails) == [(runs / "exp" / "rank-0.jsonl").resolve()]  # missing, still followed
    (tmp_path / "away").rename(runs / "exp")
    append(runs / "exp" / "rank-0.jsonl", "exp", 0, range(LINES + 3, LINES + 6))
    one_pass(watcher)
    expect(runs / "zerodoctor.db", "exp", range(1, LINES + 6))  # before: read again from 0 (1000 of 1000)

    monkeypatch.setattr(tail_module, "MISSING_GRACE_S", 0.0)
    (runs / "exp").rename(tmp_path / "away")
    one_pass(watcher)
    assert watcher.tails == {}  # past the grace: gone, the row kept
    (tmp_path / "away").rename(runs / "exp")
    append(runs / "exp" / "rank-0.jsonl", "exp", 0, range(LINES + 6, LINES + 8))
    one_pass(watcher)
    expect(runs / "zerodoctor.db", "exp", range(1, LINES + 8))


@pytest.mark.parametrize("how", ["copytruncate", "rewrite"])
def test_a_file_rewritten_and_grown_past_the_offset_between_two_polls_is_read_again_from_its_start(
        tmp_path, make_watcher, how):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, LINES + 1))
    watcher = make_watcher()
    one_pass(watcher)
    inode = os.stat(log).st_ino
    if how == "copytruncate":
        shutil.copyfile(log, log.with_name("rank-0.jsonl.1"))
        os.truncate(log, 0)
    else:
        log.write_text("")  # a shell's '>': same inode, emptied
    append(log, "r", 0, range(LINES + 1, 3 * LINES + 1))  # twice as long as what was read, before the next poll
    one_pass(watcher)
    assert os.stat(log).st_ino == inode
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 3 * LINES + 1))
    with watcher.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(quarantine)).scalar() == 0


def _rotate(log: Path, keep: int) -> None:
    """logrotate's rename rotation: .N-1 → .N … .1 → .2, the file → .1."""
    for n in range(keep - 1, 0, -1):
        if log.with_name(f"{log.name}.{n}").exists():
            log.with_name(f"{log.name}.{n}").rename(log.with_name(f"{log.name}.{n + 1}"))
    log.rename(log.with_name(f"{log.name}.1"))


@pytest.mark.parametrize("watching", [True, False])
def test_two_rotations_between_two_reads_lose_no_rotated_file(tmp_path, make_watcher, watching, caplog):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    watcher = make_watcher()
    one_pass(watcher)
    if not watching:
        watcher.close()
        watcher = make_watcher()  # made now, it reads only after the rotations
    append(log, "r", 0, range(11, 16))  # the tail of the file read so far
    _rotate(log, 3)
    append(log, "r", 0, range(16, 31))  # a whole generation, never seen at the path by a read
    _rotate(log, 3)
    append(log, "r", 0, range(31, 36))
    with caplog.at_level(logging.WARNING):
        one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 36))  # before: 16-30 lost
    assert "rank-0.jsonl.1 read whole too (15 line(s))" in caplog.text
    append(log, "r", 0, range(36, 38))
    _rotate(log, 3)  # one more, as usual: the older generations are not read again
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 38))


def test_dated_rotations_are_followed_in_date_order(tmp_path, make_watcher):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    watcher = make_watcher()
    one_pass(watcher)
    log.rename(log.with_name("rank-0.jsonl-20261201"))
    append(log, "r", 0, range(11, 21))
    log.rename(log.with_name("rank-0.jsonl-20261202"))
    append(log, "r", 0, range(21, 26))
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 26))


def test_watch_follows_a_run_directory_renamed_under_it(tmp_path):
    """The real daemon, observer and all: ``mv runs/exp runs/exp-failed`` while it runs."""
    runs = tmp_path / "runs"
    append(runs / "exp" / "rank-0.jsonl", "exp", 0, range(1, LINES + 1))
    watch = start_watch("-q", str(runs))
    try:
        wait_for(lambda: (runs / "zerodoctor.db").exists() and len(stored_steps(runs / "zerodoctor.db")) == LINES,
                 timeout=60)
        (runs / "exp").rename(runs / "exp-failed")
        append(runs / "exp-failed" / "rank-0.jsonl", "exp", 0, range(LINES + 1, LINES + 11))
        wait_for(lambda: len(stored_steps(runs / "zerodoctor.db")) >= LINES + 10, timeout=60)
    finally:
        code, _, err = stop(watch)
    assert code == 0, err
    expect(runs / "zerodoctor.db", "exp", range(1, LINES + 11))


@pytest.mark.parametrize("watching", [True, False])
def test_a_same_size_rewrite_in_place_is_read_again_live_as_after_a_restart(tmp_path, make_watcher, watching):
    """Before: ignored live (the size did not change), read again after a restart (the fingerprint did)."""
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 101))
    watcher = make_watcher()
    one_pass(watcher)
    size, inode = log.stat().st_size, os.stat(log).st_ino
    rewritten = log.read_text().replace('"loss": 1.0', '"loss": 2.0')  # the same length, other values
    with open(log, "r+") as f:
        f.write(rewritten)
    assert (log.stat().st_size, os.stat(log).st_ino) == (size, inode)
    if not watching:
        watcher.close()
        watcher = make_watcher()
    one_pass(watcher)
    assert len(stored_steps(tmp_path / "runs" / "zerodoctor.db")) == 200  # the new content read whole, once


def test_watch_once_reads_a_new_run_directory_made_with_a_renamed_ones_old_name(tmp_path):
    """``mv runs/exp runs/exp-failed`` and a new ``runs/exp`` while watch is down, then one ``--once`` (a CI
    job's only pass). Before: the moved row took the tail of ``exp`` away, and the new file's 300 lines
    waited for a pass that never came."""
    runs = tmp_path / "runs"
    append(runs / "exp" / "rank-0.jsonl", "exp", 0, range(1, LINES + 1))
    once = [sys.executable, "-m", "zerodoctor", "watch", "--once", str(runs)]
    assert subprocess.run(once, capture_output=True, env=ENV, timeout=120).returncode == 0
    (runs / "exp").rename(runs / "exp-failed")
    append(runs / "exp-failed" / "rank-0.jsonl", "exp", 0, range(LINES + 1, LINES + 11))
    append(runs / "exp" / "rank-0.jsonl", "exp-2", 0, range(1, 301))
    done = subprocess.run(once, capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = stored_steps(runs / "zerodoctor.db")
    assert len(rows) == len(set(rows))
    assert sorted(rows) == [("exp", 0, s) for s in range(1, LINES + 11)] + [("exp-2", 0, s) for s in range(1, 301)]


@pytest.mark.parametrize("order", ["ingest-first", "discover-first"])
def test_a_run_directory_renamed_while_watched_and_made_again_with_its_name_is_two_files(tmp_path, make_watcher,
                                                                                       order):
    """``mv runs/exp runs/exp-failed; mkdir runs/exp`` between two passes. Before, when a poll saw the new
    file at the path before a rescan saw the moved one: the moved file was drained and read again from 0
    under its new path (1,010 of 1,010 lines stored twice)."""
    runs = tmp_path / "runs"
    append(runs / "exp" / "rank-0.jsonl", "exp", 0, range(1, LINES + 1))
    watcher = make_watcher()
    one_pass(watcher)
    (runs / "exp").rename(runs / "exp-failed")
    append(runs / "exp-failed" / "rank-0.jsonl", "exp", 0, range(LINES + 1, LINES + 11))
    append(runs / "exp" / "rank-0.jsonl", "exp-2", 0, range(1, 301))
    if order == "ingest-first":
        watcher.ingest()
        append(runs / "exp-failed" / "rank-0.jsonl", "exp", 0, range(LINES + 11, LINES + 21))
    one_pass(watcher)
    one_pass(watcher)
    rows = stored_steps(runs / "zerodoctor.db")
    assert len(rows) == len(set(rows)), f"{len(rows) - len(set(rows))} step(s) stored twice"
    last = LINES + 21 if order == "ingest-first" else LINES + 11
    assert sorted(rows) == [("exp", 0, s) for s in range(1, last)] + [("exp-2", 0, s) for s in range(1, 301)]
