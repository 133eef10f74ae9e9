"""Rename rotations while ``watch`` is SIGKILLed again and again: every line of every generation stored once.

Two rotations can fall between a kill and the next start (the writer rotates every 300 lines, several
times a second), so the restarted watcher finds its file two generations down and a whole generation
between it and the file at the path (before: that generation was lost, with no warning).
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.conftest import run_cli
from tests.watch.conftest import ENV, append, stored_steps
from tests.watch.test_watch_daemon import kill_repeatedly

WRITER = Path(__file__).with_name("rotating_writer.py")
LINES, EVERY = 6000, 300


def test_sigkills_across_rename_rotations_lose_and_repeat_no_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    log = runs / "rot" / "rank-0.jsonl"
    append(log, "rot", 0, [1])
    db = f"sqlite:///{tmp_path / 'store.db'}"
    # The file is followed from the moment a watcher first sees it: generations rotated away before
    # that are not this store's to read.
    assert run_cli("watch", "--once", "-q", "--db", db, str(runs), timeout=120).returncode == 0
    writer = subprocess.Popen([sys.executable, str(WRITER), str(log), "2", str(LINES), str(EVERY), "6"], env=ENV)
    try:
        kill_repeatedly(runs, db, 8, random.Random(23), total=LINES)
    finally:
        assert writer.wait(timeout=60) == 0
    final = run_cli("watch", "--once", "-q", "--db", db, str(runs), timeout=120)
    assert final.returncode == 0, final.stderr
    rows = stored_steps(db)
    twice = [step for (_, _, step), n in Counter(rows).items() if n > 1]
    missing = sorted(set(range(1, LINES + 1)) - {step for _, _, step in rows})
    assert (len(twice), len(missing)) == (0, 0), f"{len(twice)} stored twice, {len(missing)} lost: {missing[:20]}"
