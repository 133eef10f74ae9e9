"""Hugging Face Trainer goes through ``deepspeed.initialize``, so ``zerodoctor run`` covers it unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

SCRIPT = Path(__file__).with_name("hf_trainer_script.py")


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("hf")
    command = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp), "--name", "hf", "--",
               sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", str(SCRIPT), str(tmp / "out")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "DS_ACCELERATOR": "cpu"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return tmp / "hf"


def _events(run: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, (run / "rank-0.jsonl").read_text().splitlines()) if e["kind"] == kind]


def test_the_trainer_run_is_probed_without_code_changes(hf_run: Path) -> None:
    start, = _events(hf_run, "run_start")
    assert start["derived"]["gradient_accumulation_steps"] == 2  # filled by HF from "auto"
    assert start["derived"]["train_batch_size"] == 8
    steps = _events(hf_run, "step")
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    assert {(s["micro_batches"], s["samples"], s["tokens"]) for s in steps} == {(2, 8, 2 * 4 * 32)}


def test_diagnose_reads_it_like_any_run(hf_run: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                          str(hf_run)], capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    assert report["inputs"][0]["quarantined"] == 0
    assert "ZD102" not in {f["rule"] for f in report["findings"]}  # the Trainer feeds what the config says
