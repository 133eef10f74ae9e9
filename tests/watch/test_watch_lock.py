"""The SQLite store's lock file: never followed through a symlink, never truncated or written."""

from __future__ import annotations

import os

from tests.conftest import run_cli
from tests.watch.conftest import append


def test_lock_file_planted_as_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 5))
    victim = tmp_path / "victim.conf"
    victim.write_text("precious\n")
    os.symlink(victim, runs / "zerodoctor.db.watch-lock")
    proc = run_cli("watch", "--once", str(runs), timeout=60)
    assert proc.returncode == 2
    assert "watch-lock" in proc.stderr and "symlink" in proc.stderr
    assert victim.read_text() == "precious\n"


def test_lock_file_is_never_truncated_or_written(tmp_path):
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 5))
    lock = runs / "zerodoctor.db.watch-lock"
    lock.write_text("left by an older watcher\n")
    proc = run_cli("watch", "--once", str(runs), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert lock.read_text() == "left by an older watcher\n"
