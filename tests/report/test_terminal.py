"""Nothing the input holds reaches a terminal as a control sequence: run names, config keys, messages,
paths and quarantined lines are printed by ``diagnose``, ``watch`` and ``status`` without their control
characters (an OSC 0 set the terminal's title, ``ESC[2J`` cleared it); the only escapes are our colours."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest

from tests.conftest import run_cli

# OSC 0 (title), clear screen, C1 CSI, CR, backspace, a right-to-left override and a left-to-right isolate
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\r\x08\u202e\u2066"
OUR_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # SGR: what Rich writes for colour and bold, nothing else


def _hostile_run(runs: Path) -> Path:
    run_dir = runs / "evil"
    run_dir.mkdir(parents=True)
    name = f"evil{HOSTILE}"
    lines = [{"v": 1, "t": 1000.0, "run": name, "rank": 0, "kind": "run_start", "world_size": 1,
              "config": {"train_batch_size": 8, f"bad{HOSTILE}key": 1}},  # ZD610 prints the key
             {"v": 1, "t": 1001.0, "run": name, "rank": 0, "kind": "step", "step": 1, "loss": 1.0}]
    with open(run_dir / "rank-0.jsonl", "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
        f.write(f"not json {HOSTILE} at all\n")  # quarantined: its reason quotes it
    return run_dir


def _controls(text: str) -> list[str]:
    """Control characters left once our colour sequences are taken out (newline and tab are text)."""
    return [c for c in OUR_COLOUR.sub("", text)
            if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0 or unicodedata.bidirectional(c) in _BIDI]


_BIDI = {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI", "LRM", "RLM", "ALM"}


@pytest.fixture
def coloured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # Rich colours a pipe as it would a terminal
    monkeypatch.delenv("NO_COLOR", raising=False)


def test_diagnose_watch_and_status_print_no_control_character_of_the_inputs(tmp_path: Path, coloured) -> None:
    runs = tmp_path / "runs"
    run_dir = _hostile_run(runs)
    printed = {}
    for fmt in ("text", "markdown"):
        done = run_cli("diagnose", "--format", fmt, str(run_dir))
        assert done.returncode == 1, done.stderr
        printed[f"diagnose {fmt}"] = done.stdout + done.stderr
    watched = run_cli("watch", "--once", "--full", str(runs))
    assert watched.returncode == 0, watched.stderr
    printed["watch"] = watched.stdout + watched.stderr
    status = run_cli("status", "--db", str(runs / "zerodoctor.db"))
    assert status.returncode == 0, status.stderr
    printed["status"] = status.stdout
    for what, text in printed.items():
        assert "ZD610" in text or what == "status" and "evil" in text, (what, text)
        assert _controls(text) == [], what
    assert OUR_COLOUR.search(printed["diagnose text"])  # colour is still ours to give
    assert "run evil]0;pwned[2J31m" in OUR_COLOUR.sub("", printed["diagnose text"])  # the name, minus controls


def test_plain_keeps_newline_tab_and_text_and_escape_also_escapes_markup() -> None:
    from zerodoctor.report.terminal import escape, plain

    assert plain(f"a\tb\nc{HOSTILE}d é 训练") == "a\tb\nc]0;pwned[2J31md é 训练"
    assert escape("[bold]x\x1b[2J") == "\\[bold]x[2J"


def test_a_library_record_with_a_traceback_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34's round 4: a PostgreSQL outage printed SQLAlchemy's 20-line 'Error closing cursor' traceback; the
    record is the one SQLAlchemy's engine logs (engine/base.py, exc_info=True), its error a real failed connect."""
    import logging

    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError

    from zerodoctor.report.terminal import PlainFormatter

    monkeypatch.delenv("ZERODOCTOR_DEBUG", raising=False)
    try:
        create_engine("postgresql+psycopg://u:p@127.0.0.1:1/none").connect()
    except OperationalError:
        import sys

        exc_info = sys.exc_info()
    record = logging.getLogger("sqlalchemy.engine.Engine").makeRecord(
        "sqlalchemy.engine.Engine", logging.ERROR, __file__, 1, "Error closing cursor", None, exc_info)
    line = PlainFormatter("zerodoctor: %(message)s").format(record)
    assert line.startswith("zerodoctor: Error closing cursor (OperationalError: ") and "\n" not in line, line
    monkeypatch.setenv("ZERODOCTOR_DEBUG", "1")
    assert "Traceback" in PlainFormatter("zerodoctor: %(message)s").format(record)
