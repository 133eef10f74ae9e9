"""The config from issue 6 (a practitioner's ZeRO notes) and the rules, shared by the config tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerodoctor.pipeline import rules_from

ISSUE_CONFIG = {
    "train_batch_size": 128, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8,
    "optimizer": {"type": "AdamW", "params": {"lr": "1e-4", "betas": [0.9, 0.999], "eps": "1e-8",
                                              "weight_decay": "0.01"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "0", "warmup_max_lr": "1e-4",
                                                 "warmup_num_steps": 10000}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
             "hysteresis": 2, "min_loss_scale": 1},
    "activation_checkpointing": {"partition_activations": True, "cpu_checkpointing": True,
                                 "contiguous_memory_optimization": True},
}


@pytest.fixture(scope="session")
def rules():
    return rules_from()


@pytest.fixture
def issue_config(tmp_path: Path) -> Path:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(ISSUE_CONFIG))  # one line, as pasted from the issue
    return path
