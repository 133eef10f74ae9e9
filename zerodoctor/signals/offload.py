"""Signals, offload: what is offloaded, what it costs per step, and what would fit without it.

Parameter offload (ZeRO-3) moves every parameter over PCIe twice per step; optimizer
offload moves gradients and updated parameters once and runs Adam on the CPU. When
optimizer-only offload fits, parameter offload is pure cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerodoctor.signals import view as runview
from zerodoctor.deepspeed.modelstates import model_state_bytes
from zerodoctor.signals.view import RunView, Steps
from zerodoctor.signals.inputs import OPTIMIZER_TIME, STEPS
from zerodoctor.signals.base import StepWindow, nested, ratios, shown_by
from zerodoctor.signals.memory import HEADROOM
from zerodoctor.messages.units import GB

_OFFLOADED = ("cpu", "nvme")
# DeepSpeed builds these only for an optimizer offloaded to the host (runtime/engine.py _configure_basic_optimizer).
_HOST_OPTIMIZERS = ("DeepSpeedCPUAdam", "DeepSpeedCPUAdagrad", "DeepSpeedCPULion")

_stepwise = shown_by(STEPS)
_timed = shown_by(STEPS, switch=OPTIMIZER_TIME)

READS = ("run.params", "run.world_size", "run.device_memory_bytes")

SIGNALS = [
    _stepwise("offload.optimizer", "bool", "offload_optimizer.device is cpu or nvme"),
    _stepwise("offload.param", "bool", "offload_param.device is cpu or nvme"),
    _timed("offload.optimizer_fraction", "ratio", "optimizer step time / step time, per step", per_step=True),
    _stepwise("offload.optimizer_only_gb", "GB", "model states per GPU under ZeRO-3 with optimizer-only offload"),
    _stepwise("offload.optimizer_only_fits", "bool",
              f"ZeRO-3 with optimizer-only offload fits in {HEADROOM:.0%} of device memory",
              label="whether optimizer-only offload fits in device memory"),
]


STEP_FIELDS = {"optim_s": "mean", "step_time_s": "max"}


@dataclass
class Fold(runview.Fold):
    VERSION = 1  # of the saved state: bump it when the fields or what they hold change
    recent: list[list[Any]] = field(default_factory=list)  # columns of the last WINDOW steps: steps, optimizer share

    def add_steps(self, block: Steps, view: RunView) -> None:
        steps, optim, total = StepWindow.tail(block, "step", "optim_s", "step_time_s")
        StepWindow.extend(self.recent, [steps, ratios(optim, total)])


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    config = view.config
    host_optimizer = any((e.get("data") or {}).get("optimizer") in _HOST_OPTIMIZERS
                         for e in view.events.get("log", []) if e.get("what") == "engine_setup")
    out: dict[str, Any] = {
        "offload.optimizer": (nested(config, "zero_optimization.offload_optimizer.device") in _OFFLOADED
                              or host_optimizer),
        "offload.param": nested(config, "zero_optimization.offload_param.device") in _OFFLOADED,
    }
    out["offload.optimizer_fraction"] = StepWindow.series(view.fold(__name__).recent, 1)
    params, world = values.get("run.params"), values.get("run.world_size")
    device = values.get("run.device_memory_bytes")
    if params and world:
        need = model_state_bytes(params, world, 3, "optimizer")
        out["offload.optimizer_only_gb"] = need / GB
        if device:
            out["offload.optimizer_only_fits"] = need <= HEADROOM * device
    return out
