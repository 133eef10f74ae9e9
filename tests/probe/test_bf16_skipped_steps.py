"""bf16 steps skipped for non-finite gradients, for real: a 2-rank bf16 ZeRO-2 run on DeepSpeed's CPU
accelerator whose loss turns infinite at step 5. DeepSpeed (0.19.3+) checks bf16 gradients and skips the
step; 0.19.6+ says so at WARNING, in the words its static fp16 scaler uses too. From the events the precision
is known (bf16: no loss scale to lower); from the console alone it is not, and the finding must not call it
a static fp16 loss_scale (ZD203) nor tell a bf16 run to "train in bf16"."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.probe.conftest import record_run

CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2}}


def _findings(path) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                           str(path)], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return {f["rule"]: f for f in json.loads(proc.stdout)["findings"]}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return record_run(tmp_path_factory.mktemp("bf16"), "bf16-inf", CONFIG, "--steps", "10",
                      "--loss-mult", "inf", "--loss-mult-from", "5")


def test_skips_are_bf16_skips_from_the_events(run) -> None:
    assert run.returncode == 0, run.console()[-2000:]
    found = _findings(run.run_dir)
    skipped = found["ZD206"]
    assert skipped["evidence"]["numerics.unscaled_skips"] == 5  # steps 6..10 of 10 (from 5 steps done on)
    assert "under bf16" in skipped["message"] and "ZD203" not in found


def test_the_console_alone_names_the_skips_without_guessing_the_precision(run, tmp_path) -> None:
    pasted = tmp_path / "pasted.log"
    pasted.write_bytes((run.run_dir / "console.log").read_bytes())
    assert b"Gradients are non-finite" in pasted.read_bytes()  # DeepSpeed's own WARNING line, as printed
    found = _findings(pasted)
    assert "ZD206" in found and "the log does not say the precision" in found["ZD206"]["message"]
    assert "ZD203" not in found  # not a static fp16 scale, and no "train in bf16" for a bf16 run
