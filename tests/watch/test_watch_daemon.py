"""Watch as a user runs it: a real subprocess, the real observer, SIGKILL, SIGTERM/SIGINT, two watchers."""

from __future__ import annotations

import json
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Callable

import pytest

from sqlalchemy import func, select

from tests.conftest import run_cli
from tests.watch.conftest import (
    ENV,
    append,
    checksum,
    start_watch,
    step_line,
    stop,
    stored_steps,
    wait_for,
)
from zerodoctor.store.db import open_engine
from zerodoctor.store.schema import files

WRITER = Path(__file__).with_name("writer.py")


# How long the writers of the SIGKILL tests spread their lines over: longer than six watch lives (start-up
# and all) take on a loaded 2-core machine, so the kills land while lines still arrive. At 5 s a CI run's
# second watch found all 12,000 lines written and stored them before its kill: the test proved nothing.
KILLED_WHILE_WRITING_S = 20.0


def start_writer(run_dir: Path, files: int, lines: int, seconds: float, first_rank: int = 0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WRITER), str(run_dir), str(files), str(lines), str(seconds),
                             str(first_rank)], env=ENV)


def status_json(db: Path | str) -> dict:
    proc = run_cli("status", "--db", str(db), "--format", "json", timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def stored_count(db: Path | str) -> int:
    """Events the store holds, read in process (a ``status`` subprocess takes longer than ingesting 100k lines)."""
    if isinstance(db, Path) and not db.exists():
        return 0
    engine = open_engine(db)
    try:
        with engine.connect() as conn:
            return conn.execute(select(func.coalesce(func.sum(files.c.events), 0))).scalar()
    finally:
        engine.dispose()


def stored_offsets(db: Path | str) -> list[tuple[str, str, int]]:
    """(node, path, offset) of every stored file."""
    engine = open_engine(db)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(select(files.c.node, files.c.path, files.c.offset))]
    finally:
        engine.dispose()


def committed_lines(db: Path) -> int:
    """The lines the store has committed offsets for, read straight from the SQLite file (a few ms)."""
    if not db.exists():
        return 0
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        try:
            return conn.execute("SELECT coalesce(sum(lines), 0) FROM files").fetchone()[0]
        except sqlite3.OperationalError:  # the schema is not created yet
            return 0


def written(*roots: Path) -> list[tuple[str, int, int]]:
    """(run, rank, step) of every complete line on disk."""
    out = []
    for path in sorted(p for runs in roots for p in runs.glob("*/rank-*.jsonl")):
        for line in path.read_text().splitlines(keepends=True):
            if line.endswith("\n"):
                event = json.loads(line)
                out.append((event["run"], event["rank"], event["step"]))
    return out


def kill_repeatedly(runs: Path, store_url: str, kills: int, rng: random.Random, total: int,
                   start: Callable[..., subprocess.Popen] = start_watch) -> list[int]:
    """Start ``watch`` on ``runs`` (with ``start``: on a node, ``Node.watch``) and SIGKILL it, ``kills``
    times: every other one after 0.3-1 s (start-up, often), the others within 0.2 s of this life storing
    lines. Returns the lines stored after each kill: a kill proves something only when it lands with part
    of the ``total`` stored."""
    counts: list[int] = []
    for i in range(kills):
        watch = start("--db", store_url, str(runs))
        if i % 2:
            before = counts[-1] if counts else 0
            wait_for(lambda: len(stored_steps(store_url)) > before or before >= total, timeout=30)
            time.sleep(rng.uniform(0.0, 0.2))
        else:
            time.sleep(rng.uniform(0.3, 1.0))
        watch.kill()
        _, err = watch.communicate(timeout=10)
        assert watch.returncode == -signal.SIGKILL, err
        counts.append(len(stored_steps(store_url)))
    return counts


def assert_every_line_stored_once(store_url: str, lines: list[tuple[str, int, int]],
                                  on_disk: Callable[[str, str], Path] = lambda node, path: Path(path)) -> dict:
    """Every line stored once, and each file's offset at its end. ``on_disk(node, path)``: where the file
    a node read at ``path`` is seen from here (two nodes' own disks mounted at one path: ``Node``)."""
    report = status_json(store_url)
    assert sum(f["events"] for r in report["runs"] for f in r["files"]) == len(lines)
    offsets = stored_offsets(store_url)
    assert offsets and all(offset == on_disk(node, path).stat().st_size for node, path, offset in offsets)
    rows = stored_steps(store_url)
    assert [row for row, n in Counter(rows).items() if n > 1] == []
    assert checksum(rows) == checksum(lines)
    return report


