"""A hard-linked rank file is one file: read once, at the path whose row it has, said once in the log.

Before: ``cp -al runs/a runs/b`` (or a second link to one rank file in the watched roots) gave the
second name a row of its own, and every line was stored twice (200 steps of 100 lines).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.watch.conftest import ENV, append
from tests.watch.test_watch_rotation import expect


def once(runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerodoctor", "watch", "--once", str(runs)],
                          capture_output=True, text=True, env=ENV, timeout=120)


def test_a_run_directory_copied_with_hard_links_after_a_watch_is_read_once(tmp_path):
    runs = tmp_path / "runs"
    append(runs / "a" / "rank-0.jsonl", "a", 0, range(1, 101))
    assert once(runs).returncode == 0
    subprocess.run(["cp", "-al", str(runs / "a"), str(runs / "b")], check=True)
    append(runs / "b" / "rank-0.jsonl", "a", 0, range(101, 111))  # one file: a's lines too
    done = once(runs)
    assert done.returncode == 0, done.stderr
    expect(runs / "zerodoctor.db", "a", range(1, 111))  # before: 1-100 once, 1-110 again
    assert done.stderr.count("(a hard link); read once") == 1, done.stderr


def test_two_links_to_one_rank_file_both_new_are_read_once(tmp_path):
    runs = tmp_path / "runs"
    append(runs / "a" / "rank-0.jsonl", "a", 0, range(1, 101))
    (runs / "z").mkdir()
    (runs / "z" / "rank-0.jsonl").hardlink_to(runs / "a" / "rank-0.jsonl")
    done = once(runs)
    assert done.returncode == 0, done.stderr
    expect(runs / "zerodoctor.db", "a", range(1, 101))
    assert f"{runs / 'z' / 'rank-0.jsonl'} is the same file as {runs / 'a' / 'rank-0.jsonl'}" in done.stderr


def test_a_hard_link_left_when_the_first_name_is_removed_reads_on_from_its_offset(tmp_path):
    runs = tmp_path / "runs"
    append(runs / "a" / "rank-0.jsonl", "a", 0, range(1, 101))
    subprocess.run(["cp", "-al", str(runs / "a"), str(runs / "b")], check=True)
    assert once(runs).returncode == 0
    subprocess.run(["rm", "-r", str(runs / "a")], check=True)
    append(runs / "b" / "rank-0.jsonl", "a", 0, range(101, 111))
    done = once(runs)
    assert done.returncode == 0, done.stderr
    expect(runs / "zerodoctor.db", "a", range(1, 111))
