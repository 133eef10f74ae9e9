"""Fixtures for watch: step lines with known content, a store to count them in, a watcher to drive by hand."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

import pytest


from tests.conftest import step_rows
from zerodoctor.pipeline import rules_from
from zerodoctor.store.db import open_engine
from zerodoctor.watch.daemon import Watcher

ENV = {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}


def step_line(run: str, rank: int, step: int, *, loss: float = 1.0) -> str:
    return json.dumps({"v": 1, "t": 1000.0 + step, "run": run, "rank": rank, "kind": "step", "step": step,
                       "loss": loss, "samples": 8, "micro_batches": 1}, allow_nan=True) + "\n"


def append(path: Path, run: str, rank: int, steps: Iterable[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.writelines(step_line(run, rank, s) for s in steps)


def checksum(rows: Iterable[tuple]) -> str:
    return hashlib.sha256(repr(sorted(rows)).encode()).hexdigest()


def stored_steps(db: Path | str) -> list[tuple[str, int, int]]:
    """(run, rank, step) of every stored step row, duplicates kept; ``db`` a path or a URL."""
    engine = open_engine(db)
    try:
        with engine.connect() as conn:
            return [(row["run"], row["rank"], row["step"]) for row in step_rows(conn)]
    finally:
        engine.dispose()


def wait_for(check: Callable[[], object], timeout: float = 20, every: float = 0.05) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {check}")
        time.sleep(every)


def start_watch(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> tuple[int, str, str]:
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


@pytest.fixture(scope="session")
def rules():
    return rules_from()


@pytest.fixture
def make_watcher(tmp_path: Path, rules) -> Iterable[Callable[..., Watcher]]:
    """A watcher over ``tmp_path/runs`` driven pass by pass (no observer), announcing into a list."""
    made: list[Watcher] = []

    def make(announced: list | None = None) -> Watcher:
        (tmp_path / "runs").mkdir(exist_ok=True)
        sink = announced if announced is not None else []
        watcher = Watcher(open_engine(tmp_path / "runs" / "zerodoctor.db"), [tmp_path / "runs"], rules,
                          lambda finding, config: sink.append(finding))
        made.append(watcher)
        return watcher

    yield make
    for watcher in made:
        watcher.close()
        watcher.engine.dispose()
