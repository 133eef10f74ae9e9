"""Every hostile case ends in 0/1 or one line and exit 2, never exit 3 ("a bug"), and a page that cannot
be drawn never costs a finding its announcement: real ``watch``/``status`` subprocesses on real SQLite."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from contextlib import closing
from pathlib import Path

from tests.conftest import run_cli


def _write(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line, allow_nan=True) + "\n" for line in lines))


def _start(run: str, **fields) -> dict:
    return {"v": 1, "t": 1000.0, "run": run, "rank": 0, "kind": "run_start", "world_size": 1, **fields}


def _step(run: str, step: int, **fields) -> dict:
    return {"v": 1, "t": 1000.0 + 1, "run": run, "rank": 0, "kind": "step", "step": step, "loss": 1.0, "samples": 8,
            "micro_batches": 1, **fields}


def test_a_store_made_by_a_newer_zerodoctor_is_one_line_exit_2(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs / "r" / "rank-0.jsonl", [_start("r", config={"train_batch_size": 8}), _step("r", 1)])
    assert run_cli("watch", "--once", str(runs)).returncode == 0
    with closing(sqlite3.connect(runs / "zerodoctor.db")) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    for command in (["watch", "--once", str(runs)], ["status", "--db", str(runs / "zerodoctor.db")],
                    ["diagnose", "--db", str(runs / "zerodoctor.db"), str(runs / "r")]):
        done = run_cli(*command)
        assert done.returncode == 2, (command, done.stderr)  # before: exit 3, Alembic's "Can't locate revision"
        assert len(done.stderr.strip().splitlines()) == 1 and "made by a newer zerodoctor" in done.stderr, done.stderr


def test_status_of_a_run_whose_events_carry_no_date_is_shown(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _write(runs / "far" / "rank-0.jsonl",
           [_start("far", config={"train_batch_size": 8}), {**_step("far", 1), "t": 1e18}])
    assert run_cli("watch", "--once", str(runs)).returncode == 0
    shown = run_cli("status", "--db", str(runs / "zerodoctor.db"))
    assert shown.returncode == 0, shown.stderr  # before: exit 3, the C library's time_t overflowed
    assert "last event t=1e+18 (not a date)" in shown.stdout


def test_runs_whose_pages_cannot_be_drawn_still_have_their_findings_announced(tmp_path: Path) -> None:
    """A NaN min_loss_scale and steps from -1 to 2^63-1: judged and announced, whatever the page does."""
    runs = tmp_path / "runs"
    _write(runs / "nan" / "rank-0.jsonl", [
        _start("nan", precision="fp16", config={"train_batch_size": 8, "fp16": {"enabled": True,
                                                                                 "min_loss_scale": math.nan}}),
        *(_step("nan", i, overflow=i % 4 == 3, loss_scale=65536.0) for i in range(1, 30))])
    _write(runs / "steps" / "rank-0.jsonl", [
        _start("steps", config={"train_batch_size": 8}),
        *(_step("steps", s, loss=math.nan if s == 2 ** 63 - 1 else 1.0) for s in (-1, 0, 1, 2 ** 63 - 1))])
    watched = run_cli("watch", "--once", "--html", str(tmp_path / "html"), str(runs))
    assert watched.returncode == 0, watched.stderr
    assert "ZD623" in watched.stdout and "run nan" in watched.stdout  # before: never announced
    assert "ZD204" in watched.stdout and "run steps" in watched.stdout
    assert "internal error" not in watched.stderr and "Traceback" not in watched.stderr
    assert "page was not written" not in watched.stderr, watched.stderr  # and the pages are drawn too
    page = (tmp_path / "html" / "nan.html").read_text()
    data = re.search(r'<script type="application/json" id="zd-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(data.replace("<\\/", "</"))["runs"]  # strict JSON: no NaN in it
