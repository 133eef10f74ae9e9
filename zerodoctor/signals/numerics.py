"""Signals, numerics: fp16 loss scaling and non-finite losses or gradients.

DeepSpeed's ``DynamicLossScaler`` is deterministic: given the config and which steps
overflowed, its scale and hysteresis follow. We replay it (re-syncing to the scale the
run reported whenever one is known) to forecast how many more overflows the run can
take before DeepSpeed raises "Current loss scale already at minimum".
"""

from __future__ import annotations

import math
from typing import Any

from zerodoctor.signals.base import Signal, nested
from zerodoctor.store.runs import RunData

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
    Signal("fp16.outlook", "text", "what happens next to the loss scale, in words"),
    Signal("fp16.calibrated_scale_power", "log2", "log2 of the first scale that held: an initial_scale_power that skips calibration"),
    Signal("fp16.suggested_lr", "lr", "stable_lr when lr grew into the overflows, else half the last lr"),
    Signal("fp16.hit_min_scale", "bool", "DeepSpeed raised 'Current loss scale already at minimum'"),
    Signal("fp16.stable_lr", "lr", "largest lr before late overflows began"),
    Signal("fp16.lr_last", "lr", "lr of the last recorded step"),
    Signal("numerics.nonfinite_loss_steps", "steps", "steps whose loss was NaN or inf"),
    Signal("numerics.nonfinite_grad_steps", "steps", "applied (not skipped) steps whose grad norm was NaN or inf"),
    Signal("numerics.first_nonfinite_step", "step", "first step with a non-finite loss or applied grad norm"),
]


