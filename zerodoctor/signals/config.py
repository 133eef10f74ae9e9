"""Signals, config: the DeepSpeed config as written → what it gets wrong before a step runs.

Everything here reads the config alone (plus world size and parameter count when known),
so ``zerodoctor check`` judges it before launch and ``diagnose`` judges it after. The
vocabulary of keys is DeepSpeed's own (``deepspeed.runtime.constants`` and the sections
``DeepSpeedConfig`` reads); a test keeps it in step with the installed version. Sections
DeepSpeed validates itself with pydantic (``zero_optimization``, ``fp16``…) are left to it.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any, Iterator

from zerodoctor.deepspeed import defaults as ds
from zerodoctor.messages.deferred import deferred
from zerodoctor.signals.inputs import CONFIG, CONFIG_DUMP
from zerodoctor.signals.base import nested, shown_by
from zerodoctor.signals.config_values import read_fp16
from zerodoctor.signals.view import RunView

# Top-level keys DeepSpeed (0.14-0.19) reads; a misspelt one is ignored without a word.
TOP_LEVEL_KEYS = frozenset("""
    activation_checkpointing aio amp autotuning bf16 bfloat16 checkpoint comet comms_logger communication_data_type
    compile compression_training csv_monitor curriculum_learning data_efficiency data_types dataloader_drop_last
    datastates_ckpt disable_allgather disable_python_gc dump_state eigenvalue elasticity expert_parallel
    flops_profiler fp16 gradient_accumulation_steps gradient_allreduce_op gradient_clipping
    gradient_predivide_factor graph_harvesting hybrid_engine log_level managed_gradient_accumulation
    memory_breakdown monitor_config nebula optimizer pipeline prescale_gradients progressive_layer_drop
    quantize_training scheduler seq_parallel_communication_data_type sequence_parallel_size sparse_attention
    sparse_gradients steps_per_print swap_tensor tensor_parallel tensorboard timers torch_autocast train_batch_size
    train_micro_batch_size_per_gpu use_data_before_expert_parallelism vocabulary_size wall_clock_breakdown wandb
    weight_quantization zero_allow_untested_optimizer zero_force_ds_cpu_optimizer zero_optimization
