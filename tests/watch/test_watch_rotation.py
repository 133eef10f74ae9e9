"""Tail: every complete line stored exactly once across rotation, truncation, partial writes and restarts."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from tests.conftest import ROOT
from tests.watch.conftest import append, step_line, stored_steps, write_through_two_copytruncates
from tests.watch.rotating_writer import rotate
from zerodoctor.pipeline import tail
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.store import findings as stored_findings
from zerodoctor.store import steps as chunked_steps
from zerodoctor.store.db import open_engine
from zerodoctor.store.schema import events, files, quarantine, runs
from zerodoctor.watch.daemon import STORE_RETRY_S, Watcher


def one_pass(watcher: Watcher) -> None:
    watcher.discover()
    while watcher.ingest():
        pass


def expect(db: Path, run: str, steps: range | list[int]) -> None:
    """Rank 0 of ``run`` stored exactly ``steps``, each once."""
    rows = stored_steps(db)
    assert len(rows) == len(set(rows)), f"{len(rows) - len(set(rows))} step(s) stored twice"
    assert sorted(rows) == [(run, 0, s) for s in steps]


def file_row(watcher: Watcher) -> dict:
    with watcher.engine.connect() as conn:
        return dict(conn.execute(select(files)).mappings().one())


def test_rename_create(tmp_path, make_watcher):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    watcher = make_watcher()
    one_pass(watcher)
    append(log, "r", 0, range(11, 16))  # written before the rotation, not read yet
    log.rename(log.with_name("rank-0.jsonl.1"))
    append(log, "r", 0, range(16, 21))
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 21))
    row = file_row(watcher)
    assert (row["inode"], row["offset"]) == (os.stat(log).st_ino, log.stat().st_size)


def rotated_while_not_watched(log: Path, make_watcher) -> None:
    """Steps 1-10 read by a watcher that stops; 11-15 written, the file rotated (``.1``), 16-20 in the new file."""
    append(log, "r", 0, range(1, 11))
    first = make_watcher()
    one_pass(first)
    first.close()
    append(log, "r", 0, range(11, 16))
    rotate(log)
    append(log, "r", 0, range(16, 21))


def test_rename_create_while_not_watching(tmp_path, make_watcher):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    rotated_while_not_watched(log, make_watcher)
    one_pass(make_watcher())  # a restart: no handle on the old file, found again by its inode
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 21))


def test_copytruncate_twice_while_down(tmp_path, make_watcher, caplog):
    """Issue 34's round 4: logrotate's ``copytruncate`` twice while watch is down (lines written after the last
    read, then between the two copies). On the restart the file has its old inode and other first bytes: the copy
    whose first bytes are those read (``.2``) is read on from the stored offset, then the newer copy (``.1``)
    whole, then the file; said as a copy, not as the compression the same search finds."""
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    one_pass(make_watcher())
    append(log, "r", 0, range(11, 14))  # never read before the first copy
    write_through_two_copytruncates(log, "r")
    with caplog.at_level("INFO", logger="zerodoctor.watch"):
        one_pass(make_watcher())
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 19))
    assert "was copied to rank-0.jsonl.2 while not watched" in caplog.text


def test_copytruncate(tmp_path, make_watcher):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    watcher = make_watcher()
    one_pass(watcher)
    inode = os.stat(log).st_ino
    shutil.copyfile(log, log.with_name("rank-0.jsonl.1"))
    with open(log, "r+") as f:
        f.truncate(0)
    append(log, "r", 0, range(11, 14))
    one_pass(watcher)
    assert os.stat(log).st_ino == inode
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 14))
    assert file_row(watcher)["offset"] == log.stat().st_size


def test_delete_recreate(tmp_path, make_watcher, caplog):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    watcher = make_watcher()
    one_pass(watcher)
    append(log, "r", 0, range(11, 13))
    log.unlink()
    one_pass(watcher)  # the open handle drains the deleted file's last lines
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 13))
    # Longer than the old file: had the tail kept the old identity, a reused inode number would
    # make this file look like the old one grown, and its first lines would be skipped.
    append(log, "r", 0, range(13, 40))
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 40))
    assert "lost" not in caplog.text  # the old file was drained whole, nothing to warn about


def test_delete_recreate_between_two_passes(tmp_path, make_watcher):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    watcher = make_watcher()
    one_pass(watcher)
    append(log, "r", 0, range(11, 13))
    log.unlink()
    # The held handle keeps the old inode allocated, so the new file cannot reuse its number
    # and pass for the old one grown longer.
    append(log, "r", 0, range(13, 40))
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 40))


def test_run_directory_removed_while_watched(tmp_path, make_watcher):
    run_dir = tmp_path / "runs" / "r"
    append(run_dir / "rank-0.jsonl", "r", 0, range(1, 6))
    watcher = make_watcher()
    one_pass(watcher)
    append(run_dir / "rank-0.jsonl", "r", 0, range(6, 9))
    shutil.rmtree(run_dir)
    one_pass(watcher)
    assert watcher.tails == {}
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 9))
    append(run_dir / "rank-0.jsonl", "r", 0, range(9, 12))  # the same run id comes back
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 12))


def test_line_written_in_two_pieces_is_read_once_whole(tmp_path, make_watcher):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 3))
    line = step_line("r", 0, 3)
    with open(log, "a") as f:
        f.write(line[:25])
    watcher = make_watcher()
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 3))
    assert file_row(watcher)["offset"] == len(step_line("r", 0, 1)) + len(step_line("r", 0, 2))
    with open(log, "a") as f:
        f.write(line[25:])
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 4))
    with watcher.engine.connect() as conn:
        assert conn.execute(select(quarantine)).all() == []


def test_malformed_lines_quarantined_once_across_restarts(tmp_path, make_watcher):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 4))
    with open(log, "a") as f:
        f.write('{"v": 1, "kind": "step"\nnot json at all\n')
    append(log, "r", 0, range(4, 6))
    first = make_watcher()
    one_pass(first)
    first.close()
    again = make_watcher()
    one_pass(again)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 6))
    with again.engine.connect() as conn:
        kept = conn.execute(select(quarantine.c.line, quarantine.c.reason).order_by(quarantine.c.line)).all()
    assert [line for line, _ in kept] == [4, 5]
    assert all("JSON" in reason for _, reason in kept)
    assert file_row(again)["quarantined"] == 2


def test_new_finding_announced_once(tmp_path, make_watcher):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 6))
    announced: list = []
    watcher = make_watcher(announced)
    one_pass(watcher)
    watcher.judge(force=True)
    assert announced == []
    with open(log, "a") as f:
        f.write(step_line("r", 0, 6, loss=float("nan")))
    one_pass(watcher)
    watcher.judge(force=True)
    append(log, "r", 0, range(7, 9))
    one_pass(watcher)
    watcher.judge(force=True)
    assert [(f.rule, f.run) for f in announced] == [("ZD204", "r")]
    watcher.close()
    restarted: list = []
    again = make_watcher(restarted)
    append(log, "r", 0, range(9, 10))
    one_pass(again)
    again.judge(force=True)
    assert restarted == []


def test_rank_files_appearing_beside_console_log_replace_it(tmp_path, make_watcher):
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "console.log").write_text("[INFO] starting\n")
    watcher = make_watcher()
    one_pass(watcher)
    assert [p.name for p in watcher.tails] == ["console.log"]
    append(run_dir / "rank-0.jsonl", "r", 0, range(1, 4))
    one_pass(watcher)
    assert [p.name for p in watcher.tails] == ["rank-0.jsonl"]
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 4))


def test_console_log_rows_dropped_when_rank_files_appear_between_two_runs_of_watch(tmp_path, make_watcher, rules):
    sample = ROOT / "samples" / "fp16-min-scale"
    run_dir = tmp_path / "runs" / sample.name
    run_dir.mkdir(parents=True)
    shutil.copy(sample / "console.log", run_dir)
    first = make_watcher()
    first.once()
    with first.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(events)).scalar() > 0  # the log's events were stored
    for rank_file in sample.glob("rank-*.jsonl"):
        shutil.copy(rank_file, run_dir)
    again = make_watcher()
    again.once()
    with again.engine.connect() as conn:
        run_id = conn.execute(select(runs.c.id).where(runs.c.name == sample.name)).scalar_one()
        stored = stored_findings.for_run(conn, run_id)
        assert {Path(p).name for (p,) in conn.execute(select(files.c.path))} == {"rank-0.jsonl", "rank-1.jsonl"}
    expected = diagnose([run_dir], rules=rules).findings
    assert stored and sorted(stored, key=lambda f: f["rule"]) == sorted((f.to_json() for f in expected),
                                                                        key=lambda f: f["rule"])


def test_lines_read_again_after_a_rolled_back_commit_keep_their_events(tmp_path, make_watcher):
    sample = ROOT / "samples" / "fp16-min-scale" / "console.log"
    (tmp_path / "runs" / "r").mkdir(parents=True)
    shutil.copy(sample, tmp_path / "runs" / "r")
    watcher = make_watcher()
    watcher.discover()
    add = watcher.pipeline.ingestor.add

    def fail_once(*args) -> None:
        watcher.pipeline.ingestor.add = add
        raise OperationalError("INSERT", {}, Exception("disk I/O error"))

    watcher.pipeline.ingestor.add = fail_once  # the parser reads the whole log, then the commit fails
    watcher.ingest()
    assert not watcher.ingest()  # a refused pass waits before the next (a full disk is not retried at every wake-up)
    time.sleep(STORE_RETRY_S[0])
    while watcher.ingest():
        pass
    retried = stored_events(watcher)
    watcher.close()

    (tmp_path / "clean" / "r").mkdir(parents=True)
    shutil.copy(sample, tmp_path / "clean" / "r")
    clean = Watcher(open_engine(tmp_path / "clean" / "zerodoctor.db"), [tmp_path / "clean"], [], lambda *_: None)
    try:
        clean.once()
        assert retried and retried == stored_events(clean)
    finally:
        clean.engine.dispose()


def stored_events(watcher: Watcher) -> list[tuple]:
    with watcher.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(events.c.kind, events.c.rank, events.c.step, events.c.payload).order_by(events.c.id))]


def test_line_the_store_refuses_is_quarantined_once_alone_and_the_tail_goes_on(tmp_path, make_watcher, monkeypatch):
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 6))
    store = chunked_steps.store

    def refuse_step_3(conn, run_id, file_id, cols):
        if 3 in cols.values["step"]:
            raise ValueError("value out of range for the store")
        return store(conn, run_id, file_id, cols)

    monkeypatch.setattr(chunked_steps, "store", refuse_step_3)
    watcher = make_watcher()
    one_pass(watcher)
    monkeypatch.setattr(chunked_steps, "store", store)
    one_pass(watcher)  # not read again: the refused batch is behind the offset
    append(log, "r", 0, range(6, 8))
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", [1, 2, 4, 5, 6, 7])
    row = file_row(watcher)
    assert (row["lines"], row["offset"], row["quarantined"]) == (7, log.stat().st_size, 1)
    with watcher.engine.connect() as conn:
        ((line, reason),) = conn.execute(select(quarantine.c.line, quarantine.c.reason)).all()
    assert (line, reason) == (3, "not stored: ValueError: value out of range for the store")


def rotate_when_opened(monkeypatch, log: Path, opens: Callable[[str], bool], generations: list[range], *,
                       before: bool) -> None:
    """The writer rotates (``rotating_writer.rotate``, then a new file with each of ``generations``) when the tail
    first opens a file whose name ``opens`` picks: ``before`` the open (between the tail's listing of the
    directory and its open by name), or just after it."""
    open_log = tail.open_log

    def rotate_once() -> None:
        for steps in generations:
            rotate(log)
            append(log, "r", 0, steps)
        generations.clear()

    def opened_with_a_rotation(path, *args, **kwargs):
        now = bool(generations) and opens(os.path.basename(path))
        if now and before:
            rotate_once()
        handle = open_log(path, *args, **kwargs)
        if now and not before:
            rotate_once()
        return handle

    monkeypatch.setattr(tail, "open_log", opened_with_a_rotation)


def test_rotation_while_the_generations_rotated_since_the_last_read_are_opened(tmp_path, make_watcher, monkeypatch):
    """Names shift between the tail's listing of the generations rotated since its last read and its opens
    (``.1`` becomes ``.2``): it opened the files by the names listed, missed the generation between the file it
    had read and the one at the path, and lost its lines."""
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    watcher = make_watcher()
    one_pass(watcher)
    for steps in (range(11, 21), range(21, 31)):  # two rotations between two reads: 11-20 lies between
        rotate(log)
        append(log, "r", 0, steps)
    rotate_when_opened(monkeypatch, log, lambda name: name != log.name, [range(31, 41)], before=True)
    one_pass(watcher)
    monkeypatch.undo()
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 41))


def test_generation_rotated_after_the_file_at_the_path_was_opened_is_read_once(tmp_path, make_watcher, monkeypatch):
    """Two rotations just after the tail opened the file at the path (its successor): the generation rotated
    between them is newer than the successor, read after it (at the next pass), not before it and again then."""
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    watcher = make_watcher()
    one_pass(watcher)
    rotate(log)
    append(log, "r", 0, range(11, 21))
    rotate_when_opened(monkeypatch, log, lambda name: name == log.name, [range(21, 31), range(31, 41)],
                       before=False)
    one_pass(watcher)
    monkeypatch.undo()
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 41))


def test_rotation_read_in_a_pass_the_store_refused_is_read_again_from_the_stored_file(tmp_path, make_watcher):
    """A refused pass had drained the rotated file and read on into the new one; its rollback puts the row back
    on the old file. The tail's handle on the new file is let go with it: read from the old file's offset, the
    new file lost its first bytes."""
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    append(log, "r", 0, range(1, 11))
    watcher = make_watcher()
    one_pass(watcher)
    append(log, "r", 0, range(11, 16))
    rotate(log)
    append(log, "r", 0, range(16, 31))
    add = watcher.pipeline.ingestor.add

    def fail_in_the_new_file(conn, file_id, batch, *args, **kwargs):
        if any(16 in cols.values["step"] for cols in batch.columns.values()):
            watcher.pipeline.ingestor.add = add
            raise OperationalError("INSERT", {}, Exception("disk I/O error"))
        return add(conn, file_id, batch, *args, **kwargs)

    watcher.pipeline.ingestor.add = fail_in_the_new_file
    one_pass(watcher)
    time.sleep(STORE_RETRY_S[0])
    one_pass(watcher)
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 31))


def test_restart_mid_rotation_finds_the_file_read_under_its_new_name(tmp_path, make_watcher, monkeypatch, caplog):
    """A restarted tail looks for the file it read by its inode; a rotation that renames it (``.1`` to ``.2``)
    between that listing and the open left no file at the name listed: it is found by its first bytes."""
    log = tmp_path / "runs" / "r" / "rank-0.jsonl"
    rotated_while_not_watched(log, make_watcher)
    open_log, first_rotated = tail.open_log, log.with_name("rank-0.jsonl.1")

    def renamed_before_the_open(path, *args, **kwargs):
        if Path(path) == first_rotated and first_rotated.exists():
            first_rotated.rename(log.with_name("rank-0.jsonl.2"))  # the first step of a rotation
        return open_log(path, *args, **kwargs)

    monkeypatch.setattr(tail, "open_log", renamed_before_the_open)
    one_pass(make_watcher())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    expect(tmp_path / "runs" / "zerodoctor.db", "r", range(1, 21))