def compute(run: RunData, values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    config = run.first_start().get("config") or {}
    hit_min = any(MIN_SCALE_MESSAGE in (e.get("message") or "") for e in run.events.get("exception", [])) or any(
        e.get("what") == "min_scale_exit" for e in run.events.get("log", []))
    out["fp16.hit_min_scale"] = hit_min
    out.update(_nonfinite(run))
    precision = values.get("run.precision")
    # Only DeepSpeed's static LossScaler prints "Gradients are non-finite" (sources/deepspeed.py).
    static_seen = any(e.get("what") == "static_loss_scaler" for e in run.events.get("log", []))
    scaled = hit_min or static_seen or any(s is not None for s in run.steps.get("loss_scale", []))
    fp16 = precision == "fp16" if precision else (True if scaled else None)
    out["fp16.enabled"] = fp16
    if not fp16:
        return out
    static = nested(config, "fp16.loss_scale", 0) or 0
    if not config and not hit_min:
        scales_seen = {s for s in run.steps.get("loss_scale", []) if s is not None}
        static = scales_seen.pop() if len(scales_seen) == 1 and any(run.steps.get("overflow", [])) else 0
    out["fp16.dynamic"] = not (static or static_seen)
    out["fp16.static_scale"] = static or None
    min_scale = nested(config, "fp16.min_loss_scale", 1)
    out["fp16.min_loss_scale"] = min_scale

    steps, flags = run.steps.get("step", []), run.steps.get("overflow", [])
    known = [(s, bool(f)) for s, f in zip(steps, flags) if f is not None]
    if not known:
        return out
    overflow = [f for _, f in known]
    out["fp16.overflow_count"] = sum(overflow)
    out["fp16.overflow_rate"] = sum(overflow) / len(overflow)
    recent = overflow[-RECENT:]
    out["fp16.recent_overflow_rate"] = sum(recent) / len(recent)
    out["fp16.recent_steps"] = len(recent)
    calib_end = _calibration_end(overflow)
    out["fp16.calibration_overflows"] = sum(overflow[:calib_end])
    late = [s for (s, f), i in zip(known, range(len(known))) if f and i >= calib_end]
    out["fp16.late_overflows"] = len(late)
    out["fp16.first_late_overflow_step"] = late[0] if late else None

    scales = [sc for sc, f in zip(run.steps.get("loss_scale", []), flags) if f is not None]
    observed = [sc for sc in scales if sc is not None]
    out["fp16.loss_scale_last"] = observed[-1] if observed else None
    out["fp16.max_held_scale"] = _max_held_scale(overflow, scales)
    held = _first_held_scale(overflow, scales)
    if held:
        out["fp16.calibrated_scale_power"] = int(math.log2(held))
    if out["fp16.dynamic"]:
        left = 0 if hit_min else _overflows_to_min(config, overflow, scales, min_scale)
        out["fp16.overflows_to_min"] = left
        out["fp16.outlook"] = ("DeepSpeed already aborted: 'Current loss scale already at minimum'" if hit_min else
                               f"{left} more overflow(s) in a row abort the run")
    out.update(_lr(run, late[0] if late else None))
    return out


def _first_held_scale(overflow: list[bool], scales: list[float | None]) -> float | None:
    return next((scales[i] for i in _held(overflow) if scales[i]), None)


def _held(overflow: list[bool]) -> list[int]:
    """Indices of the steps that end CLEAN_STREAK or more clean steps in a row."""
    held, clean = [], 0
    for i, f in enumerate(overflow):
        clean = 0 if f else clean + 1
        if clean >= CLEAN_STREAK:
            held.append(i)
    return held


def _calibration_end(overflow: list[bool]) -> int:
    """Index where the first run of CLEAN_STREAK clean steps begins (len if never)."""
    held = _held(overflow)
    return held[0] + 1 - CLEAN_STREAK if held else len(overflow)


def _max_held_scale(overflow: list[bool], scales: list[float | None]) -> float | None:
    return max((scales[i] for i in _held(overflow) if scales[i] is not None), default=None)


class _ScalerReplay:
    """DeepSpeed's ``DynamicLossScaler.update_scale`` (runtime/fp16/loss_scaler.py), state only."""

    def __init__(self, config: dict, min_scale: float) -> None:
        self.window = nested(config, "fp16.loss_scale_window", 1000)
        self.delayed_shift = nested(config, "fp16.hysteresis", 2)
        self.consecutive = nested(config, "fp16.consecutive_hysteresis", False)
        self.scale = 2.0 ** nested(config, "fp16.initial_scale_power", 16)
        self.min_scale = min_scale
        self.hysteresis, self.it, self.last_overflow = self.delayed_shift, 0, -1

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


def _overflows_to_min(config: dict, overflow: list[bool], scales: list[float | None], min_scale: float) -> int:
    """Replay the run through the scaler, then count consecutive overflows until it raises."""
    scaler = _ScalerReplay(config, min_scale)
    for f, seen in zip(overflow, scales):
        if seen is not None:
            scaler.scale = seen  # the scale this step used, as reported: re-sync
        scaler.update(f)
    left = 1
    while scaler.update(True):
        left += 1
    return left


def _lr(run: RunData, first_late: int | None) -> dict[str, Any]:
    lrs = [(s, lr) for s, lr in zip(run.steps.get("step", []), run.steps.get("lr", [])) if lr is not None]
    if not lrs:
        return {}
    last = lrs[-1][1]
    before = [lr for s, lr in lrs if first_late is None or s < first_late]
    stable = max(before) if before and first_late is not None else None
    suggested = stable if stable is not None and stable < 0.95 * last else last / 2
    return {"fp16.lr_last": last, "fp16.stable_lr": stable, "fp16.suggested_lr": suggested}


def _nonfinite(run: RunData) -> dict[str, Any]:
    steps = run.steps.get("step", [])
    loss_bad = run.steps.get("loss_nonfinite", [])
    grad_bad = run.steps.get("grad_nonfinite", [])
    overflow = run.steps.get("overflow", [])
    bad_loss = [s for s, b in zip(steps, loss_bad) if b]
    bad_grad = [s for s, b, f in zip(steps, grad_bad, overflow) if b and not f]
    if not steps:
        return {}
    first = min(bad_loss[:1] + bad_grad[:1], default=None)
    return {"numerics.nonfinite_loss_steps": len(bad_loss), "numerics.nonfinite_grad_steps": len(bad_grad),
            "numerics.first_nonfinite_step": first}
