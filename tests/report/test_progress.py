"""Progress: a long ingest draws a bar on stderr when stderr is a real terminal (a pty here), and
nothing anywhere when it is not; stdout's JSON is the same either way."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from zerodoctor.report.progress import MIN_BYTES


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("progress") / "rank-0.jsonl"
    line = {"v": 1, "run": "big", "rank": 0, "kind": "step", "loss": 1.5, "lr": 1e-4, "step_time_s": 0.5,
            "fwd_s": 0.1, "bwd_s": 0.2, "optim_s": 0.05, "comm_s": 0.1, "mem_allocated_bytes": 10_000_000_000}
    with path.open("w") as f:
        n = 0
        while f.tell() < MIN_BYTES * 5 // 4:
            n += 1
            f.write(json.dumps({**line, "t": 1000.0 + n, "step": n}) + "\n")
    return path


def _diagnose(path: Path, stderr: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                           str(path)], stdout=subprocess.PIPE, stderr=stderr, timeout=300,
                          env={**os.environ, "COLUMNS": "100", "TERM": "xterm"})


def test_bar_on_a_terminal_only_never_on_stdout(big_log: Path) -> None:
    master, slave = pty.openpty()
    try:
        proc = _diagnose(big_log, slave)
        os.close(slave)
        drawn = b""
        while True:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the child's side of the pty is closed and drained
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(master)
    assert proc.returncode == 0
    assert b"reading" in drawn and b"MiB" in drawn  # the bar, with its byte counts
    body = json.loads(proc.stdout)  # stdout is pure JSON: the bar went elsewhere
    assert body["inputs"][0]["events"] > 10_000

    piped = _diagnose(big_log, subprocess.PIPE)
    assert piped.stderr == b""  # not a terminal: no bar
    assert json.loads(piped.stdout) == body
