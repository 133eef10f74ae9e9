"""Signals, offload: what is offloaded, what it costs per step, and what would fit without it.

Parameter offload (ZeRO-3) moves every parameter over PCIe twice per step; optimizer
offload moves gradients and updated parameters once and runs Adam on the CPU. When
optimizer-only offload fits, parameter offload is pure cost.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.modelstates import model_state_bytes
from zerodoctor.signals.base import Signal, StepSeries, nested, ratio
from zerodoctor.signals.memory import HEADROOM
from zerodoctor.store.runs import RunData

_OFFLOADED = ("cpu", "nvme")

SIGNALS = [
    Signal("offload.optimizer", "bool", "offload_optimizer.device is cpu or nvme"),
    Signal("offload.param", "bool", "offload_param.device is cpu or nvme"),
    Signal("offload.optimizer_fraction", "ratio", "optimizer step time / step time, per step", per_step=True),
    Signal("offload.optimizer_only_gb", "GB", "model states per GPU under ZeRO-3 with optimizer-only offload"),
    Signal("offload.optimizer_only_fits", "bool",
           f"ZeRO-3 with optimizer-only offload fits in {HEADROOM:.0%} of device memory"),
]


def compute(run: RunData, values: dict[str, Any]) -> dict[str, Any]:
    config = run.first_start().get("config") or {}
    out: dict[str, Any] = {
        "offload.optimizer": nested(config, "zero_optimization.offload_optimizer.device") in _OFFLOADED,
        "offload.param": nested(config, "zero_optimization.offload_param.device") in _OFFLOADED,
    }
    steps = run.steps.get("step", [])
    out["offload.optimizer_fraction"] = StepSeries.of(
        steps, ratio(run.steps.get("optim_s", []), run.steps.get("step_time_s", [])))
    params, world, device = values.get("run.params"), values.get("run.world_size"), values.get("run.device_memory_bytes")
    if params and world:
        need = model_state_bytes(params, world, 3, "optimizer")
        out["offload.optimizer_only_gb"] = need / 1e9
        if device:
            out["offload.optimizer_only_fits"] = need <= HEADROOM * device
    return out
