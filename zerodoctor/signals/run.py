"""Signals, run facts: world size, ZeRO stage, precision, parameters, device, exit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerodoctor.events.dropped import dropped_by_rank
from zerodoctor.signals import view as runview
from zerodoctor.signals.view import RunView, Steps
from zerodoctor.signals.inputs import CONFIG, DEVICE, RUN_DUMP, STEPS
from zerodoctor.signals.base import Signal, StepWindow, nested, shown_by
from zerodoctor.messages.units import GB

_device = shown_by(DEVICE)
_dumped = shown_by(CONFIG, switch=RUN_DUMP)
_stepwise = shown_by(STEPS)

READS = ()

SIGNALS = [
    _dumped("run.world_size", "ranks", "ranks in the job (run_start, else at least the highest rank seen + 1)"),
    _dumped("run.world_size_stated", "ranks", "world size the run itself stated (run_start or a logged message), not "
                                              "guessed"),
    _dumped("run.ranks_seen", "ranks", "ranks that wrote at least one event"),
    _dumped("run.zero_stage", "stage", "ZeRO stage 0-3"),
    _dumped("run.precision", "name", "fp16, bf16 or fp32"),
    Signal("run.params", "parameters", "model parameters, unpartitioned"),
    _stepwise("run.steps", "steps", "optimizer steps recorded"),
    _stepwise("run.first_step", "step", "first optimizer step recorded"),
    _stepwise("run.last_step", "step", "last optimizer step recorded"),
    _stepwise("run.step_s", "s", "step time (median of the last steps, each step's slowest rank)"),
    _device("run.device_memory_bytes", "bytes", "total memory of one accelerator"),
    _device("run.device_memory_gb", "GB", "total memory of one accelerator, 10^9 bytes"),
    _dumped("run.device_name", "name", "accelerator name (run_start's, else the first GPU row of an nvidia-smi "
                                       "table in the console)"),
    _dumped("run.host_only", "bool", "the run trains on DeepSpeed's CPU accelerator (DS_ACCELERATOR=cpu in the "
                                     "run's environment, or the console's shared-memory collectives built): no "
                                     "device, no PCIe, no streams to overlap on"),
    _dumped("run.exit_code", "code", "worst exit code among ranks that reported one"),
    _dumped("run.ranks_ended", "ranks", "ranks that said they ended (run_end, the probe's or the wrapper's for a "
                                        "rank that died)"),
    _dumped("run.dropped_events", "events", "events the probe dropped rather than make training wait, all ranks"),
]


STEP_FIELDS = {"step_time_s": "max"}


@dataclass
class Fold(runview.Fold):
    VERSION = 1  # of the saved state: bump it when the fields or what they hold change
    steps: int = 0
    first_step: int | None = None
    last_step: int | None = None
    recent: list[list[Any]] = field(default_factory=list)  # the last WINDOW steps: step, step time

    def add_steps(self, block: Steps, view: RunView) -> None:
        steps = block.columns["step"]
        self.steps += len(steps)
        if self.first_step is None:
            self.first_step = steps[0]
        self.last_step = steps[-1]
        StepWindow.extend(self.recent, StepWindow.tail(block, "step", "step_time_s"))


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    start = view.first_start()
    config = view.config
    fold: Fold = view.fold(__name__)
    ranks = view.ranks()
    stage = start.get("zero_stage", nested(config, "zero_optimization.stage"))
    if stage is None:  # a console log without the config dump still says "Creating … ZeRO stage N optimizer"
        stage = next((e["data"]["zero_stage"] for e in view.events.get("log", [])
                      if e.get("what") == "engine_setup" and "zero_stage" in (e.get("data") or {})), None)
    precision = start.get("precision")
    if precision is None and config:
        precision = "fp16" if nested(config, "fp16.enabled") else "bf16" if nested(config, "bf16.enabled") else None
    codes = [e["exit_code"] for e in view.events.get("run_end", []) if e.get("exit_code") is not None]
    dropped = dropped_by_rank(view.events.get("run_end", []))
    mem = start.get("device_memory_bytes")
    stated = view.world_size_stated
    step_times = StepWindow.series(fold.recent, 1)
    return {
        "run.world_size": stated or (max(ranks) + 1 if ranks else None),  # a log of rank 3's lines: 4 ranks at least
        "run.world_size_stated": stated,
        "run.ranks_seen": len(ranks) or None,
        "run.zero_stage": stage,
        "run.precision": precision,
        "run.params": start.get("params"),
        "run.steps": fold.steps or None,
        "run.first_step": fold.first_step,
        "run.last_step": fold.last_step,
        "run.step_s": step_times.summary if step_times else None,
        "run.device_memory_bytes": mem,
        "run.device_memory_gb": mem / GB if mem else None,
        "run.device_name": start.get("device_name") or next(  # else an nvidia-smi table's row in the console
            (e["data"]["device_name"] for e in view.events.get("log", []) if e.get("what") == "gpu"), None),
        "run.host_only": (start.get("env") or {}).get("DS_ACCELERATOR") == "cpu" or any(  # else the console's word
            (e.get("data") or {}).get("accelerator") == "cpu" for e in view.events.get("log", [])
            if e.get("what") == "engine_setup"),
        "run.exit_code": max(codes, key=abs) if codes else None,
        "run.ranks_ended": len({e["rank"] for e in view.events.get("run_end", [])}) or None,
        "run.dropped_events": sum(dropped.values()) if dropped else None,
    }
