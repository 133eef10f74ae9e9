"""Probe, resume: a relaunch under ``run --fix-and-resume`` → the patched values kept across ``load_checkpoint``.

DeepSpeed's ``load_checkpoint`` restores the optimizer's param groups (their ``lr``) and the fp16
loss scaler from the checkpoint, so a resumed run silently trains with the values that failed,
whatever its patched config says. The wrapper writes the patch it applied to ``fix.json`` in the
attempt's run directory; when it sets the optimizer's lr, that lr is put back into every param group
after the load, and when it touches the fp16 section, the loss scaler the patched config built at
``initialize`` is taken before the load and put back after it. A torch lr scheduler the engine steps (a Hugging
Face Trainer's own, a LambdaLR DeepSpeed builds from the Trainer's callable when the config has no
``scheduler``) is restored by the load too, its ``base_lrs`` the old lr, and would set the old schedule back on
the first step: it is re-based on the patched lr, the point it had reached in its schedule kept (each group's lr
scaled by patched / old base), which is what a fresh run with the lower lr would step with there. On the first
step after the load the probe compares what the engine runs with from then on (the lr after the
step, once a scheduler had its say) against them: an lr above the patched one (a scheduler that
sets the lr itself from its own settings, say) or other loss scaling stops the attempt, since training on would spend the restart
on the fault it was meant to cure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

FIX_FILE = "fix.json"  # in the attempt's run directory, written by zerodoctor.resume


class FixNotInEffect(RuntimeError):
    """Raised into the training loop when the resumed engine does not run with the patched values."""


def load_patch(run_dir: Path) -> dict[str, Any] | None:
    try:
        patch = json.loads((run_dir / FIX_FILE).read_text())
    except (OSError, ValueError):
        return None
    return patch if isinstance(patch, dict) else None


class FixKeeper:
    """What the patch sets that a checkpoint load would undo: taken before the load, put back after it."""

    def __init__(self, patch: dict[str, Any]) -> None:
        params = (patch.get("optimizer") or {}).get("params")
        lr = params.get("lr") if isinstance(params, dict) else None
        self.lr = float(lr) if isinstance(lr, (int, float)) and not isinstance(lr, bool) else None
        self.keep_scaler = "fp16" in patch
        self.expected: dict[str, Any] | None = None  # set by a load, cleared by the check

    @property
    def active(self) -> bool:
        return self.lr is not None or self.keep_scaler

    def before_load(self, engine: Any) -> dict[str, Any]:
        """The loss scaler the patched config built at ``initialize`` (the load replaces the object)."""
        optimizer = engine.optimizer
        taken: dict[str, Any] = {}
        if self.lr is not None:
            taken["lr"] = self.lr
        if self.keep_scaler and hasattr(optimizer, "loss_scaler"):
            taken["loss_scaler"] = (optimizer.loss_scaler, optimizer.dynamic_loss_scale)
        return taken

    def after_load(self, engine: Any, taken: dict[str, Any]) -> list[str]:
        """Put the patched values back; return their names."""
        optimizer = engine.optimizer
        expected: dict[str, Any] = {}
        if "lr" in taken:
            expected["lr"] = taken["lr"]
            if _rebase_schedule(getattr(engine, "lr_scheduler", None), taken["lr"]):
                expected["base_lr"] = taken["lr"]
            else:
                for group in optimizer.param_groups:
                    group["lr"] = taken["lr"]
        if "loss_scaler" in taken:
            optimizer.loss_scaler, optimizer.dynamic_loss_scale = taken["loss_scaler"]
            expected["dynamic_loss_scale"] = bool(optimizer.dynamic_loss_scale)
            if not optimizer.dynamic_loss_scale:
                expected["loss_scale"] = float(optimizer.loss_scaler.cur_scale)
        self.expected = expected or None
        return list(taken)

    def check(self, observed: dict[str, Any]) -> tuple[dict[str, Any], bool] | None:
        """After the first step past a load: (expected, in effect), or None when there is nothing to check."""
        expected, self.expected = self.expected, None
        if expected is None:
            return None
        ok = all(name in observed and _same(name, observed[name], value) for name, value in expected.items())
        return expected, ok


def _rebase_schedule(scheduler: Any, lr: float) -> bool:
    """Re-base a torch lr scheduler (``base_lrs``, one per param group) on ``lr``; False when there is none."""
    bases = getattr(scheduler, "base_lrs", None)
    groups = getattr(getattr(scheduler, "optimizer", None), "param_groups", None)
    if not isinstance(bases, list) or not groups or len(bases) != len(groups):
        return False
    for group, base in zip(groups, bases):
        group["lr"] = group["lr"] * lr / base if base else lr
        if "initial_lr" in group:  # what the scheduler was built from, saved with the optimizer's state
            group["initial_lr"] = lr
    scheduler.base_lrs = [lr] * len(groups)
    if hasattr(scheduler, "_last_lr"):  # get_last_lr(), which the Trainer logs as learning_rate
        scheduler._last_lr = [group["lr"] for group in groups]
    return True


def observed_values(engine: Any) -> dict[str, Any]:
    """What the engine runs the next step with: its lr, its scheduler's base lr, and its loss scaling."""
    optimizer = engine.optimizer
    values: dict[str, Any] = {"lr": engine.get_lr()[0]}
    bases = getattr(getattr(engine, "lr_scheduler", None), "base_lrs", None)
    if isinstance(bases, list) and bases:
        values["base_lr"] = float(bases[0])
    if engine.fp16_enabled() and hasattr(optimizer, "loss_scaler"):
        values["dynamic_loss_scale"] = bool(optimizer.dynamic_loss_scale)
        values["loss_scale"] = float(optimizer.loss_scaler.cur_scale)
    return values


def _same(name: str, observed: Any, expected: Any) -> bool:
    """The lr may be lower than patched (a decaying schedule), never higher; a scheduler's base lr and the loss
    scaling exactly as patched."""
    if name == "lr":
        return observed <= expected * (1 + 1e-6)
    if isinstance(observed, float) and isinstance(expected, float):
        return math.isclose(observed, expected, rel_tol=1e-6)
    return observed == expected
