"""Signals, throughput: the model FLOPs a GPU reaches per second against its nominal peak (MFU).

A run can be healthy by every other measure (no collective dominates, no optimizer step, no stall) and still
train at a small share of what its GPUs can do: a micro-batch too small to fill them, fp32 where bf16 was
meant, a Python-bound loop. The one number that shows it is model FLOPs utilisation, the model's FLOPs per
second per GPU over the GPU's peak for the run's precision. The achieved figure is the one the training script
printed where it prints one (Megatron's ``throughput per GPU (TFLOP/s/GPU)`` or ``TFLOPs``: it knows the
model's shape), else 6 × parameters × tokens per step (Kaplan et al. 2020, §2.1) over the step time, where the
probe counted the tokens. The peak is the GPU table's (``deepspeed/steptime.py``), found by the device's name
(the probe's, or an ``nvidia-smi`` table's row in the console: ``sources/gpu_table.py``).

The flops profiler's summary is not used: its FLOPS under Megatron came out 10× below the log's (DeepSpeed#2565:
13.36 against 125.18 TFLOPS on one run), too far off to call a fault on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerodoctor.deepspeed.steptime import gpu_named
from zerodoctor.signals import view as runview
from zerodoctor.signals.base import Signal, StepWindow, verdict
from zerodoctor.signals.view import RunView, Steps

# Below this share of the peak the run is doing something wrong, not merely untuned. Published ZeRO and Megatron
# runs reach 30-55 % (ZeRO-100B: 38 TFLOPS per V100, 30 %; Megatron-LM 2021: 52 % on A100s at 1T parameters;
# BLOOM-176B: 48 %); 15 % is half the lowest of them, so a run under it has lost more than any tuning explains.
LOW_MFU = 0.15
TRAINING_FLOPS_PER_PARAM_TOKEN = 6  # forward 2, backward 4 (Kaplan et al. 2020, §2.1)

GPU_NAME = ("run under `zerodoctor run` (it records the GPU's name), or have the job print `nvidia-smi`'s table into "
            "its log")
ACHIEVED = ("Megatron's --log-throughput prints each iteration's TFLOP/s per GPU; under `zerodoctor run` the probe "
            "counts the tokens of each step (a language model's token ids)")

READS = ("run.params", "run.precision", "run.device_name", "run.host_only")

SIGNALS = [
    Signal("throughput.tflops", "TFLOP/s", "model TFLOP/s per GPU the run reached (median of the last steps): as "
           "the training script printed it, else 6 x parameters x tokens per step over the step time",
           label="model TFLOP/s per GPU", switch=ACHIEVED),
    Signal("throughput.gpu", "name", "the GPU kind the device's name is, among the step-time model's table",
           label="GPU kind", switch=GPU_NAME),
    Signal("throughput.peak_tflops", "TFLOP/s", "the GPU's nominal dense peak TFLOP/s for the run's precision "
           "(fp16/bf16 tensor peak, or fp32's)", label="the GPU's nominal peak TFLOP/s", switch=GPU_NAME),
    Signal("throughput.mfu", "ratio", "model FLOPs utilisation: model TFLOP/s per GPU over the GPU's peak",
           label="model FLOPs utilisation"),
    Signal("throughput.first_step", "step", "first step of the window the TFLOP/s are the median of"),
    Signal("throughput.last_step", "step", "last step of that window"),
    verdict("throughput.verdict",
            f"model FLOPs utilisation judged: low (under {LOW_MFU:.0%} of the peak for the run's precision), "
            "low_if_half (under it against the fp16/bf16 peak, the run's precision not shown), fine, "
            "host_only (DeepSpeed's CPU accelerator: no GPU)", ("low", "low_if_half", "fine", "host_only"),
            label="model FLOPs utilisation against the GPU's peak"),
]

STEP_FIELDS = {"tflops": "mean", "tokens": "mean", "step_time_s": "max"}


@dataclass
class Fold(runview.Fold):
    VERSION = 1  # of the saved state: bump it when the fields or what they hold change
    recent: list[list[Any]] = field(default_factory=list)  # the last WINDOW steps: step, printed TFLOP/s, tokens, s

    def add_steps(self, block: Steps, view: RunView) -> None:
        StepWindow.extend(self.recent, StepWindow.tail(block, "step", "tflops", "tokens", "step_time_s"))


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    if values.get("run.host_only"):
        return {"throughput.verdict": "host_only"}  # DeepSpeed's CPU accelerator: no GPU, no peak, nothing to judge
    fold: Fold = view.fold(__name__)
    out: dict[str, Any] = {}
    achieved = _achieved(fold, values.get("run.params"))
    if achieved is not None:
        out["throughput.tflops"], out["throughput.first_step"], out["throughput.last_step"] = achieved
    gpu = gpu_named(values.get("run.device_name"))
    if gpu is None:
        return out
    precision = values.get("run.precision")
    peak = gpu.peak_for(precision) / 1e12
    out.update({"throughput.gpu": gpu.name, "throughput.peak_tflops": peak})
    if achieved is None:
        return out
    mfu = achieved[0] / peak
    out["throughput.mfu"] = mfu
    out["throughput.verdict"] = "fine" if mfu >= LOW_MFU else "low" if precision else "low_if_half"
    return out


def _achieved(fold: Fold, params: float | None) -> tuple[float, int, int] | None:
    """TFLOP/s per GPU (median of the window), first and last step: printed, else from tokens and step time."""
    printed = StepWindow.series(fold.recent, 1)
    if printed is not None and printed.summary is not None:
        known = [s for s, v in zip(printed.steps, printed.values) if v is not None]
        return printed.summary, known[0], known[-1]
    if not params or not fold.recent:
        return None
    steps, _, tokens, seconds = fold.recent
    rates = [TRAINING_FLOPS_PER_PARAM_TOKEN * params * t / s / 1e12 if t and s else None
             for t, s in zip(tokens, seconds)]
    series = StepWindow.series([steps, rates], 1)
    if series is None or series.summary is None:
        return None
    known = [s for s, v in zip(series.steps, series.values) if v is not None]
    return series.summary, known[0], known[-1]