""".split())
# Sections DeepSpeed reads key by key with defaults, so their typos are silent too.
SECTION_KEYS = {
    "activation_checkpointing": frozenset({"partition_activations", "number_checkpoints", "cpu_checkpointing",
                                           "contiguous_memory_optimization", "synchronize_checkpoint_boundary",
                                           "profile"}),
    "optimizer": frozenset({"type", "params", "legacy_fusion"}),
    "scheduler": frozenset({"type", "params"}),
}
# Knobs of the activation_checkpointing block that change something when true.
CHECKPOINTING_KNOBS = ("partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
                       "synchronize_checkpoint_boundary", "profile")
WARMUP_SCHEDULERS = ("WarmupLR", "WarmupDecayLR")
# (key, default elements, stages it applies to)
BUCKETS = (("reduce_bucket_size", ds.REDUCE_BUCKET_SIZE, (1, 2, 3)),
           ("allgather_bucket_size", ds.ALLGATHER_BUCKET_SIZE, (1, 2)),
           ("stage3_prefetch_bucket_size", ds.STAGE3_PREFETCH_BUCKET_SIZE, (3,)))
BUCKET_MAX_COLLECTIVES = 10_000  # buckets per step beyond which collectives are latency-bound
BUCKET_TARGET_COLLECTIVES = 100  # what a proposed smaller-than-default bucket aims at: overlap, not latency
FP16_MAX = 65504.0
_NUMBER = deferred(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")

_dumped = shown_by(CONFIG, switch=CONFIG_DUMP)

READS = ("run.params", "run.world_size", "run.device_memory_bytes", "run.last_step")

SIGNALS = [
    _dumped("config.string_numbers", "keys", "config values that are numbers written as JSON strings: "
            "dotted key → the number"),
    _dumped("config.zero_stage", "stage", "zero_optimization.stage as written (DeepSpeed's default 0)"),
    _dumped("config.offload_param_ignored", "bool", "offload_param is set but ZeRO stage < 3, where it does nothing"),
    _dumped("config.checkpointing_knobs", "keys", "activation_checkpointing knobs set to true"),
    _dumped("config.fp16_enabled", "bool", "fp16.enabled is true"),
    _dumped("config.bf16_enabled", "bool", "bf16.enabled (or bfloat16.enabled) is true"),
    _dumped("config.min_loss_scale", "scale", "fp16.min_loss_scale as written"),
    _dumped("config.min_loss_scale_integral", "bool", "fp16.min_loss_scale is an integer (DeepSpeed ≥ 0.17 insists)"),
    _dumped("config.loss_scale", "scale", "fp16.loss_scale as written (0: dynamic)"),
    _dumped("config.initial_scale_power", "log2", "fp16.initial_scale_power as written (default 16)"),
    _dumped("config.static_scale_over_fp16_max", "bool", f"a static loss_scale above fp16's largest value "
                                                         f"{FP16_MAX:g}"),
    _dumped("config.min_scale_at_initial", "bool", "dynamic scaling with min_loss_scale ≥ 2^initial_scale_power"),
    _dumped("config.overflow_prone", "bool", "fp16 loss-scale settings that overflow or abort on the first bad steps"),
    _dumped("config.fp16_unusable", "keys", "fp16 values DeepSpeed refuses, or takes but its loss scaler cannot work "
            "with: dotted key → why"),
    _dumped("config.fp16_unusable_patch", "patch", "merge patch setting each unusable fp16 value to DeepSpeed's "
                                                   "default"),
    _dumped("config.scheduler", "name", "scheduler.type ('none' without a scheduler)"),
    _dumped("config.warmup_scheduler", "bool", "the scheduler warms up: WarmupLR or WarmupDecayLR"),
    _dumped("config.warmup_min_lr", "lr", "learning rate the warm-up starts from (WarmupLR default 0)"),
    _dumped("config.warmup_max_lr", "lr", "learning rate the warm-up ends at"),
    _dumped("config.warmup_steps", "steps", "scheduler warmup_num_steps (WarmupLR default 1000)"),
    _dumped("config.total_steps", "steps", "scheduler total_num_steps, else the last step of a run that ended"),
    _dumped("config.bucket_outliers", "keys", "ZeRO bucket sizes the user wrote larger than the whole model"),
    _dumped("config.bucket_waste_bytes", "bytes", "device memory the oversized buckets hold and never fill"),
    _dumped("config.bucket_waste_share", "ratio", "memory held by oversized buckets / the device's memory"),
    _dumped("config.bucket_patch", "patch", "merge patch sizing the oversized buckets to the model (one bucket "
                                            "holds all of it)"),
    _dumped("config.small_buckets", "keys", f"ZeRO bucket sizes the user wrote so small a step needs more than "
                                            f"{BUCKET_MAX_COLLECTIVES:,} collectives"),
    _dumped("config.small_bucket_collectives", "collectives", "collectives per step the smallest such bucket makes"),
    _dumped("config.small_bucket_patch", "patch", f"merge patch aiming at {BUCKET_TARGET_COLLECTIVES} collectives "
                                                  f"per step, never above DeepSpeed's default"),
    _dumped("config.unknown_keys", "keys", "keys DeepSpeed does not know (and ignores)"),
    _dumped("config.close_matches", "keys", "unknown key → the known key it is close to, where one is (dotted)"),
    _dumped("config.unknown_keys_patch", "patch", "merge patch renaming each misspelt key to its close match"),
    _dumped("config.numbers_for_text", "keys", "each config value DeepSpeed reads as a number that is text, where the "
                                               "run shows the number: a number in quotes, or an \"auto\" whose "
                                               "TrainingArguments flag the command line gives → that number"),
    _dumped("config.unpin_patch", "patch", "merge patch turning pin_memory off in each offload section the config "
                                           "has that offloads to the host or NVMe and pins"),
    _dumped("config.auto_keys", "keys", "values written as \"auto\", for HF Trainer or Accelerate to fill"),
    _dumped("config.sequence_parallel_size", "ranks", "sequence_parallel_size (default 1)"),
    _dumped("config.accelerate_dp_size", "ranks", "world size / sequence_parallel_size: the ranks Accelerate fills "
                                                  "for"),
    _dumped("config.auto_batch_checkable", "bool",
            "train_batch_size is a number and the micro-batch or grad-accum is \"auto\""),
    _dumped("config.auto_batch_divisor", "samples", "data-parallel ranks × the micro-batch when written: "
            "what an explicit train_batch_size must be a multiple of when the rest is \"auto\""),
    _dumped("config.auto_batch_remainder", "samples", "train_batch_size modulo that divisor"),
]


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    quoted = _quoted_by_trainer(view)
    config = view.config or None
    if not isinstance(config, dict) or not config:
        return {"config.string_numbers": quoted} if quoted else {}
    out: dict[str, Any] = {}
    out.update(_string_numbers(config, quoted))
    out.update(_precision(config))
    out.update(_fp16_unusable(config, out))
    out.update(_checkpointing(config))
    out.update(_warmup(config, values, finished=bool(view.events.get("run_end"))))
    out.update(_unknown_keys(config))
    out.update(_text_numbers(config, out["config.string_numbers"], view.first_start().get("argv") or []))
    out.update(_unpinned(config))
    out.update(_auto(config, values.get("run.world_size")))
    stage = _number(nested(config, "zero_optimization.stage", 0))
    offload_param = nested(config, "zero_optimization.offload_param.device")
    out["config.zero_stage"] = stage
    out["config.offload_param_ignored"] = offload_param in ("cpu", "nvme") and stage is not None and stage < 3
    if values.get("run.params") and stage is not None:
        out.update(_buckets(config, int(stage), int(values["run.params"]), values.get("run.device_memory_bytes")))
    return out


def _number(value: Any) -> float | int | None:
    """A JSON number, or a string holding one, as a number; anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        number = float(value)
        return int(number) if number.is_integer() and not re.search(r"[.eE]", value) else number
    return None


