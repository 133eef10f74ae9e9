"""DeepSpeed's own defaults and key names, in one place, for every stage that reads a config or a log.

A key the user did not write takes DeepSpeed's default (``DeepSpeedZeroConfig``,
``DeepSpeedFP16Config``, ``WarmupLR``); zerodoctor judges the run by what DeepSpeed did, so it
uses the same numbers. ``tests/test_deepspeed_defaults.py`` compares them with the installed
DeepSpeed, so an upgrade that changes one fails a test instead of a diagnosis.
"""

from __future__ import annotations

# The three batch settings, in DeepSpeed's order: train = micro × grad-accum × data-parallel ranks.
TRAIN_BATCH = "train_batch_size"
MICRO_BATCH = "train_micro_batch_size_per_gpu"
GRAD_ACCUM = "gradient_accumulation_steps"
BATCH_KEYS = (TRAIN_BATCH, MICRO_BATCH, GRAD_ACCUM)

# The config values the Trainer fills and matches, and the argument each comes from: transformers'
# integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_process (fill_match, must_match).
TRAINER_ARGUMENTS = {
    "optimizer.params.lr": "--learning_rate",
    "scheduler.params.warmup_max_lr": "--learning_rate",
    MICRO_BATCH: "--per_device_train_batch_size",
    GRAD_ACCUM: "--gradient_accumulation_steps",
    "gradient_clipping": "--max_grad_norm",
    "optimizer.params.eps": "--adam_epsilon",
    "optimizer.params.weight_decay": "--weight_decay",
    "fp16.enabled": "--fp16",
    "bf16.enabled": "--bf16",
}

# zero_optimization (deepspeed/runtime/zero/config.py), in elements
REDUCE_BUCKET_SIZE = 500_000_000
ALLGATHER_BUCKET_SIZE = 500_000_000
STAGE3_PREFETCH_BUCKET_SIZE = 50_000_000
STAGE3_PARAM_PERSISTENCE_THRESHOLD = 100_000

# fp16 (deepspeed/runtime/precision_config.py)
FP16 = {"loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000, "hysteresis": 2,
        "consecutive_hysteresis": False, "min_loss_scale": 1}

# WarmupLR (deepspeed/runtime/lr_schedules.py)
WARMUP_MIN_LR = 0
WARMUP_NUM_STEPS = 1000
