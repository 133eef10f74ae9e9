"""Shared fixtures: paths of the repository and a way to run the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m zerodoctor ARGS`` as a user would, capturing output."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "zerodoctor", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def diagnose_json(*paths: str | Path, extra: tuple[str, ...] = ()) -> dict:
    proc = run_cli("diagnose", "--format", "json", "--fail-on", "never", *extra, *map(str, paths))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def root() -> Path:
    return ROOT
