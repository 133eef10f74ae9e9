"""Real DeepSpeed runs on CPU (gloo, 2 ranks) through ``zerodoctor run``, shared per module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.extensions import ensure_built

TRAIN = ROOT / "samples" / "train.py"
TEARDOWN_ABORT = "terminate called without an active exception"
ATTEMPTS = 3
RUN_TIMEOUT_S = 240


@dataclass
class Recorded:
    run_dir: Path
    returncode: int
    stdout: bytes
    stderr: bytes

    def events(self, rank: int) -> list[dict]:
        return [json.loads(line) for line in (self.run_dir / f"rank-{rank}.jsonl").read_bytes().splitlines()]

    def console(self) -> str:
        return (self.run_dir / "console.log").read_text(errors="replace")

    def finished_training(self) -> bool:
        """Exit 0, or the known gloo abort in interpreter teardown after training finished."""
        return self.returncode == 0 or TEARDOWN_ABORT in self.console()


@pytest.fixture(scope="session", autouse=True)
def deepspeed_ops() -> Path:
    """DeepSpeed's CPU ops built into this session's own directory before the first real run's timeout starts."""
    return ensure_built()


def run_command(tmp: Path, name: str, config: dict, *train_args: str) -> list[str]:
    """``zerodoctor run -- torchrun (2 ranks) samples/train.py --config CONFIG ARGS``, the run in ``tmp/name``."""
    config_path = tmp / f"{name}.json"
    config_path.write_text(json.dumps(config))
    return [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp), "--name", name, "--",
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            str(TRAIN), "--config", str(config_path), *train_args]


def run_env(env: dict | None = None) -> dict:
    return {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", **(env or {})}


def record_run(tmp: Path, name: str, config: dict, *train_args: str, env: dict | None = None,
               timeout: float = RUN_TIMEOUT_S) -> Recorded:
    """The run, re-taken (as ``samples/record.py`` does) while gloo aborts it in teardown after training finished:
    each test's run is the one it staged, not that abort (which ``test_crash_families`` stages on purpose)."""
    ensure_built()
    for attempt in range(ATTEMPTS):
        if attempt:
            shutil.rmtree(tmp / name)
        done = subprocess.run(run_command(tmp, name, config, *train_args), capture_output=True, timeout=timeout,
                              cwd=ROOT, env=run_env(env))
        recorded = Recorded(tmp / name, done.returncode, done.stdout, done.stderr)
        if done.returncode == 0 or TEARDOWN_ABORT not in recorded.console():
            break
    return recorded
