"""Probe, run facts: a DeepSpeed engine and the user's config → the fields of ``run_start`` (secrets redacted)."""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from zerodoctor.deepspeed import config_file as deepspeed_config
from zerodoctor.deepspeed.defaults import BATCH_KEYS
from zerodoctor.probe.privacy import redact_argv, redact_config

# Exact names and prefixes worth seeing in a diagnosis. An allow-list, because a deny-list
# of secrets (tokens, keys, passwords) always misses one.
ENV_NAMES = frozenset({
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING",
    "CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK",
    "MASTER_ADDR", "MASTER_PORT", "DS_ACCELERATOR", "DS_SKIP_CUDA_CHECK", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_NCCL_BLOCKING_WAIT", "TORCH_DISTRIBUTED_DEBUG", "SLURM_JOB_ID", "SLURM_NNODES", "SLURM_PROCID",
    # the names a person searches for a job by: Slurm's array and step ids and node list (``watch --metrics``
    # serves them as zerodoctor_run_info), and an Indexed Job's index under Kubernetes (the pod's name is ``host``)
    "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_STEP_ID", "SLURM_JOB_NODELIST", "JOB_COMPLETION_INDEX",
})
ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
_SECRET_HINTS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def allowed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {
        k: v for k, v in sorted(environ.items())
        if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and not any(h in k for h in _SECRET_HINTS)
    }


def user_config(config: Any) -> dict[str, Any] | None:
    """The config as passed to ``deepspeed.initialize``: a dict, or a config file's content as DeepSpeed
    reads it (hjson: comments, trailing commas); None where it cannot be read (the caller then takes
    what the engine read), never an exception: the probe must not detach over a config it cannot parse."""
    if isinstance(config, dict):
        return json.loads(json.dumps(config, default=str))  # a snapshot, JSON-safe
    if isinstance(config, (str, Path)) and Path(config).is_file():
        try:
            read = deepspeed_config.read(Path(config).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        return user_config(read) if isinstance(read, dict) else None
    return None


def param_count(module: Any) -> int:
    """Unpartitioned parameters: under ZeRO-3 ``numel()`` is the local shard, ``ds_numel`` the whole."""
    return sum(getattr(p, "ds_numel", None) or p.numel() for p in module.parameters())


def precision(engine: Any) -> str:
    if engine.fp16_enabled():
        return "fp16"
    return "bf16" if engine.bfloat16_enabled() else "fp32"


def versions() -> dict[str, str | None]:
    import deepspeed
    import torch

    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            nccl = None
    return {"torch": torch.__version__, "deepspeed": deepspeed.__version__, "cuda": torch.version.cuda,
            "nccl": nccl, "python": platform.python_version()}


def run_start_fields(engine: Any, config: dict[str, Any] | None) -> dict[str, Any]:
    import torch

    fields: dict[str, Any] = {
        "world_size": engine.world_size,
        "local_rank": engine.local_rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "argv": redact_argv(sys.argv),
        "zero_stage": engine.zero_optimization_stage(),
        "precision": precision(engine),
        "config": redact_config(config),
        "derived": {key: getattr(engine, key)() for key in BATCH_KEYS},  # DeepSpeedEngine names its getters so
        "params": param_count(engine.module),
        "versions": versions(),
        "env": allowed_env(),
        "host_memory_bytes": host_memory_bytes(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        fields["device_name"], fields["device_memory_bytes"] = props.name, props.total_memory
    return fields


def host_memory_bytes() -> int | None:
    """What the kernel's OOM killer counts against: the host's MemTotal, or the cgroup's limit if lower."""
    limits = []
    try:
        with open("/proc/meminfo") as f:
            limits.append(int(next(line for line in f if line.startswith("MemTotal:")).split()[1]) * 1024)
    except (OSError, StopIteration, ValueError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                value = f.read().strip()
        except OSError:
            continue
        if value.isdigit():
            limits.append(int(value))
    return min(limits) if limits else None
