"""Signals, numerics: fp16 loss scaling and non-finite losses or gradients.

DeepSpeed's ``DynamicLossScaler`` is deterministic: given the config and which steps
overflowed, its scale and hysteresis follow. We replay it as the run goes (re-syncing to the
scale the run reported whenever one is known) to forecast how many more overflows the run can
take before DeepSpeed raises "Current loss scale already at minimum". Between overflows the
scaler only counts and doubles, so a run of clean steps is replayed at once, by arithmetic.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

from zerodoctor.signals import view as runview
from zerodoctor.signals.view import RunView, Steps
from zerodoctor.signals.inputs import FP16_LINES, STEPS, STEP_LINES
from zerodoctor.signals.base import last_known, shown_by, verdict
from zerodoctor.signals.config_values import Fp16Config, read_fp16, read_optimizer_lr

CLEAN_STREAK = 20  # clean steps in a row that end the calibration phase / make a scale "held"
RECENT = 100  # steps in the recent-overflow window
COLLAPSE_OVERFLOWS_LEFT = 8  # overflows in a row left before the minimum: the scale is collapsing ...
COLLAPSE_RATE, COLLAPSE_MIN_OVERFLOWS = 0.05, 3  # ... when this share of the recent steps, and this many, overflowed
# The initial scale's halvings fit in the first steps (2^32, the largest initial_scale_power, comes down to 1 in 32
# overflows, 33 with hysteresis 2): an overflow past this step is never calibration, whatever the log shows before
CALIBRATION_STEPS = 50
COLLAPSE_STREAK = 4  # overflows in consecutive steps past calibration: the scale halving again and again
# A scale pinned at this floor that still overflows is a collapse on its first overflow there: no calibration ends at
# 1 (2^16, the default start, is 16 halvings above it), and every step from here on is skipped
FLOOR_ALONE = 1.0
COSTLY_SHARE = 0.5  # skipped steps, of the steps the run shows, that make a calibration costly, never harmless
LR_ROSE = 0.95  # lr now above this share of the highest lr before the late overflows did not rise
MIN_SCALE_MESSAGE = "loss scale already at minimum"
# What a dynamic scaler does at min_loss_scale: ZeRO's DynamicLossScaler (runtime/fp16/loss_scaler.py, stages 1-3)
# raises MIN_SCALE_MESSAGE there since DeepSpeed 0.6.5 (raise_error_at_min_scale, on by default); FP16_Optimizer and
# FP16_UnfusedOptimizer (fused_optimizer.py, unfused_optimizer.py: stage 0) keep max(scale / 2, min_loss_scale) in
# every version, with no hysteresis, and skip every step that still overflows, as ZeRO did before 0.6.5
RAISES_SINCE = (0, 6, 5)

_fp16 = shown_by(STEPS, switch=FP16_LINES)
_stepwise = shown_by(STEPS, switch=STEP_LINES)

READS = ("run.precision", "run.zero_stage")

SIGNALS = [
    _fp16("fp16.enabled", "bool", "fp16 mixed precision is on", label="whether fp16 mixed precision is on"),
    _fp16("fp16.dynamic", "bool", "fp16 with dynamic loss scaling (loss_scale 0)"),
    _fp16("fp16.static_scale", "scale", "the fixed loss_scale, when one is set"),
    _fp16("fp16.min_loss_scale", "scale", "min_loss_scale (DeepSpeed default 1)"),
    _fp16("fp16.overflow_count", "steps", "steps skipped for overflow"),
    _fp16("fp16.overflow_rate", "ratio", "skipped steps / steps"),
    _fp16("fp16.recent_overflow_rate", "ratio", f"skipped share of the recent steps (the last {RECENT}, or all of a "
                                                "shorter run)"),
    _fp16("fp16.recent_steps", "steps", f"steps in that window: {RECENT}, or all of a shorter run"),
    _fp16("fp16.calibrated", "bool", f"the run went {CLEAN_STREAK} clean steps in a row: overflows before were "
                                     "calibration, after are late (a log cut mid-run may show none)"),
    _fp16("fp16.calibration_from_start", "bool", "the first overflow came at the initial scale "
                                                 f"(2^initial_scale_power) within the first {CALIBRATION_STEPS} "
                                                 "steps: the overflows shown began at the start"),
    _fp16("fp16.calibration_overflows", "steps", f"overflows before the first {CLEAN_STREAK} clean steps in a row"),
    _fp16("fp16.late_overflows", "steps", "overflows after calibration"),
    _fp16("fp16.first_late_overflow_step", "step", "first overflow after calibration"),
    _fp16("fp16.overflows_began_step", "step", "step the overflows began: the first after calibration, or the run's "
                                               "first where it never calibrated"),
    _fp16("fp16.loss_scale_last", "scale", "loss scale of the last recorded step"),
    _fp16("fp16.loss_scale_set", "scale",
          "loss scale last set: the log's last overflow line says it, or a step that did not overflow ran at it"),
    _fp16("fp16.scale_below_one", "bool", "the last recorded scale is below 1: the gradients overflow fp16 unscaled"),
    _fp16("fp16.max_held_scale", "scale", f"largest scale that ran {CLEAN_STREAK} steps without overflow"),
    _fp16("fp16.min_late_overflow_scale", "scale", "smallest scale an overflow after calibration was attempted at"),
    _fp16("fp16.fixed_scale", "scale", f"largest scale that ran {CLEAN_STREAK} steps without overflow and lies below "
                                       "every scale that overflowed after calibration: a loss_scale the run does not "
                                       "refute (none where it overflowed at every scale that held)"),
    verdict("fp16.scaler_verdict", "what the dynamic scaler did: aborted (DeepSpeed raised at min_loss_scale) | "
            "below_one | at_floor (the last overflow left the scale where it was: at min_loss_scale, still "
            f"overflowing) | collapsing (at most {COLLAPSE_OVERFLOWS_LEFT} overflows from the minimum, still "
            f"overflowing, or {COLLAPSE_STREAK} in consecutive steps past calibration) | collapsing_to_floor (the "
            "same where the scaler skips on at the minimum, never aborting) | calibration (overflows "
            "only while it found its scale) | costly_calibration (those overflows skipped most of the steps shown) | "
            "settled (none of these)",
            ("aborted", "below_one", "at_floor", "collapsing", "collapsing_to_floor", "calibration",
             "costly_calibration", "settled"),
            {"collapsing_to_floor": ("fp16.recent_overflow_rate", "fp16.recent_steps")},
            shown_by=(STEPS,), switch=FP16_LINES),
    _fp16("fp16.skipped_clean_steps", "steps", "steps shown that did not overflow"),
    _fp16("fp16.scale_set_power", "log2", "log2 of the scale last set: an initial_scale_power that skips what "
                                          "calibration the run shows"),
    _fp16("fp16.overflows_to_min", "overflows", "consecutive overflows left before DeepSpeed aborts at min scale"),
    _fp16("fp16.overflows_to_floor", "overflows", "consecutive overflows left before the scale reaches "
                                                  "min_loss_scale, where this run's scaler skips on, never aborting"),
    verdict("fp16.scaler_at_min", "what this run's scaler does at min_loss_scale: aborts (ZeRO's DynamicLossScaler, "
            "DeepSpeed 0.6.5+) | skips_on (FP16_Optimizer or FP16_UnfusedOptimizer at ZeRO stage 0, or ZeRO before "
            "0.6.5: the scale stays there and each step that overflows is skipped)", ("aborts", "skips_on"),
            shown_by=(STEPS,), switch=FP16_LINES),
    _fp16("fp16.calibrated_scale_power", "log2", "log2 of the first scale that held: an initial_scale_power that "
                                                 "skips calibration"),
    _fp16("fp16.suggested_lr", "lr", "the lr to configure: stable_lr when lr grew into the overflows, else half of "
                                     "lr_base (a schedule keeps its shape, each step's lr halved)"),
    _fp16("fp16.lr_base", "lr", "the config's optimizer lr, which a schedule scales; else the last step's lr"),
    _fp16("fp16.hit_min_scale", "bool", "DeepSpeed raised 'Current loss scale already at minimum'"),
    _fp16("fp16.stable_lr", "lr", "largest lr before the overflows began (after calibration; in a run that never "
                                  "calibrated, its first)"),
    verdict("fp16.lr_trend", "rose (the lr is higher than at any step before the late overflows began: they "
            "began as it rose) | steady (it is not)", ("rose", "steady"), shown_by=(STEPS,), switch=FP16_LINES),
    _fp16("fp16.lr_last", "lr", "lr of the last recorded step"),
    _stepwise("numerics.nonfinite_loss_steps", "steps", "steps whose loss was NaN or inf"),
    _stepwise("numerics.nonfinite_grad_steps", "steps", "applied (not skipped) steps whose grad norm was NaN or inf"),
    _stepwise("numerics.first_nonfinite_step", "step", "first step with a non-finite loss or applied grad norm"),
    _stepwise("numerics.first_nonfinite_lr", "lr", "lr at the first step with a non-finite loss or grad norm"),
    _stepwise("numerics.first_nonfinite_scale", "scale", "loss scale at the first step with a non-finite loss or "
                                                         "grad norm"),
    _stepwise("numerics.unscaled_skips", "steps", "steps skipped for non-finite gradients with no loss scale to lower "
                                                  "(bf16, or a precision the log does not name)",
              label="steps skipped with no loss scale to lower"),
    _stepwise("numerics.unscaled_skip_rate", "ratio", "those skipped steps / steps",
              label="share of steps skipped with no loss scale to lower"),
    verdict("numerics.skip_precision", "the precision those skips ran in: bf16 | unknown (the log does not say)",
            ("bf16", "unknown"), shown_by=(STEPS,), switch=STEP_LINES),
]


STEP_FIELDS = {"overflow": "max", "loss_scale": "min", "lr": "max", "loss_nonfinite": "max",
               "grad_nonfinite": "max"}


@dataclass
class Fold(runview.Fold):
    """The overflow history folded: counts, the calibration phase, held scales, the scaler replay."""

    VERSION = 3  # of the saved state: bump it when the fields or what they hold change
    known: int = 0  # steps whose overflow flag is known
    overflows: int = 0
    recent: list[int] = field(default_factory=list)  # overflow flags of the last RECENT known steps
    clean: int = 0  # clean known steps in a row, now
    late_streak: int = 0  # overflows in consecutive steps past calibration, now (a clean step ends it)
    last_overflow_step: int | None = None
    calibrated: bool = False  # CLEAN_STREAK clean steps in a row were seen: later overflows are late
    calibration_overflows: int = 0
    late_overflows: int = 0
    first_late_step: int | None = None
    first_overflow_scale: float | None = None  # the scale the first overflow was attempted at
    scale_last: float | None = None
    scale_last_clean: bool = False  # the step of ``scale_last`` did not overflow: it ran at the scale last set
    first_held_scale: float | None = None
    max_held_scale: float | None = None
    held_scales: list[float] = field(default_factory=list)  # distinct scales that held, largest first (a handful)
    min_late_scale: float | None = None
    scales_seen: list[float] = field(default_factory=list)  # the first two distinct scales (a static one is alone)
    scale_steps: int = 0  # steps that showed a scale, counted up to 2 (one alone cannot show it stayed put)
    replay: dict[str, Any] | None = None  # _ScalerReplay's state
    lr_last: float | None = None
    lr_max_before_late: float | None = None
    first_overflow_step: int | None = None
    lr_max_before_first: float | None = None  # the same before the run's first overflow: a run that never calibrated
    nonfinite_loss_steps: int = 0
    nonfinite_grad_steps: int = 0
    first_nonfinite_step: int | None = None
    first_nonfinite_at: list | None = None  # [lr, loss scale] at that step
    steps: int = 0

    def add_steps(self, block: Steps, view: RunView) -> None:
        c = block.columns
        steps, flags, scales, lrs = c["step"], c["overflow"], c["loss_scale"], c["lr"]
        self.steps += len(steps)
        if self.scale_steps < 2:
            self.scale_steps = min(self.scale_steps + sum(s is not None for s in scales), 2)
        if len(self.scales_seen) < 2:
            for scale in dict.fromkeys(scales):
                if scale is not None and scale not in self.scales_seen and len(self.scales_seen) < 2:
                    self.scales_seen.append(scale)
        self._nonfinite(steps, c["loss_nonfinite"], c["grad_nonfinite"], flags, lrs, scales)
        late_before, first_before = self.first_late_step is not None, self.first_overflow_step is not None
        if None in flags:  # the flag of a step no rank reported it for: only the known steps are replayed
            known = [i for i, f in enumerate(flags) if f is not None]
            self._overflows([steps[i] for i in known], [flags[i] for i in known], [scales[i] for i in known], view)
        else:
            self._overflows(steps, flags, scales, view)
        if last := last_known(lrs, 1):
            self.lr_last = lrs[last[0]]
        # lr up to the first late overflow (and up to the first overflow), that step's own lr excluded
        self.lr_max_before_late = _max_before(self.lr_max_before_late, steps, lrs, late_before, self.first_late_step)
        self.lr_max_before_first = _max_before(self.lr_max_before_first, steps, lrs, first_before,
                                               self.first_overflow_step)

    def _nonfinite(self, steps: list[int], loss: list[Any], grad: list[Any], flags: list[Any], lrs: list[Any],
                   scales: list[Any]) -> None:
        if not any(loss) and not any(grad):
            return
        applied = [bool(g and not f) for g, f in zip(grad, flags)]  # a skipped step's NaN grad is the overflow
        self.nonfinite_loss_steps += sum(map(bool, loss))
        self.nonfinite_grad_steps += sum(applied)
        if self.first_nonfinite_step is None:
            first = next((i for i, (bad_loss, bad_grad) in enumerate(zip(loss, applied)) if bad_loss or bad_grad), None)
            if first is not None:
                self.first_nonfinite_step, self.first_nonfinite_at = steps[first], [lrs[first], scales[first]]

    def _overflows(self, steps: list[int], flags: list[Any], scales: list[float | None], view: RunView) -> None:
        """The steps whose overflow flag is known: the clean runs between overflows at once, each overflow alone."""
        if not flags:
            return
        self.known += len(flags)
        overflowed = list(compress(range(len(flags)), flags))
        self.overflows += len(overflowed)
        self.recent.extend(int(bool(f)) for f in flags[-RECENT:])
        if len(self.recent) > 2 * RECENT:
            del self.recent[:-RECENT]
        fp16, _ = read_fp16(view.config)
        if fp16 is None:  # DeepSpeed refuses the section (a config finding): there is no scaler to replay
            replay = None
        else:
            replay = _ScalerReplay(fp16, self.replay)
        start = 0
        for end in (*overflowed, len(flags)):
            if end > start:
                self._clean(scales, start, end, replay)
            if end < len(flags):
                self._overflowed(steps[end], scales[end], replay)
            start = end + 1
        if last := last_known(scales, 1):
            self.scale_last, self.scale_last_clean = scales[last[0]], not flags[last[0]]
        if replay is not None:
            self.replay = replay.state()

    def _clean(self, scales: list[float | None], start: int, end: int, replay: _ScalerReplay | None) -> None:
        """Steps ``start:end`` without overflow: the streak grows, the scales past CLEAN_STREAK of it are held."""
        held_from = start + max(CLEAN_STREAK - 1 - self.clean, 0)
        self.clean += end - start
        self.late_streak = 0
        if held_from < end:
            self.calibrated = True
            if held := [s for s in scales[held_from:end] if s is not None]:
                if not self.first_held_scale:
                    self.first_held_scale = next((s for s in held if s), held[-1])
                top = max(held)
                self.max_held_scale = top if self.max_held_scale is None else max(self.max_held_scale, top)
                self.held_scales = sorted({*self.held_scales, *held}, reverse=True)[:_HELD_KEPT]
        if replay is not None:
            replay.clean(scales[start:end])

    def _overflowed(self, step: int, scale: float | None, replay: _ScalerReplay | None) -> None:
        if not self.calibration_overflows and not self.late_overflows:  # the run's first overflow
            self.first_overflow_scale, self.first_overflow_step = scale, step
        self.clean = 0
        if self.calibrated or step > CALIBRATION_STEPS:
            following = self.last_overflow_step is not None and step == self.last_overflow_step + 1
            self.late_streak = self.late_streak + 1 if following else 1
            self.late_overflows += 1
            if self.first_late_step is None:
                self.first_late_step = step
            if scale is not None and (self.min_late_scale is None or scale < self.min_late_scale):
                self.min_late_scale = scale
        else:
            self.calibration_overflows += 1
        self.last_overflow_step = step
        if replay is None:
            return
        if scale is not None:
            replay.scale = scale  # the scale this step used, as reported: re-sync
        replay.overflowed()


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    fold: Fold = view.fold(__name__)
    out: dict[str, Any] = {}
    config = view.config
    hit_min = any(MIN_SCALE_MESSAGE in (e.get("message") or "") for e in view.events.get("exception", [])) or any(
        e.get("what") == "min_scale_exit" for e in view.events.get("log", []))
    out["fp16.hit_min_scale"] = hit_min
    if fold.steps:
        lr, scale = fold.first_nonfinite_at or (None, None)
        out.update({"numerics.nonfinite_loss_steps": fold.nonfinite_loss_steps,
                    "numerics.nonfinite_grad_steps": fold.nonfinite_grad_steps,
                    "numerics.first_nonfinite_step": fold.first_nonfinite_step,
                    "numerics.first_nonfinite_lr": lr, "numerics.first_nonfinite_scale": scale})
    precision = values.get("run.precision")
    # Only the dynamic scaler lowers the scale ("reducing to", hysteresis) and only fp16 prints a scale.
    # "Gradients are non-finite, weights were not updated" is LossScalerBase's (DeepSpeed >= 0.19.6): the
    # static fp16 scaler prints it, and so does bf16, whose gradients DeepSpeed checks by default since
    # 0.19.3 (bf16.check_grad_overflow); without a precision it names neither (sources/deepspeed.py).
    logged = {e.get("what") for e in view.events.get("log", [])}
    static_seen = "static_loss_scaler" in logged
    dynamic_seen = "dynamic_loss_scaler" in logged
    amp = bool(logged & {"amp_overflow", "amp_min_scale"})  # apex's or fairseq's fp16 scaler (signals/amp.py)
    scaled = hit_min or dynamic_seen or amp or bool(fold.scales_seen)
    fp16 = precision == "fp16" if precision else (True if scaled else None)
    out["fp16.enabled"] = fp16
    if fold.known and not fp16 and (precision == "bf16" or static_seen):
        out.update({"numerics.unscaled_skips": fold.overflows,
                    "numerics.unscaled_skip_rate": fold.overflows / fold.known,
                    "numerics.skip_precision": "bf16" if precision == "bf16" else "unknown"})
    if not fp16:
        return out
    fp16_config, _ = read_fp16(config)
    static = (fp16_config or Fp16Config()).loss_scale
    if not config and not hit_min and not dynamic_seen:
        # Without a config, a static scale is one the log shows unchanged on two steps or more, overflows among
        # them; a scale shown once (Megatron's first iteration line, after its dynamic scale's start-up halvings
        # from 2^32) cannot show that it stays put
        static = fold.scales_seen[0] if len(fold.scales_seen) == 1 and fold.scale_steps > 1 and fold.overflows else 0
    out["fp16.dynamic"] = not (static or static_seen)
    out["fp16.scale_below_one"] = fold.scale_last is not None and fold.scale_last < 1
    out["fp16.static_scale"] = static or None
    if fp16_config is not None:
        out["fp16.min_loss_scale"] = fp16_config.min_loss_scale
    if not fold.known:
        if out["fp16.dynamic"] and (hit_min or out["fp16.scale_below_one"]):  # DeepSpeed's word, or a scale seen
            out["fp16.scaler_verdict"] = "aborted" if hit_min else "below_one"
        return out
    out["fp16.overflow_count"] = fold.overflows
    out["fp16.overflow_rate"] = fold.overflows / fold.known
    recent = fold.recent[-RECENT:]
    out["fp16.recent_overflow_rate"] = sum(recent) / len(recent)
    out["fp16.recent_steps"] = len(recent)
    out["fp16.calibrated"] = fold.calibrated
    if fold.first_overflow_scale is not None:
        out["fp16.calibration_from_start"] = (fold.first_overflow_scale == (fp16_config or Fp16Config()).initial_scale
                                              and fold.first_overflow_step is not None
                                              and fold.first_overflow_step <= CALIBRATION_STEPS)
    out["fp16.calibration_overflows"] = fold.calibration_overflows
    out["fp16.late_overflows"] = fold.late_overflows
    out["fp16.first_late_overflow_step"] = fold.first_late_step
    out["fp16.overflows_began_step"] = fold.first_late_step if fold.calibrated else fold.first_overflow_step
    out["fp16.loss_scale_last"] = fold.scale_last
    # A console log says it on its last overflow line; a step that did not overflow ran at the scale last set.
    set_line = next((e["data"] for e in reversed(view.events.get("log", [])) if e.get("what") == "loss_scale_set"),
                    None)
    said = set_line["scale"] if set_line is not None else None
    out["fp16.loss_scale_set"] = said if said is not None else fold.scale_last if fold.scale_last_clean else None
    out["fp16.max_held_scale"] = fold.max_held_scale
    out["fp16.min_late_overflow_scale"] = fold.min_late_scale
    below = fold.min_late_scale if fold.min_late_scale is not None else float("inf")
    out["fp16.fixed_scale"] = next((s for s in fold.held_scales if 0 < s < below), None)
    out["fp16.skipped_clean_steps"] = fold.known - fold.overflows
    if out["fp16.loss_scale_set"]:
        out["fp16.scale_set_power"] = int(math.log2(out["fp16.loss_scale_set"]))
    if fold.first_held_scale:
        out["fp16.calibrated_scale_power"] = int(math.log2(fold.first_held_scale))
    at_min = _at_min(view, values, hit_min) if out["fp16.dynamic"] else None
    out["fp16.scaler_at_min"] = at_min
    if at_min == "aborts" and (hit_min or fp16_config is not None):
        out["fp16.overflows_to_min"] = 0 if hit_min else _ScalerReplay(fp16_config, fold.replay).overflows_to_min()
    to_floor = None
    if at_min == "skips_on" and fp16_config is not None:
        to_floor = _ScalerReplay(fp16_config, fold.replay).halvings_to_min()
        out["fp16.overflows_to_floor"] = to_floor or None  # 0: there already, and the message says where it is
    if out["fp16.dynamic"]:
        # The last overflow line set the scale it had tried ("from 1 to 1"): max(scale / 2, min_loss_scale) is at
        # its floor, and a scaler that does not raise there (FP16_Optimizer, ZeRO before 0.6.5) skips on
        floor = set_line is not None and set_line.get("attempted") == said and not fold.scale_last_clean
        # or a run whose scaler skips on at the minimum, there now, its last step an overflow (no log line needed)
        floor = floor or (to_floor == 0 and not fold.scale_last_clean)
        out["fp16.scaler_verdict"] = _scaler_verdict(out, fold, floor, to_floor == 0)
    if fold.lr_last is not None:
        # Before the overflows began: the first after calibration, or the first of a run that never calibrated
        # (a warm-up into overflows within its first 20 steps)
        stable = (fold.lr_max_before_late if fold.first_late_step is not None
                  else fold.lr_max_before_first if not fold.calibrated else None)
        # Halving the base halves the lr of every step a schedule makes from it (a decayed last lr, halved and
        # configured as the base, would have the schedule start the resumed run far lower); an lr that grew into
        # the overflows (a warm-up) is capped at where it was stable instead.
        base = read_optimizer_lr(config) or fold.lr_last
        rose = stable is not None and stable < LR_ROSE * fold.lr_last
        out.update({"fp16.lr_last": fold.lr_last, "fp16.lr_base": base, "fp16.stable_lr": stable,
                    "fp16.suggested_lr": stable if rose else base / 2,
                    "fp16.lr_trend": "rose" if rose else "steady"})
    return out


def _at_min(view: RunView, values: dict[str, Any], hit_min: bool) -> str | None:
    """What the run's scaler does at min_loss_scale (RAISES_SINCE): the abort itself, the scaler a log's overflow
    line names, else the ZeRO stage (0 where a config is known without one) and the DeepSpeed version. ZeRO's
    "[deepspeed] OVERFLOW!" with no version known is taken to raise: of the versions that print it, only 0.6.4
    does not."""
    if hit_min:
        return "aborts"
    printed = [e.get("data") or {} for e in view.events.get("log", []) if e.get("what") == "dynamic_loss_scaler"]
    if any(d.get("scaler") == "FP16_Optimizer" or d.get("tag") == "deepscale" for d in printed):
        return "skips_on"
    stage = values.get("run.zero_stage")
    stage = 0 if stage is None and view.config else stage
    if stage == 0:
        return "skips_on"
    version = _version((view.first_start().get("versions") or {}).get("deepspeed"))
    if version is not None and version < RAISES_SINCE:
        return "skips_on"
    return "aborts" if stage is not None or printed else None


def _version(text: str | None) -> tuple[int, ...] | None:
    """"0.6.4+abc" → (0, 6, 4); None where it is not a version."""
    parts = (text or "").split("+")[0].split(".")[:3]
    return tuple(int(p) for p in parts) if len(parts) == 3 and all(p.isdigit() for p in parts) else None


def _scaler_verdict(out: dict[str, Any], fold: Fold, floor: bool, at_floor: bool) -> str:
    """Collapse told from calibration: the scaler's abort, a scale below 1, a scale pinned at its floor that still
    overflows (``floor``; ``at_floor``: a scaler that skips on is at the minimum now), a scale still halving toward
    the minimum (toward an abort, or where the scaler skips on) or halving in COLLAPSE_STREAK consecutive steps
    past calibration; else overflows only while it found its scale, costly where they skipped most of the steps
    shown (a log of overflow lines alone shows no clean step: its share says nothing of the run's)."""
    if out["fp16.hit_min_scale"]:
        return "aborted"
    if out["fp16.scale_below_one"]:
        return "below_one"
    if floor and (fold.overflows >= COLLAPSE_MIN_OVERFLOWS or (out.get("fp16.loss_scale_set") or 2) <= FLOOR_ALONE):
        return "at_floor"
    left = 0 if at_floor else out.get("fp16.overflows_to_min", out.get("fp16.overflows_to_floor"))
    if (left is not None and left <= COLLAPSE_OVERFLOWS_LEFT and out["fp16.recent_overflow_rate"] >= COLLAPSE_RATE
            and fold.overflows >= COLLAPSE_MIN_OVERFLOWS) or fold.late_streak >= COLLAPSE_STREAK:
        return "collapsing_to_floor" if out.get("fp16.scaler_at_min") == "skips_on" else "collapsing"
    if not fold.calibration_overflows or fold.late_overflows or not (
            fold.calibrated or out.get("fp16.calibration_from_start")):
        return "settled"
    clean = fold.known - fold.overflows
    return "costly_calibration" if clean and fold.overflows >= COSTLY_SHARE * fold.known else "calibration"


def _max_before(top: float | None, steps: list[int], lrs: list[Any], passed: bool, step: int | None) -> float | None:
    """``top`` raised to the largest lr of this block's steps before ``step`` (all of them while it has not come;
    none once a block before held it)."""
    cut = 0 if passed else len(steps) if step is None else bisect_left(steps, step)
    if before := [lr for lr in lrs[:cut] if lr is not None]:
        return max(before) if top is None else max(top, *before)
    return top


class _ScalerReplay:
    """DeepSpeed's ``DynamicLossScaler.update_scale`` (runtime/fp16/loss_scaler.py), state only.

    The scale is a float (DeepSpeed's starts as the int 2^initial_scale_power and becomes a float
    at its first halving): a run of doublings can then never grow an integer without bound.
    """

    def __init__(self, fp16: Fp16Config, state: dict[str, Any] | None = None) -> None:
        self.window, self.delayed_shift = fp16.loss_scale_window, fp16.hysteresis
        self.consecutive, self.min_scale = fp16.consecutive_hysteresis, _as_float(fp16.min_loss_scale)
        if state is None:
            self.scale = fp16.initial_scale
            self.hysteresis, self.it, self.last_overflow = self.delayed_shift, 0, -1
        else:
            self.scale, self.hysteresis, self.it, self.last_overflow = (
                state["scale"], state["hysteresis"], state["it"], state["last_overflow"])

    def state(self) -> dict[str, Any]:
        return {"scale": self.scale, "hysteresis": self.hysteresis, "it": self.it, "last_overflow": self.last_overflow}

    def clean(self, reported: list[float | None]) -> None:
        """Steps without overflow (``update_scale(False)`` each), one or more, with the scale each reported
        (or None), in time independent of their number: the scale doubles at each step whose stable
        interval is a positive multiple of the window, so only those are counted."""
        stable = self.it - self.last_overflow - 1  # the first step's; each next step's is one more
        last = stable + len(reported) - 1
        if self.consecutive or _multiples(self.window, stable, last):
            self.hysteresis = self.delayed_shift
        if synced := last_known(reported, 1):  # re-synced to the last reported scale: the doublings after it count
            self.scale = reported[synced[0]]
            stable += synced[0]
        self.scale = _doubled(self.scale, _multiples(self.window, stable, last))
        self.it += len(reported)

    def overflowed(self) -> bool:
        """An overflow step (``update_scale(True)``); False where DeepSpeed would raise at the minimum scale."""
        if self.delayed_shift == 1 or self.hysteresis == 1:
            if self.scale == self.min_scale:
                return False
            self.scale = max(self.scale / 2, self.min_scale)
        else:
            self.hysteresis -= 1
        self.last_overflow = self.it
        self.it += 1
        return True

    def halvings_to_min(self) -> int | None:
        """Consecutive overflows from here until the scale is min_loss_scale, for a scaler that halves at each one
        (FP16_Optimizer's ``_update_scale``: no hysteresis); None where no number of them gets there."""
        scale = self.scale
        for halvings in range(_MAX_HALVINGS):
            if scale <= self.min_scale:
                return halvings
            scale = max(scale / 2, self.min_scale)
        return None

    def overflows_to_min(self) -> int | None:
        """Consecutive overflows from here until DeepSpeed raises, counted, not replayed one by one; None
        where no number of them gets there: a hysteresis below 1 counts down past 1 and never lowers the
        scale, and a NaN or infinite scale never comes down to the floor."""
        left = 1  # the overflow DeepSpeed raises at
        if self.delayed_shift != 1 and self.hysteresis != 1:
            if self.hysteresis < 1:
                return None
            left += self.hysteresis - 1  # overflows that only count the hysteresis down to 1
        scale = self.scale
        for halvings in range(_MAX_HALVINGS):
            if scale == self.min_scale:
                return left + halvings
            scale = max(scale / 2, self.min_scale)
        return None


_HELD_KEPT = 64  # distinct held scales kept: powers of two in any real run, a few dozen at most
_MAX_HALVINGS = 1100  # a finite float scale comes down to any floor ≥ 1 (min_loss_scale is) within 1025 halvings


def _as_float(number: int) -> float:
    try:
        return float(number)
    except OverflowError:
        return math.inf


def _multiples(window: float, low: int, high: int) -> int:
    """How many positive multiples of ``window`` lie in ``[low, high]``."""
    low = max(low, 1)
    if high < low:
        return 0
    window = abs(window)
    return int(high // window - (low - 1) // window)


def _doubled(scale: float, times: int) -> float:
    """``scale`` doubled ``times`` times, as repeated ``*= 2`` gives it (past float's range: inf)."""
    if not times:
        return scale
    try:
        return math.ldexp(scale, times)
    except OverflowError:
        return math.copysign(math.inf, scale)
