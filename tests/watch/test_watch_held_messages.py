"""Watch lets go of a message a parser holds open for lines that may still come (a traceback's exception
message, a wrapped OOM) once its file is quiet and at the end of ``--once``, so a console-only run that dies
on a traceback is judged on it, as ``diagnose`` judges the same file; and ``status`` times such a run by its
file, not by line numbers read as seconds since 1970.

The logs are real pastes (each file names its source on its first line): each ends inside a traceback's
exception message, which the parser holds in case the next line continues it.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.conftest import ROOT
from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.pipeline.tail import QUIET_S
from zerodoctor.store.schema import events
from zerodoctor.store.status import collect

ILLEGAL_ACCESS = ROOT / "tests" / "fixtures" / "rules" / "ZD903" / "fires.log"  # qlora#82, ends in the message
BATCH_ASSERTION = ROOT / "tests" / "corpus" / "ds-6914-batch-assertion" / "console.log"  # no clock time in it
# Console logs whose last lines are a rank's traceback ("[rank1]: …"): told by diagnose, held by watch before.
ENDING_IN_A_TRACEBACK = [
    ILLEGAL_ACCESS,
    ROOT / "tests" / "fixtures" / "rules" / "ZD708" / "fires.log",
    ROOT / "tests" / "corpus" / "heldout6-open-r1-217-grpo-generations-indivisible" / "console.log",
    ROOT / "tests" / "corpus" / "heldout8-ds-7568-collective-mismatch-detail" / "console.log",
    ROOT / "tests" / "corpus" / "heldout9-minicpmv-694-rank0-prefetch-bucket-float" / "console.log",
]


def _console_run(runs: Path, name: str, log: Path) -> Path:
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    shutil.copy(log, run_dir / "console.log")
    return run_dir / "console.log"


def _errors(findings) -> list[str]:
    return sorted(f.rule for f in findings if f.severity == "error")


@pytest.mark.parametrize("log", ENDING_IN_A_TRACEBACK, ids=lambda p: p.parent.name)
def test_watch_once_judges_a_console_run_ending_in_a_traceback_as_diagnose_does(tmp_path, make_watcher, rules,
                                                                               log) -> None:
    """Before: the traceback was held, the offset committed past it, and nothing let it go: ZD903 under
    diagnose, nothing (or ZD912, the exit code alone) under watch."""
    _console_run(tmp_path / "runs", "r", log)
    judged: list = []
    watcher = make_watcher()
    watcher.on_judged = judged.append
    watcher.once()
    expected = _errors(diagnose([tmp_path / "runs" / "r"], rules=rules).findings)
    assert expected and _errors(judged[-1].findings if judged else []) == expected


def test_a_held_traceback_is_let_go_once_its_file_is_quiet(tmp_path, make_watcher) -> None:
    """The daemon (no ``--once``): while the file may still grow the traceback's message waits for its next
    lines; once the file has not changed for ``QUIET_S`` it is told, and the crash is named live."""
    log = _console_run(tmp_path / "runs", "r", ILLEGAL_ACCESS)
    announced: list = []
    watcher = make_watcher(announced)
    watcher.discover()
    watcher.ingest()
    watcher.judge(force=True)
    assert "ZD903" not in [f.rule for f in announced]  # just written: its message may go on
    quiet = time.time() - QUIET_S - 1
    os.utime(log, (quiet, quiet))
    watcher.ingest()
    watcher.judge(force=True)
    assert [f.rule for f in announced].count("ZD903") == 1
    watcher.ingest()  # let go once: the quiet file is not told again
    watcher.judge(force=True)
    with watcher.engine.connect() as conn:
        run, = collect(conn)
    assert run.files[0].events == 1 and [f["rule"] for f in run.findings].count("ZD903") == 1


def test_status_times_a_console_run_with_no_clock_by_its_file(tmp_path, make_watcher) -> None:
    """The paste prints no clock time, so its events are ordered by line number; status said 'last event
    1970-01-01 00:00:01'. Now: when its file last changed."""
    log = _console_run(tmp_path / "runs", "r", BATCH_ASSERTION)
    written = time.time() - 3600
    os.utime(log, (written, written))
    watcher = make_watcher()
    watcher.once()
    with watcher.engine.connect() as conn:
        run, = collect(conn)
    assert run.last_event_t == pytest.approx(written, abs=1)


def test_a_quiet_file_whose_last_line_is_unfinished_keeps_the_message_held(tmp_path, make_watcher) -> None:
    """The same paste with its last line cut mid-way (a writer that stopped mid-line): the message waits for that
    line however long the file is quiet, and once it is finished and the file quiet again, it is told, once."""
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    paste = ILLEGAL_ACCESS.read_bytes()
    log = run_dir / "console.log"
    log.write_bytes(paste[:-20])
    quiet = time.time() - QUIET_S - 1
    os.utime(log, (quiet, quiet))
    announced: list = []
    watcher = make_watcher(announced)
    watcher.discover()
    watcher.ingest()
    watcher.judge(force=True)
    assert "ZD903" not in [f.rule for f in announced]
    with open(log, "ab") as f:
        f.write(paste[-20:])
    os.utime(log, (quiet + 0.5, quiet + 0.5))
    watcher.ingest()
    watcher.judge(force=True)
    assert [f.rule for f in announced].count("ZD903") == 1
    with watcher.engine.connect() as conn:
        told = conn.execute(select(events.c.payload).where(events.c.kind == "exception")).scalars().all()
    assert len(told) == 1


def _exceptions(watcher) -> int:
    with watcher.engine.connect() as conn:
        return len(conn.execute(select(events.c.id).where(events.c.kind == "exception")).all())


def test_a_traceback_held_when_watch_was_killed_is_told_after_the_restart(tmp_path, make_watcher, rules) -> None:
    """Issue 34's round 4, the campaign's console crash killed mid-hold (bench/hostile_campaign.py): a watch
    SIGKILLed while it held a traceback's message (its file not yet quiet) had committed its offset past the
    traceback; the restart read nothing from there, and the crash was never stored or said (ZD903 under diagnose,
    no finding and 0 events in the store). The lines of what was held are read again by the next watcher."""
    _console_run(tmp_path / "runs", "r", ILLEGAL_ACCESS)
    killed = make_watcher()
    killed.discover()
    killed.ingest()  # just written, not quiet: the message is held; then SIGKILL (no stop, no let go)
    assert _exceptions(killed) == 0
    judged: list = []
    restarted = make_watcher()
    restarted.on_judged = judged.append
    restarted.once()
    expected = _errors(diagnose([tmp_path / "runs" / "r"], rules=rules).findings)
    assert "ZD903" in expected and _errors(judged[-1].findings if judged else []) == expected
    assert _exceptions(restarted) == 1


def test_a_traceback_told_at_a_clean_stop_is_not_told_again_after_the_restart(tmp_path, make_watcher) -> None:
    """The other side of the one above: a watch that let the held message go (``--once``, a quiet file, a
    SIGTERM) leaves nothing to read again; the next watcher stores no second crash."""
    _console_run(tmp_path / "runs", "r", ILLEGAL_ACCESS)
    make_watcher().once()
    restarted = make_watcher()
    restarted.once()
    assert _exceptions(restarted) == 1
