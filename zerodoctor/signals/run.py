"""Signals, run facts: world size, ZeRO stage, precision, parameters, device, exit."""

from __future__ import annotations

from typing import Any

from zerodoctor.signals.base import Signal, nested
from zerodoctor.store.runs import RunData

SIGNALS = [
    Signal("run.world_size", "ranks", "ranks in the job (run_start, else the ranks seen)"),
    Signal("run.world_size_stated", "ranks", "world size the run itself stated (run_start or a logged message), not guessed"),
    Signal("run.ranks_seen", "ranks", "ranks that wrote at least one event"),
    Signal("run.zero_stage", "stage", "ZeRO stage 0-3"),
    Signal("run.precision", "name", "fp16, bf16 or fp32"),
    Signal("run.params", "parameters", "model parameters, unpartitioned"),
    Signal("run.steps", "steps", "optimizer steps recorded"),
    Signal("run.first_step", "step", "first optimizer step recorded"),
    Signal("run.last_step", "step", "last optimizer step recorded"),
    Signal("run.device_memory_bytes", "bytes", "total memory of one accelerator"),
    Signal("run.device_memory_gb", "GB", "total memory of one accelerator, 10^9 bytes"),
    Signal("run.device_name", "name", "accelerator name"),
    Signal("run.exit_code", "code", "worst exit code among ranks that reported one"),
]


def compute(run: RunData, values: dict[str, Any]) -> dict[str, Any]:
    start = run.first_start()
    config = start.get("config") or {}
    ranks = run.ranks()
    stage = start.get("zero_stage", nested(config, "zero_optimization.stage"))
    precision = start.get("precision")
    if precision is None and config:
        precision = "fp16" if nested(config, "fp16.enabled") else "bf16" if nested(config, "bf16.enabled") else None
    codes = [e["exit_code"] for e in run.events.get("run_end", []) if e.get("exit_code") is not None]
    mem = start.get("device_memory_bytes")
    stated = start.get("world_size") or _logged_world_size(run)
    return {
        "run.world_size": stated or (len(ranks) or None),
        "run.world_size_stated": stated,
        "run.ranks_seen": len(ranks) or None,
        "run.zero_stage": stage,
        "run.precision": precision,
        "run.params": start.get("params"),
        "run.steps": len(run.steps.get("step", [])) or None,
        "run.first_step": run.steps["step"][0] if run.steps.get("step") else None,
        "run.last_step": run.steps["step"][-1] if run.steps.get("step") else None,
        "run.device_memory_bytes": mem,
        "run.device_memory_gb": mem / 1e9 if mem else None,
        "run.device_name": start.get("device_name"),
        "run.exit_code": max(codes, key=abs) if codes else None,
    }


def _logged_world_size(run: RunData) -> int | None:
    """The world size a console message printed (the batch assertion's D, Trainer's header), when no run_start said."""
    for log in run.events.get("log", []):
        world = (log.get("data") or {}).get("world_size")
        if isinstance(world, int) and world > 0:
            return world
    return None