def test_sigkill_repeatedly_while_ranks_write_stores_every_line_once(tmp_path, store_url):
    runs = tmp_path / "runs"
    runs.mkdir()
    writers = [start_writer(runs / name, 4, 1500, KILLED_WHILE_WRITING_S) for name in ("a", "b")]
    try:
        stored = kill_repeatedly(runs, store_url, 6, random.Random(7), total=2 * 4 * 1500)
    finally:
        for w in writers:
            assert w.wait(timeout=2 * KILLED_WHILE_WRITING_S) == 0
    assert any(0 < n < 2 * 4 * 1500 for n in stored), f"no kill landed mid-ingest ({stored}): the test proved nothing"
    final = run_cli("watch", "--once", "-q", "--db", store_url, str(runs), timeout=60)
    assert final.returncode == 0, final.stderr

    lines = written(runs)
    assert len(lines) == 2 * 4 * 1500
    report = assert_every_line_stored_once(store_url, lines)
    assert sorted(r["run"] for r in report["runs"]) == ["a", "b"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_mid_ingest_with_offsets_matching_rows(tmp_path, sig):
    runs, db = tmp_path / "runs", tmp_path / "runs" / "zerodoctor.db"
    for rank in range(4):
        append(runs / "big" / f"rank-{rank}.jsonl", "big", rank, range(1, 100_001))
    watch = start_watch("-q", str(runs))
    wait_for(lambda: committed_lines(db) > 0, timeout=30)  # not ``status``: its process takes longer than the ingest
    started = time.monotonic()
    code, _, err = stop(watch, sig)
    assert code == 0, err
    assert time.monotonic() - started < 10
    # Whatever was committed is whole: each file's stored events are exactly the lines before its offset.
    by_file = Counter()
    for _, rank, _ in stored_steps(db):
        by_file[rank] += 1
    for f in status_json(db)["runs"][0]["files"]:
        with open(f["path"], "rb") as fh:
            lines_before_offset = fh.read(f["offset"]).count(b"\n")
        rank = int(Path(f["path"]).stem.split("-")[1])
        assert f["events"] == by_file[rank] == lines_before_offset
    assert stored_count(db) < 4 * 100_000, "stopped before the end, or the test proves nothing"


def test_two_watchers_on_one_store_second_refuses(tmp_path):
    runs = tmp_path / "runs"
    append(runs / "r" / "rank-0.jsonl", "r", 0, range(1, 50))
    first = start_watch(str(runs))
    try:
        wait_for(lambda: stored_count(runs / "zerodoctor.db") == 49)
        for extra in ((), ("--once",)):
            second = run_cli("watch", *extra, str(runs), timeout=30)
            assert second.returncode == 2
            assert f"pid {first.pid}" in second.stderr and "already writing" in second.stderr
        assert stored_count(runs / "zerodoctor.db") == 49
    finally:
        code, _, err = stop(first)
    assert code == 0, err


def test_64_files_written_at_once_and_a_finding_printed_once(tmp_path):
    runs, db = tmp_path / "runs", tmp_path / "runs" / "zerodoctor.db"
    runs.mkdir()
    watch = start_watch(str(runs))
    try:
        wait_for(lambda: db.exists())
        writer = start_writer(runs / "wide", 64, 200, 1.0)  # directory and files created while watched
        assert writer.wait(timeout=30) == 0
        wait_for(lambda: stored_count(db) == 64 * 200, timeout=30)
        with open(runs / "wide" / "rank-5.jsonl", "a") as f:
            f.write(step_line("wide", 5, 201, loss=float("nan")))
        wait_for(lambda: status_json(db)["runs"][0]["findings"], timeout=10)
        append(runs / "wide" / "rank-5.jsonl", "wide", 5, range(202, 205))
        wait_for(lambda: stored_count(db) == 64 * 200 + 4, timeout=10)
    finally:
        code, out, err = stop(watch)
    assert code == 0, err
    assert out.count("ZD204") == 1 and "run wide" in out
    rows = stored_steps(db)
    assert len(set(rows)) == len(rows) == 64 * 200 + 4


def test_run_directory_removed_while_watched_by_the_observer(tmp_path):
    runs, db = tmp_path / "runs", tmp_path / "runs" / "zerodoctor.db"
    append(runs / "gone" / "rank-0.jsonl", "gone", 0, range(1, 11))
    append(runs / "stays" / "rank-0.jsonl", "stays", 0, range(1, 11))
    watch = start_watch(str(runs))
    try:
        wait_for(lambda: stored_count(db) == 20)
        shutil.rmtree(runs / "gone")
        append(runs / "stays" / "rank-0.jsonl", "stays", 0, range(11, 16))
        append(runs / "new" / "rank-0.jsonl", "new", 0, range(1, 4))
        wait_for(lambda: stored_count(db) == 28)
    finally:
        code, _, err = stop(watch)
    assert code == 0, err
    assert "gone/rank-0.jsonl is gone" in err
    assert {r["run"] for r in status_json(db)["runs"]} == {"gone", "stays", "new"}
