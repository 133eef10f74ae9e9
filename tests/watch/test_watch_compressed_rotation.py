"""Rotations with logrotate's ``compress`` (no ``delaycompress``): the file rotated to ``.1`` is gzipped into
``.1.gz`` at once (a new inode) and the older ``.N.gz`` shift up. Two of them between two reads, while watch
is down or live, leave the file read last as ``.2.gz`` and a whole generation as ``.1.gz``: both are read.

Before: neither was read, 200 of 1,300 lines lost, silently when the new file took the old one's inode
(ext4 reuses one at once), with "lines after byte N are lost" (not the whole generation) otherwise.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.watch.conftest import ENV, append
from tests.watch.test_watch_rotation import expect, one_pass


def rotate_compressed(log: Path, keep: int = 4) -> None:
    """logrotate's ``compress``: ``.N.gz`` → ``.N+1.gz``, then the file → ``.1`` → gzip into ``.1.gz`` (the
    gzip tool keeps the file's mtime), ``.1`` removed, and a new empty file created at the path."""
    for n in range(keep - 1, 0, -1):
        if (gen := log.with_name(f"{log.name}.{n}.gz")).exists():
            gen.rename(log.with_name(f"{log.name}.{n + 1}.gz"))
    rotated = log.with_name(f"{log.name}.1")
    log.rename(rotated)
    log.touch()
    packed = log.with_name(f"{log.name}.1.gz")
    with open(rotated, "rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copystat(rotated, packed)
    rotated.unlink()


def write_two_compressed_rotations(log: Path) -> None:
    append(log, "r", 0, range(1001, 1101))  # the tail of the file read so far
    rotate_compressed(log)
    append(log, "r", 0, range(1101, 1201))  # a whole generation
    rotate_compressed(log)
    append(log, "r", 0, range(1201, 1301))


@pytest.mark.parametrize("watching", [True, False])
def test_two_compressed_rotations_between_two_reads_lose_no_line(tmp_path, make_watcher, watching):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 1001))
    watcher = make_watcher()
    one_pass(watcher)
    if not watching:
        watcher.close()
        watcher = make_watcher()  # made now, it reads only after the rotations
    write_two_compressed_rotations(log)
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 1301))  # before: 1001-1200 lost
    append(log, "r", 0, range(1301, 1311))
    rotate_compressed(log)  # one more, as usual: the older generations are not read again
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 1311))


def test_watch_once_reads_compressed_generations_rotated_while_it_was_down(tmp_path):
    runs = tmp_path / "runs"
    log = runs / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 1001))
    once = [sys.executable, "-m", "zerodoctor", "watch", "--once", str(runs)]
    assert subprocess.run(once, capture_output=True, env=ENV, timeout=120).returncode == 0
    write_two_compressed_rotations(log)
    done = subprocess.run(once, capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 0, done.stderr
    expect(runs / "zerodoctor.db", "r", range(1, 1301))
    assert "rank-0.jsonl.1.gz read whole too (100 line(s))" in done.stderr, done.stderr


def test_a_lost_file_says_the_rotated_files_it_could_not_read(tmp_path, make_watcher, caplog):
    """The file read last is nowhere (its compressed copy removed too): the loss is said, with the
    generations beside it that were not read."""
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 1001))
    watcher = make_watcher()
    one_pass(watcher)
    watcher.close()
    write_two_compressed_rotations(log)
    log.with_name("rank-0.jsonl.2.gz").unlink()
    os.utime(log)
    watcher = make_watcher()
    one_pass(watcher)
    assert "are lost, and 1 rotated file(s) beside it are not read (rank-0.jsonl.1.gz)" in caplog.text
