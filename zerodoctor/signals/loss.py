"""Signals, the loss curve: a jump far beyond its recent spread → where the run spiked or diverged, and what then.

A loss is noisy and mostly falls; what no schedule explains is a step whose loss lies far above the steps just
before it. "Far" is measured robustly, against the median and the median absolute deviation (MAD) of the last
``SPIKE_WINDOW`` finite losses, so one earlier outlier does not hide the next, and must also be a jump of at
least ``SPIKE_RISE`` of that median, so a run whose loss barely moves (MAD near 0) is not flagged for noise. From
the spike on the window stands still: a loss that comes back below the threshold closes the spike (recovered) and
the window moves on; one that never does is a divergence. Only finite losses are judged here: a NaN/inf loss is
``numerics.first_nonfinite_step`` (ZD204's), quoted when it follows the spike.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from zerodoctor.signals import view as runview
from zerodoctor.signals.base import Signal, shown_by, verdict
from zerodoctor.signals.inputs import STEP_LINES, STEPS
from zerodoctor.signals.view import RunView, Steps

SPIKE_WINDOW = 20  # finite losses before a step that its loss is weighed against
MIN_HISTORY = 10  # finite losses seen before a spike can be judged at all
SPIKE_SPREADS = 10  # a spike lies this many robust standard deviations (1.4826 MAD) above the median ...
SPIKE_RISE = 0.5  # ... and at least this share of the median's size above it
MAD_TO_SD = 1.4826  # MAD x this = the standard deviation of normal noise
WARMUP_NEAR = SPIKE_WINDOW  # a warm-up that ends this many steps or fewer from the spike is what changed

_steps = shown_by(STEPS, switch=STEP_LINES)

READS = ("config.warmup_steps", "config.warmup_scheduler", "fatal.nonfinite_loss", "numerics.nonfinite_loss_steps",
         "numerics.nonfinite_grad_steps")

SIGNALS = [
    verdict("loss.verdict", "the loss after the latest jump far beyond the recent spread: diverged (never came "
            "back below the threshold) | recovered (came back) | steady (no such jump)",
            ("diverged", "recovered", "steady"), shown_by=(STEPS,), switch=STEP_LINES),
    _steps("loss.spike_step", "step", "step of the loss spike: its loss lay far beyond the spread of the steps before"),
    _steps("loss.spike_loss", "loss", "loss at the spike (the highest of its ranks)"),
    _steps("loss.spike_from", "loss", "loss the step before the spike"),
    _steps("loss.spike_median", "loss", f"median loss of the {SPIKE_WINDOW} steps before the spike"),
    _steps("loss.spike_spread", "loss", "spread of the loss before the spike: 1.4826 x its median absolute "
           "deviation"),
    _steps("loss.spike_lr", "lr", "lr at the spike"),
    _steps("loss.spike_scale", "scale", "fp16 loss scale at the spike"),
    _steps("loss.spike_ranks", "ranks", "ranks whose loss reached the spike's threshold"),
    _steps("loss.back_step", "step", "step the loss came back below the spike's threshold"),
    _steps("loss.last", "loss", "last finite loss"),
    _steps("loss.last_step", "step", "step of the last finite loss"),
    verdict("loss.nonfinite", "where the loss or the gradient norm went NaN/inf: loss (on steps) | grad (applied "
            "steps' grad norm) | both | lines (a progress line only, no step shows it) | none",
            ("loss", "grad", "both", "lines", "none"), shown_by=(STEPS,), switch=STEP_LINES),
    Signal("loss.nonfinite_line_ranks", "ranks", "ranks whose progress lines show the loss NaN/inf (none: absent)"),
    _steps("loss.warmup_end_step", "step", f"step the config's warm-up ends, {WARMUP_NEAR} steps or fewer from the "
           "spike"),
]

STEP_FIELDS = {"loss": "max", "lr": "max", "loss_scale": "min"}
RANK_FIELDS = {"loss_max": ("loss", "max")}


@dataclass
class Fold(runview.Fold):
    """The last finite losses before now, and the latest spike they flagged (open, or come back)."""

    VERSION = 1  # of the saved state: bump it when the fields or what they hold change
    window: list[float] = field(default_factory=list)  # the last SPIKE_WINDOW finite losses, no spike's among them
    last: list[float] | None = None  # (step, loss) of the last finite loss
    spike: dict[str, Any] | None = None  # the open spike, or the latest that came back

    def add_steps(self, block: Steps, view: RunView) -> None:
        c = block.columns
        for step, loss, lr, scale in zip(c["step"], c["loss"], c["lr"], c["loss_scale"]):
            if loss is None or loss != loss:  # not reported, or non-finite (stored as missing)
                continue
            self._loss(step, loss, lr, scale)
            self.last = [step, loss]

    def _loss(self, step: int, loss: float, lr: float | None, scale: float | None) -> None:
        spike = self.spike
        if spike is not None and spike["back"] is None:
            if loss <= spike["threshold"]:
                spike["back"] = step
                self._remember(loss)
            return
        if len(self.window) >= MIN_HISTORY:
            median = statistics.median(self.window)
            if loss > median + SPIKE_RISE * abs(median):  # below that no spread makes a spike: the MAD is spared
                spread = MAD_TO_SD * statistics.median(abs(x - median) for x in self.window)
                threshold = median + max(SPIKE_SPREADS * spread, SPIKE_RISE * abs(median))
                if loss > threshold:  # a new spike replaces one that came back: the latest is the one that matters
                    self.spike = {"step": step, "loss": loss, "from": self.last[1] if self.last else None,
                                  "median": median, "spread": spread, "threshold": threshold, "lr": lr,
                                  "scale": scale, "back": None}
                    return
        self._remember(loss)

    def _remember(self, loss: float) -> None:
        self.window.append(loss)
        del self.window[:-SPIKE_WINDOW]


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    out = _nonfinite(values)
    fold: Fold = view.fold(__name__)
    if fold.last is None:
        return out
    out.update({"loss.last_step": fold.last[0], "loss.last": fold.last[1]})
    spike = fold.spike
    if spike is None:
        out["loss.verdict"] = "steady"
        return out
    threshold = spike["threshold"]
    out.update({
        "loss.verdict": "diverged" if spike["back"] is None else "recovered",
        "loss.spike_step": spike["step"], "loss.spike_loss": spike["loss"], "loss.spike_from": spike["from"],
        "loss.spike_median": spike["median"], "loss.spike_spread": spike["spread"], "loss.spike_lr": spike["lr"],
        "loss.spike_scale": spike["scale"], "loss.back_step": spike["back"],
        "loss.spike_ranks": sorted(r for r, facts in view.per_rank.items()
                                   if (facts.get("loss_max") or float("-inf")) >= threshold) or None,
    })
    warmup = values.get("config.warmup_steps") if values.get("config.warmup_scheduler") else None
    if isinstance(warmup, (int, float)) and abs(spike["step"] - warmup) <= WARMUP_NEAR:
        out["loss.warmup_end_step"] = int(warmup)
    return out


def _nonfinite(values: dict[str, Any]) -> dict[str, Any]:
    """Non-finite losses told apart by where they show: on steps (the loss, an applied step's grad norm), or only
    on a progress line (``fatal.nonfinite_loss``, read after the crash families). Nothing is said where neither
    is known: no steps and no fatal signals."""
    lines, bad_loss, bad_grad = (values.get(name) for name in (
        "fatal.nonfinite_loss", "numerics.nonfinite_loss_steps", "numerics.nonfinite_grad_steps"))
    if not lines and bad_loss is None:  # no step shown, no line saying it: not known either way
        return {}
    out: dict[str, Any] = {"loss.nonfinite_line_ranks": lines or None}
    out["loss.nonfinite"] = ("both" if bad_loss and bad_grad else "loss" if bad_loss else "grad" if bad_grad
                             else "lines" if lines else "none")
    return out
