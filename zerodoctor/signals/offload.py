"""Signals, offload: what is offloaded, what the optimizer step costs per step, and what would fit without it.

Parameter offload (ZeRO-3) moves every parameter over PCIe twice per step; optimizer
offload moves gradients and updated parameters once and runs Adam on the CPU. When
optimizer-only offload fits, parameter offload is pure cost.

The verdict on a slow optimizer step is made here, from what the run showed: a console log
that never printed the config nor DeepSpeed's "Basic Optimizer" line still shows the step's
share (``wall_clock_breakdown``), and is told as what it can know. The remedies' conditions
are made here too, each from the run's own numbers, so no rule offers a remedy the run refutes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from zerodoctor.signals import view as runview
from zerodoctor.deepspeed.modelstates import model_state_bytes
from zerodoctor.signals.view import RunView, Steps
from zerodoctor.signals.inputs import CONFIG, OPTIMIZER_TIME, RUN_DUMP, STEPS
from zerodoctor.signals.base import StepWindow, nested, ratios, shown_by, verdict
from zerodoctor.signals.memory import HEADROOM
from zerodoctor.messages.units import GB

_OFFLOADED = ("cpu", "nvme")
# DeepSpeed builds these only for an optimizer offloaded to the host (runtime/engine.py _configure_basic_optimizer).
_HOST_OPTIMIZERS = ("DeepSpeedCPUAdam", "DeepSpeedCPUAdagrad", "DeepSpeedCPULion")
# ... and these only for one on the device (FusedAdam, FusedLamb, FusedLion): such a line settles "not offloaded",
# where torch's own AdamW settles nothing (the optimizer's torch_adam runs it on the offloaded partition).
_DEVICE_ONLY = ("Fused",)
# The optimizer step's share of the step from which it is the step's bottleneck: more than all the rest together.
DOMINANT = 0.5

_stepwise = shown_by(STEPS)
_timed = shown_by(STEPS, switch=OPTIMIZER_TIME)
_configured = shown_by(CONFIG, switch=RUN_DUMP)
_verdict = partial(verdict, shown_by=(STEPS,), switch=OPTIMIZER_TIME)

READS = ("run.params", "run.world_size", "run.device_memory_bytes", "run.zero_stage", "run.precision")

SIGNALS = [
    _stepwise("offload.optimizer", "bool", "offload_optimizer.device is cpu or nvme"),
    _stepwise("offload.param", "bool", "offload_param.device is cpu or nvme"),
    _timed("offload.optimizer_fraction", "ratio", "optimizer step time / step time, per step", per_step=True),
    _timed("offload.optimizer_share", "ratio", "optimizer step time / step time (median of the last steps)"),
    _timed("offload.optimizer_s", "s", "optimizer step time (median of the last steps)"),
    _timed("offload.first_step", "step", "first step of the window the optimizer share is the median of"),
    _timed("offload.last_step", "step", "last step of that window"),
    _verdict("offload.step_verdict",
             f"what the run shows of the optimizer step's cost: cpu_adam (the step is {DOMINANT:.0%} of each step or "
             "more, the optimizer offloaded to the CPU, under ZeRO-3), cpu_adam_allgather (the same below stage 3, "
             "where the step ends in the all-gather of the updated parameters), cpu_adam_params (the parameters "
             "offloaded too), nvme (the optimizer on NVMe), unseen (the run never shows whether the optimizer is "
             "offloaded), not_offloaded (the config shows no offload), minor (the step is less)",
             ("cpu_adam", "cpu_adam_allgather", "cpu_adam_params", "nvme", "unseen", "not_offloaded", "minor")),
    _timed("offload.params_per_s", "parameters",
           "parameters updated per second by each rank's optimizer step (its partition, parameters / ranks, over the "
           "median optimizer step time: a floor of the optimizer's own speed, the step holding more than Adam)"),
    _configured("offload.pin_memory", "bool", "offload_optimizer.pin_memory (DeepSpeed's default: false)"),
    _configured("offload.omp_threads", "threads", "OMP_NUM_THREADS of the ranks (CPU Adam's OpenMP threads), when set"),
    _stepwise("offload.optimizer_only_gb", "GB", "model states per GPU under ZeRO-3 with optimizer-only offload"),
    _stepwise("offload.optimizer_only_fits", "bool",
              f"ZeRO-3 with optimizer-only offload fits in {HEADROOM:.0%} of device memory",
              label="whether optimizer-only offload fits in device memory"),
    _configured("offload.none_gb", "GB", "model states per GPU at the run's stage with nothing offloaded"),
    _configured("offload.none_fits", "bool",
                f"the run's stage with nothing offloaded fits in {HEADROOM:.0%} of device memory"),
    _configured("offload.none_fit_known", "bool", "device memory is known beside offload.none_gb"),
    _configured("offload.none_refuted", "bool",
                "device memory is known and too small for the run's stage with nothing offloaded"),
    _configured("offload.optimizer_only_refuted", "bool",
                "device memory is known and too small for ZeRO-3 with optimizer-only offload"),
]


STEP_FIELDS = {"optim_s": "mean", "step_time_s": "max"}


@dataclass
class Fold(runview.Fold):
    VERSION = 2  # of the saved state: bump it when the fields or what they hold change
    recent: list[list[Any]] = field(default_factory=list)  # the last WINDOW steps: step, optimizer share, optimizer s

    def add_steps(self, block: Steps, view: RunView) -> None:
        steps, optim, total = StepWindow.tail(block, "step", "optim_s", "step_time_s")
        StepWindow.extend(self.recent, [steps, ratios(optim, total), optim])


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    config = view.config
    built = [(e.get("data") or {}).get("optimizer") for e in view.events.get("log", [])
             if e.get("what") == "engine_setup" and (e.get("data") or {}).get("optimizer")]
    device = nested(config, "zero_optimization.offload_optimizer.device")
    out: dict[str, Any] = {
        "offload.optimizer": device in _OFFLOADED or any(b in _HOST_OPTIMIZERS for b in built),
        "offload.param": nested(config, "zero_optimization.offload_param.device") in _OFFLOADED,
    }
    fold = view.fold(__name__)
    shares, optim = StepWindow.series(fold.recent, 1), StepWindow.series(fold.recent, 2)
    out["offload.optimizer_fraction"] = shares
    if shares is not None:
        known = [s for s, v in zip(shares.steps, shares.values) if v is not None]
        out.update({"offload.optimizer_share": shares.summary, "offload.first_step": known[0],
                    "offload.last_step": known[-1],
                    "offload.step_verdict": _judge(shares.summary, out, device, values.get("run.zero_stage"),
                                                   bool(config) or any(b.startswith(_DEVICE_ONLY) for b in built))})
    params, world = values.get("run.params"), values.get("run.world_size")
    if optim is not None:
        out["offload.optimizer_s"] = optim.summary
        if params and world and optim.summary > 0:
            out["offload.params_per_s"] = params / world / optim.summary
    if out["offload.optimizer"] and config:
        out["offload.pin_memory"] = bool(nested(config, "zero_optimization.offload_optimizer.pin_memory", False))
    threads = (view.first_start().get("env") or {}).get("OMP_NUM_THREADS")
    if threads and str(threads).isdigit():
        out["offload.omp_threads"] = int(threads)
    out.update(_fits(values, config))
    return out


def _judge(share: float, out: dict[str, Any], device: str | None, stage: int | None, seen: bool) -> str:
    if share < DOMINANT:
        return "minor"
    if out["offload.param"]:
        return "cpu_adam_params"
    if out["offload.optimizer"]:
        if device == "nvme":
            return "nvme"
        # ZeRO-1 and 2 all-gather the updated partitions inside the step (optimizer_allgather); ZeRO-3 does not
        return "cpu_adam" if stage == 3 else "cpu_adam_allgather"
    return "not_offloaded" if seen else "unseen"


def _fits(values: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Model states per GPU of the remedies, and whether the run's device memory refutes them."""
    params, world = values.get("run.params"), values.get("run.world_size")
    device, stage, precision = (values.get("run.device_memory_bytes"), values.get("run.zero_stage"),
                                values.get("run.precision"))
    out: dict[str, Any] = {"offload.none_refuted": False, "offload.optimizer_only_refuted": False}
    if not params or not world:
        return out
    need = model_state_bytes(params, world, 3, "optimizer", precision=precision)
    out["offload.optimizer_only_gb"] = need / GB
    if device:
        out["offload.optimizer_only_fits"] = need <= HEADROOM * device
        out["offload.optimizer_only_refuted"] = not out["offload.optimizer_only_fits"]
    if config and stage in (1, 2, 3):
        none = model_state_bytes(params, world, stage, precision=precision)
        out["offload.none_gb"], out["offload.none_fit_known"] = none / GB, bool(device)
        if device:
            out["offload.none_fits"] = none <= HEADROOM * device
            out["offload.none_refuted"] = not out["offload.none_fits"]
    return out
