"""Healthy real runs under ``zerodoctor run`` are judged healthy: no warning, no error, from events or console.

ZeRO-1 in bf16 with gradient accumulation here; ZeRO-2 in fp16 with gradient accumulation (a run
whose dynamic scaler calibrates at start-up) in ``test_real_run.py``; ZeRO-2 fp32 is the recorded
``samples/healthy-zero2``. Together: ZeRO-1/2, grad-accum, fp16, bf16.
"""

from __future__ import annotations

import pytest

from tests.conftest import diagnose_json
from tests.probe.conftest import record_run

CONFIG = {
    "train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 1}, "bf16": {"enabled": True},
}


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    return record_run(tmp_path_factory.mktemp("runs"), "zero1-bf16-accum", CONFIG, "--steps", "12")


def claims(*paths) -> list[str]:
    """Findings at warning or error: what a healthy run must not get."""
    text = paths[0].suffix == ".log"
    report = diagnose_json(*paths, extra=("--input-format", "text")) if text else diagnose_json(*paths)
    return [f"{f['rule']}: {f['message']}" for f in report["findings"] if f["severity"] in ("warning", "error")]


def test_zero1_bf16_grad_accum_is_judged_healthy(bf16_run):
    assert bf16_run.finished_training(), bf16_run.console()[-2000:]
    assert claims(bf16_run.run_dir) == []
    assert claims(bf16_run.run_dir / "console.log") == []
