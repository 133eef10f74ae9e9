"""A real DeepSpeed run whose config file has comments and trailing commas: DeepSpeed reads it (hjson) and
trains, and so must the probe (before: its plain-JSON read raised, the probe detached, each rank file held
only ``run_end`` and ``diagnose`` said "no findings", exit 0)."""

from __future__ import annotations

import subprocess

from tests.conftest import ROOT
from tests.probe.conftest import RUN_TIMEOUT_S, Recorded, run_command, run_env

STEPS = 6
HJSON = """{
  // 16 samples a step: 2 per rank, 4 micro-batches
  "train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3,},},  # trailing commas
  /* ZeRO-1, bf16 */
  "zero_optimization": {"stage": 1}, "bf16": {"enabled": true},
}
"""
AS_READ = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
           "bf16": {"enabled": True}}


def test_the_probe_reads_the_hjson_config_deepspeed_trains_with(tmp_path):
    command = run_command(tmp_path, "commented", {}, "--steps", str(STEPS))
    (tmp_path / "commented.json").write_text(HJSON)  # the file run_command wrote, as a user writes it
    done = subprocess.run(command, capture_output=True, timeout=RUN_TIMEOUT_S, cwd=ROOT, env=run_env())
    run = Recorded(tmp_path / "commented", done.returncode, done.stdout, done.stderr)
    assert run.finished_training(), run.console()[-2000:]
    for rank in (0, 1):
        events = run.events(rank)
        assert events[0]["kind"] == "run_start" and events[0]["config"] == AS_READ
        assert [e["step"] for e in events if e["kind"] == "step"] == list(range(1, STEPS + 1))