def _leaves(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, str(key)))
    else:
        yield path, node


def _patch_at(patch: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        patch = patch.setdefault(key, {})
    patch[path[-1]] = value


def _string_numbers(config: dict[str, Any], quoted: dict[str, Any]) -> dict[str, Any]:
    found = [(p, v) for p, v in _leaves(config) if isinstance(v, str) and _number(v) is not None]
    return {"config.string_numbers": {**quoted, **{".".join(p): _number(v) for p, v in found}}}


def _text_numbers(config: dict[str, Any], quoted: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """The numbers meant where the config holds text: a number in quotes as that number, and an "auto" that
    nothing filled (a script calling deepspeed.initialize itself) as the value of the TrainingArguments flag the
    Trainer would have filled it from (``ds.TRAINER_ARGUMENTS``), where the command line gives one."""
    out = dict(quoted)
    for key, flag in ds.TRAINER_ARGUMENTS.items():
        if nested(config, key) == "auto" and (given := _flag_value(argv, flag)) is not None:
            out[key] = given
    return {"config.numbers_for_text": out} if out else {}


def _flag_value(argv: list[str], flag: str) -> float | int | None:
    """The number ``flag`` takes in ``argv`` (``--flag 0.5`` or ``--flag=0.5``), or None."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return _number(argv[i + 1])
        if arg.startswith(flag + "="):
            return _number(arg[len(flag) + 1:])
    return None


def _unpinned(config: dict[str, Any]) -> dict[str, Any]:
    """pin_memory off in each offload section the config has that offloads and pins (DeepSpeed pins by default):
    never a section the run does not have (an offload_param block added to a stage-2 config is ZD602's)."""
    patch = {}
    for section in ("offload_optimizer", "offload_param"):
        node = nested(config, f"zero_optimization.{section}")
        if isinstance(node, dict) and node.get("device") in ("cpu", "nvme") and node.get("pin_memory") is not False:
            patch[section] = {"pin_memory": False}
    return {"config.unpin_patch": {"zero_optimization": patch}} if patch else {}


def _quoted_by_trainer(view: RunView) -> dict[str, Any]:
    """Keys the HF Trainer's mismatch error shows with the same value on both sides (``ds gas=8 vs hf gas=8``):
    equal as text, unequal as values, so the config holds the number as a string."""
    out: dict[str, Any] = {}
    for log in view.events.get("log", []):
        if log.get("what") == "hf_string_value":
            out.update({k: _number(v) for k, v in ((log.get("data") or {}).get("values") or {}).items()
                        if _number(v) is not None})
    return out


def _precision(config: dict[str, Any]) -> dict[str, Any]:
    bf16 = config.get("bf16", config.get("bfloat16"))
    out: dict[str, Any] = {
        "config.fp16_enabled": nested(config, "fp16.enabled") is True,
        "config.bf16_enabled": isinstance(bf16, dict) and bf16.get("enabled") is True,
    }
    fp16 = config.get("fp16")
    if not out["config.fp16_enabled"] or not isinstance(fp16, dict):
        return out
    floor = _number(fp16.get("min_loss_scale", ds.FP16["min_loss_scale"]))
    if floor is not None and math.isfinite(floor):  # NaN or inf: refused outright (ZD623), not a rounding matter
        out["config.min_loss_scale"] = floor
        out["config.min_loss_scale_integral"] = float(floor).is_integer()
    static = _number(fp16.get("loss_scale", ds.FP16["loss_scale"])) or 0
    power = _number(fp16.get("initial_scale_power", ds.FP16["initial_scale_power"]))
    power = ds.FP16["initial_scale_power"] if power is None else power
    out["config.loss_scale"], out["config.initial_scale_power"] = static, power
    # A static scale over fp16's range makes every loss ≥ 1 overflow; a floor at the starting scale
    # leaves the dynamic scaler no room to back off, and DeepSpeed raises at the first overflow.
    out["config.static_scale_over_fp16_max"] = static > FP16_MAX
    out["config.min_scale_at_initial"] = not static and floor is not None and floor >= _power_of_two(power)
    out["config.overflow_prone"] = out["config.static_scale_over_fp16_max"] or out["config.min_scale_at_initial"]
    return out


def _power_of_two(power: float) -> float:
    try:
        return 2.0 ** power
    except OverflowError:  # a power past float's range: no floor reaches it
        return math.inf


def _fp16_unusable(config: dict[str, Any], precision: dict[str, Any]) -> dict[str, Any]:
    """What DeepSpeed's fp16 config refuses (``config_values.read_fp16``) or its dynamic scaler cannot work
    with, and DeepSpeed's defaults in their place."""
    fp16, found = read_fp16(config)
    found = {key: f"{why} (refused at initialize)" for key, why in found.items()}
    if precision.get("config.min_loss_scale_integral") is False:
        found.pop("fp16.min_loss_scale", None)  # ZD605 says it, with its own fix
    if fp16 is not None and fp16.enabled and fp16.dynamic and fp16.hysteresis < 1:
        # update_scale lowers the scale only when the hysteresis counts down to exactly 1
        found["fp16.hysteresis"] = (f"{fp16.hysteresis} is below 1: DeepSpeed takes it and never lowers the loss "
                                    "scale, so every overflow skips a step at the same scale")
    keys = [key.removeprefix("fp16.") for key in found]
    # "enabled" keeps the user's word: a default there would switch fp16 off; a section that is no object goes
    patch = None if "fp16" in found else {key: ds.FP16[key] for key in keys if key in ds.FP16}
    return {"config.fp16_unusable": found, "config.fp16_unusable_patch": {"fp16": patch}}


def _checkpointing(config: dict[str, Any]) -> dict[str, Any]:
    block = config.get("activation_checkpointing")
    knobs = [k for k in CHECKPOINTING_KNOBS if isinstance(block, dict) and block.get(k) is True]
    return {"config.checkpointing_knobs": knobs}


def _warmup(config: dict[str, Any], values: dict[str, Any], finished: bool) -> dict[str, Any]:
    kind = nested(config, "scheduler.type")
    params = nested(config, "scheduler.params", {}) or {}
    total = _number(params.get("total_num_steps")) if isinstance(params, dict) else None
    out: dict[str, Any] = {"config.scheduler": kind if isinstance(kind, str) else "none",
                           "config.warmup_scheduler": kind in WARMUP_SCHEDULERS and isinstance(params, dict),
                           # a finished run's length is known even when no scheduler states it
                           "config.total_steps": total if total is not None else (
                               values.get("run.last_step") if finished else None)}
    if not out["config.warmup_scheduler"]:
        return out
    out["config.warmup_min_lr"] = _number(params.get("warmup_min_lr", ds.WARMUP_MIN_LR))
    out["config.warmup_max_lr"] = _number(params.get("warmup_max_lr"))
    out["config.warmup_steps"] = _number(params.get("warmup_num_steps", ds.WARMUP_NUM_STEPS))
    return out


def _buckets(config: dict[str, Any], stage: int, params: int, device: int | None) -> dict[str, Any]:
    """Bucket sizes the user wrote, weighed in bytes against the device and in collectives against the model.

    DeepSpeed's defaults are never judged: the user did not choose them. A bucket larger than the model
    only costs the bytes it never fills (stages 1-2 allocate their gradient buckets whole, twice with
    overlap_comm), so it is judged against the device's memory, and not at all when that is unknown;
    the proposed size holds the whole model in one bucket, so it never adds a collective.
    """
    zero = config.get("zero_optimization") if isinstance(config.get("zero_optimization"), dict) else {}
    precision = _precision(config)
    element = 2 if precision.get("config.fp16_enabled") or precision.get("config.bf16_enabled") else 4
    buffers = 2 if zero.get("overlap_comm", stage == 3) is True else 1
    large, small, waste = [], {}, 0
    patch: dict[str, int] = {}
    for key, default, stages in BUCKETS:
        size = _number(zero.get(key)) if key in zero else None
        if stage not in stages or size is None or size <= 0:
            continue
        if size > params:
            large.append(key)
            waste += int((size - params) * element * buffers)
            patch[key] = round_up(params)
        elif size * BUCKET_MAX_COLLECTIVES < params:
            small[key] = size
    out: dict[str, Any] = {"config.bucket_outliers": large}
    if large:
        out.update({"config.bucket_waste_bytes": waste, "config.bucket_patch": {"zero_optimization": patch}})
        if device:  # without the device's memory the bytes weigh nothing: the rule is left unjudged
            out["config.bucket_waste_share"] = waste / device
    out["config.small_buckets"] = sorted(small)
    if small:
        target = round_up(params / BUCKET_TARGET_COLLECTIVES)
        out["config.small_bucket_collectives"] = params / min(small.values())
        out["config.small_bucket_patch"] = {"zero_optimization": {
            key: int(min(dict((k, d) for k, d, _ in BUCKETS)[key], max(target, size))) for key, size in small.items()}}
    return out


def round_up(value: float) -> int:
    """``value`` rounded up to two significant digits: a size people can read that is never smaller."""
    rounded = float(f"{value:.2g}")
    if rounded < value:
        rounded += 10 ** (len(str(int(rounded))) - 2) if rounded >= 10 else 1
    return int(rounded)


def _unknown_keys(config: dict[str, Any]) -> dict[str, Any]:
    found, close, patch = [], {}, {}
    scopes = [((), config, TOP_LEVEL_KEYS)] + [
        ((name,), config[name], keys) for name, keys in SECTION_KEYS.items() if isinstance(config.get(name), dict)]
    for path, node, known in scopes:
        for key in node:
            if key in known:
                continue
            hint = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
            dotted = ".".join((*path, key))
            found.append(dotted)
            if hint and hint[0] not in node:
                close[dotted] = ".".join((*path, hint[0]))
                _patch_at(patch, (*path, key), None)
                _patch_at(patch, (*path, hint[0]), node[key])
    return {"config.unknown_keys": found, "config.close_matches": close, "config.unknown_keys_patch": patch}


def _auto(config: dict[str, Any], world: int | None) -> dict[str, Any]:
    auto = [".".join(p) for p, v in _leaves(config) if v == "auto"]
    sp = _number(config.get("sequence_parallel_size", 1)) or 1
    out: dict[str, Any] = {"config.auto_keys": auto, "config.sequence_parallel_size": sp}
    if not world:
        return out
    out["config.accelerate_dp_size"] = world / sp
    train, micro = config.get(ds.TRAIN_BATCH), config.get(ds.MICRO_BATCH)
    filled = (micro, config.get(ds.GRAD_ACCUM))
    out["config.auto_batch_checkable"] = isinstance(train, int) and not isinstance(train, bool) and "auto" in filled
    if out["config.auto_batch_checkable"] and world % sp == 0:
        # DeepSpeed asserts train == micro × grad-accum × (world / sp) whoever fills the rest.
        divisor = int(world // sp) * (micro if isinstance(micro, int) else 1)
        if divisor > 0:  # a micro batch of 0 (or less) is its own error, not a divisibility question
            out["config.auto_batch_divisor"] = divisor
            out["config.auto_batch_remainder"] = train % divisor
        else:
            out["config.auto_batch_checkable"] = False
    return out
