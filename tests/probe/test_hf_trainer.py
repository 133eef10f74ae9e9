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
               sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
               str(SCRIPT), str(tmp / "out")]
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


RESUME_SCRIPT = Path(__file__).with_name("hf_resume_script.py")


def test_a_relaunch_with_a_lower_lr_carries_it_to_the_trainer_and_the_engine_steps_with_it(tmp_path: Path) -> None:
    """The Trainer fills the config's "auto" lr from ``--learning_rate`` and refuses a config whose lr differs from
    it. A fix-and-resume relaunch with ZD201's lower lr passes it both ways, and the engine steps at it; the config
    alone (the relaunch before) is refused by the Trainer before the first step."""
    from zerodoctor.fixes.patch import merge_patch
    from zerodoctor.resume.relaunch import relaunch_argv

    before = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "train_batch_size": "auto", "zero_optimization": {"stage": 1},
              "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}
    after = merge_patch(before, {"optimizer": {"params": {"lr": 5e-4}}})
    (tmp_path / "ds.json").write_text(json.dumps(before))
    (tmp_path / "patched.json").write_text(json.dumps(after))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
               str(RESUME_SCRIPT), "--deepspeed", "ds.json", "--output_dir", "out", "--max_steps", "2",
               "--per_device_train_batch_size", "4", "--learning_rate", "1e-3", "--report_to", "none"]

    def run(name: str, argv: list[str]) -> tuple[int, Path]:
        done = subprocess.run([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp_path), "--name", name,
                               "--", *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env={**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(ROOT)})
        return done.returncode, tmp_path / name

    code, fixed = run("fixed", relaunch_argv(command, None, Path("patched.json"), None, None, (before, after)))
    assert code == 0, (fixed / "console.log").read_text()[-3000:]
    assert [s["lr"] for s in _events(fixed, "step")] == [5e-4, 2.5e-4]  # the Trainer's linear decay from it
    start, = _events(fixed, "run_start")
    assert start["config"]["train_micro_batch_size_per_gpu"] == 4  # what DeepSpeed was given: "auto" filled
    code, alone = run("alone", relaunch_argv(command, None, Path("patched.json"), None, None))
    assert code != 0
    assert "mismatch TrainingArguments values" in (alone / "console.log").read_text()
    assert not (alone / "rank-0.jsonl").exists()  # refused before DeepSpeed's engine existed
