"""Signals, numerics: fp16 loss scaling and non-finite losses or gradients.

DeepSpeed's ``DynamicLossScaler`` is deterministic: given the config and which steps
overflowed, its scale and hysteresis follow. We replay it step by step as the run goes
(re-syncing to the scale the run reported whenever one is known) to forecast how many more
overflows the run can take before DeepSpeed raises "Current loss scale already at minimum".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from zerodoctor import runview
from zerodoctor.deepspeed_defaults import FP16
from zerodoctor.runview import RunView
from zerodoctor.signals.base import Signal, nested

CLEAN_STREAK = 20  # clean steps in a row that end the calibration phase / make a scale "held"
RECENT = 100  # steps in the recent-overflow window
MIN_SCALE_MESSAGE = "loss scale already at minimum"

SIGNALS = [
    Signal("fp16.enabled", "bool", "fp16 mixed precision is on"),
    Signal("fp16.dynamic", "bool", "fp16 with dynamic loss scaling (loss_scale 0)"),
    Signal("fp16.static_scale", "scale", "the fixed loss_scale, when one is set"),
    Signal("fp16.min_loss_scale", "scale", "min_loss_scale (DeepSpeed default 1)"),
    Signal("fp16.overflow_count", "steps", "steps skipped for overflow"),
    Signal("fp16.overflow_rate", "ratio", "skipped steps / steps"),
    Signal("fp16.recent_overflow_rate", "ratio", f"skipped share of the last {RECENT} steps (fewer in a short run)"),
    Signal("fp16.recent_steps", "steps", f"steps in that window: {RECENT}, or all of a shorter run"),
    Signal("fp16.calibration_overflows", "steps", f"overflows before the first {CLEAN_STREAK} clean steps in a row"),
    Signal("fp16.late_overflows", "steps", "overflows after calibration"),
    Signal("fp16.first_late_overflow_step", "step", "first overflow after calibration"),
    Signal("fp16.loss_scale_last", "scale", "loss scale of the last recorded step"),
    Signal("fp16.max_held_scale", "scale", f"largest scale that ran {CLEAN_STREAK} steps without overflow"),
    Signal("fp16.overflows_to_min", "overflows", "consecutive overflows left before DeepSpeed aborts at min scale"),
    Signal("fp16.calibrated_scale_power", "log2", "log2 of the first scale that held: an initial_scale_power that skips calibration"),
    Signal("fp16.suggested_lr", "lr", "stable_lr when lr grew into the overflows, else half the last lr"),
    Signal("fp16.hit_min_scale", "bool", "DeepSpeed raised 'Current loss scale already at minimum'"),
    Signal("fp16.stable_lr", "lr", "largest lr before late overflows began"),
    Signal("fp16.lr_last", "lr", "lr of the last recorded step"),
    Signal("numerics.nonfinite_loss_steps", "steps", "steps whose loss was NaN or inf"),
    Signal("numerics.nonfinite_grad_steps", "steps", "applied (not skipped) steps whose grad norm was NaN or inf"),
    Signal("numerics.first_nonfinite_step", "step", "first step with a non-finite loss or applied grad norm"),
]


STEP_FIELDS = {"overflow": "max", "loss_scale": "min", "lr": "max", "loss_nonfinite": "max",
               "grad_nonfinite": "max"}


@dataclass
class Fold(runview.Fold):
    """The overflow history folded: counts, the calibration phase, held scales, the scaler replay."""

    known: int = 0  # steps whose overflow flag is known
    overflows: int = 0
    recent: list[int] = field(default_factory=list)  # overflow flags of the last RECENT known steps
    clean: int = 0  # clean known steps in a row, now
    calibrated: bool = False  # CLEAN_STREAK clean steps in a row were seen: later overflows are late
    calibration_overflows: int = 0
    late_overflows: int = 0
    first_late_step: int | None = None
    scale_last: float | None = None
    first_held_scale: float | None = None
    max_held_scale: float | None = None
    scales_seen: list[float] = field(default_factory=list)  # the first two distinct scales (a static one is alone)
    replay: dict[str, Any] | None = None  # _ScalerReplay's state
    lr_last: float | None = None
    lr_max_before_late: float | None = None
    nonfinite_loss_steps: int = 0
    nonfinite_grad_steps: int = 0
    first_nonfinite_step: int | None = None
    steps: int = 0

    def step(self, row: dict[str, Any], view: RunView) -> None:
        self.steps += 1
        scale, flag, lr = row["loss_scale"], row["overflow"], row["lr"]
        if scale is not None and scale not in self.scales_seen and len(self.scales_seen) < 2:
            self.scales_seen.append(scale)
        if (row["loss_nonfinite"] or (row["grad_nonfinite"] and not flag)) and self.first_nonfinite_step is None:
            self.first_nonfinite_step = row["step"]
        self.nonfinite_loss_steps += bool(row["loss_nonfinite"])
        self.nonfinite_grad_steps += bool(row["grad_nonfinite"] and not flag)
        if flag is not None:
            self._overflow(row["step"], bool(flag), scale, view)
        if lr is not None:
            self.lr_last = lr
            if self.first_late_step is None:
                self.lr_max_before_late = lr if self.lr_max_before_late is None else max(self.lr_max_before_late, lr)

    def _overflow(self, step: int, flag: bool, scale: float | None, view: RunView) -> None:
        self.known += 1
        self.overflows += flag
        self.recent.append(int(flag))
        if len(self.recent) > 2 * RECENT:
            del self.recent[:-RECENT]
        if flag:
            self.clean = 0
            if self.calibrated:
                self.late_overflows += 1
                if self.first_late_step is None:
                    self.first_late_step = step
            else:
                self.calibration_overflows += 1
        else:
            self.clean += 1
            if self.clean >= CLEAN_STREAK:
                self.calibrated = True
                if scale is not None:
                    self.first_held_scale = self.first_held_scale or scale
                    self.max_held_scale = scale if self.max_held_scale is None else max(self.max_held_scale, scale)
        if scale is not None:
            self.scale_last = scale
        config = view.config
        replay = _ScalerReplay(config, nested(config, "fp16.min_loss_scale", FP16["min_loss_scale"]), self.replay)
        if scale is not None:
            replay.scale = scale  # the scale this step used, as reported: re-sync
        replay.update(flag)
        self.replay = replay.state()


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    fold: Fold = view.fold(__name__)
    out: dict[str, Any] = {}
    config = view.config
    hit_min = any(MIN_SCALE_MESSAGE in (e.get("message") or "") for e in view.events.get("exception", [])) or any(
        e.get("what") == "min_scale_exit" for e in view.events.get("log", []))
    out["fp16.hit_min_scale"] = hit_min
    if fold.steps:
        out.update({"numerics.nonfinite_loss_steps": fold.nonfinite_loss_steps,
                    "numerics.nonfinite_grad_steps": fold.nonfinite_grad_steps,
                    "numerics.first_nonfinite_step": fold.first_nonfinite_step})
    precision = values.get("run.precision")
    # Only DeepSpeed's static LossScaler prints "Gradients are non-finite", and only its dynamic one
    # lowers the scale ("reducing to", hysteresis): the messages say which scaler ran (sources/deepspeed.py).
    logged = {e.get("what") for e in view.events.get("log", [])}
    static_seen = "static_loss_scaler" in logged
    dynamic_seen = "dynamic_loss_scaler" in logged
    scaled = hit_min or static_seen or bool(fold.scales_seen)
    fp16 = precision == "fp16" if precision else (True if scaled else None)
    out["fp16.enabled"] = fp16
    if not fp16:
        return out
    static = nested(config, "fp16.loss_scale", FP16["loss_scale"]) or 0
    if not config and not hit_min and not dynamic_seen:
        static = fold.scales_seen[0] if len(fold.scales_seen) == 1 and fold.overflows else 0
    out["fp16.dynamic"] = not (static or static_seen)
    out["fp16.static_scale"] = static or None
    min_scale = nested(config, "fp16.min_loss_scale", FP16["min_loss_scale"])
    out["fp16.min_loss_scale"] = min_scale
    if not fold.known:
        return out
    out["fp16.overflow_count"] = fold.overflows
    out["fp16.overflow_rate"] = fold.overflows / fold.known
    recent = fold.recent[-RECENT:]
    out["fp16.recent_overflow_rate"] = sum(recent) / len(recent)
    out["fp16.recent_steps"] = len(recent)
    out["fp16.calibration_overflows"] = fold.calibration_overflows
    out["fp16.late_overflows"] = fold.late_overflows
    out["fp16.first_late_overflow_step"] = fold.first_late_step
    out["fp16.loss_scale_last"] = fold.scale_last
    out["fp16.max_held_scale"] = fold.max_held_scale
    if fold.first_held_scale:
        out["fp16.calibrated_scale_power"] = int(math.log2(fold.first_held_scale))
    if out["fp16.dynamic"]:
        left = 0 if hit_min else _ScalerReplay(config, min_scale, fold.replay).overflows_to_min()
        out["fp16.overflows_to_min"] = left
    if fold.lr_last is not None:
        stable = fold.lr_max_before_late if fold.first_late_step is not None else None
        suggested = stable if stable is not None and stable < 0.95 * fold.lr_last else fold.lr_last / 2
        out.update({"fp16.lr_last": fold.lr_last, "fp16.stable_lr": stable, "fp16.suggested_lr": suggested})
    return out


class _ScalerReplay:
    """DeepSpeed's ``DynamicLossScaler.update_scale`` (runtime/fp16/loss_scaler.py), state only."""

    def __init__(self, config: dict, min_scale: float, state: dict[str, Any] | None = None) -> None:
        self.window = nested(config, "fp16.loss_scale_window", FP16["loss_scale_window"])
        self.delayed_shift = nested(config, "fp16.hysteresis", FP16["hysteresis"])
        self.consecutive = nested(config, "fp16.consecutive_hysteresis", FP16["consecutive_hysteresis"])
        self.min_scale = min_scale
        if state is None:
            self.scale = 2.0 ** nested(config, "fp16.initial_scale_power", FP16["initial_scale_power"])
            self.hysteresis, self.it, self.last_overflow = self.delayed_shift, 0, -1
        else:
            self.scale, self.hysteresis, self.it, self.last_overflow = (
                state["scale"], state["hysteresis"], state["it"], state["last_overflow"])

    def state(self) -> dict[str, Any]:
        return {"scale": self.scale, "hysteresis": self.hysteresis, "it": self.it, "last_overflow": self.last_overflow}

    def update(self, overflow: bool) -> bool:
        """Apply one step; return False where DeepSpeed would raise at the minimum scale."""
        if overflow:
            if self.delayed_shift == 1 or self.hysteresis == 1:
                if self.scale == self.min_scale:
                    return False
                self.scale = max(self.scale / 2, self.min_scale)
            else:
                self.hysteresis -= 1
            self.last_overflow = self.it
        else:
            if self.consecutive:
                self.hysteresis = self.delayed_shift
            stable = self.it - self.last_overflow - 1
            if stable > 0 and stable % self.window == 0:
                self.hysteresis = self.delayed_shift
                self.scale *= 2
        self.it += 1
        return True

    def overflows_to_min(self) -> int:
        """Consecutive overflows from here until DeepSpeed raises (this replay is consumed)."""
        left = 1
        while self.update(True):
            left += 1
        return left
