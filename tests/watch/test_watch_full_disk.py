"""A store on a disk that fills up while ``watch`` runs: the refused passes back off, and nothing read is lost."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import fill
from tests.watch.conftest import ENV, append, stop, stored_steps, wait_for

WRITER_S = 6.0


def test_a_full_disk_under_a_live_writer_backs_off_and_loses_nothing(tmp_path: Path, small_disk: Path) -> None:
    """Issue 34's round 4: a full disk logged "store write failed" 263 times in 10 s, every append waking a pass
    that read the same lines again for nothing. Each refused pass now waits, doubling from 0.5 s: over 6 s of
    appends at 50 lines a second, at most 5 refusals are said (0.5 + 1 + 2 + 4 s of waits); once the disk has
    room again, every line is stored once."""
    runs, db = tmp_path / "runs", small_disk / "zd.db"
    rank_file = runs / "r" / "rank-0.jsonl"
    append(rank_file, "r", 0, range(1, 3))
    err = tmp_path / "watch.err"
    with open(err, "w") as err_file:
        watch = subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", "--db", str(db), str(runs)],
                                 stdout=subprocess.DEVNULL, stderr=err_file, text=True, env=ENV)
    try:
        wait_for(lambda: len(stored_steps(db)) == 2, timeout=60)
        fill(small_disk / "filler")
        started, step = time.monotonic(), 3
        while time.monotonic() - started < WRITER_S:
            append(rank_file, "r", 0, [step])
            step += 1
            time.sleep(0.02)
        refusals = err.read_text().count("store write failed")
        assert 1 <= refusals <= 5, err.read_text()[-3000:]
        (small_disk / "filler").unlink()
        wait_for(lambda: len(stored_steps(db)) == step - 1, timeout=60)
    finally:
        code, _, _ = stop(watch)
    assert sorted(stored_steps(db)) == [("r", 0, s) for s in range(1, step)]
    assert "the store takes writes again after" in err.read_text()
    assert code == 0
