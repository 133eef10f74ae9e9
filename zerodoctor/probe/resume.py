"""Probe, resume: a relaunch under ``run --fix-and-resume`` → the patched values kept across ``load_checkpoint``.

DeepSpeed's ``load_checkpoint`` restores the optimizer's param groups (their ``lr``) and the fp16
loss scaler from the checkpoint, so a resumed run silently trains with the values that failed,
whatever its patched config says. The wrapper writes the patch it applied to ``fix.json`` in the
attempt's run directory; when it sets the optimizer's lr, every param group's lr is scaled by patched ÷
configured lr after the load (groups given lrs of their own keep their ratios), and when it touches the fp16
section, the loss scaler the patched config built at ``initialize`` is taken before the load and put back
after it. A torch lr scheduler the engine steps (a Hugging Face Trainer's own, a LambdaLR DeepSpeed builds from
the Trainer's callable when the config has no ``scheduler``) is restored by the load too, its ``base_lrs`` the
old lrs, and would set the old schedule back on the first step: it is re-based, the point it had reached in its
schedule kept (each group's lr and base scaled by patched ÷ configured lr), which is what a fresh run with the
lower lr would step with there. On the first
step after the load the probe compares what the engine runs with from then on (the lr after the
step, once a scheduler had its say) against them: an lr above the patched one (a scheduler that
sets the lr itself from its own settings, say) or other loss scaling stops the attempt, since training on would spend
the restart on the fault it was meant to cure.
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
            # each group's lr as the patched config built it: the groups that took the configured lr hold the patch's
            scheduler = getattr(engine, "lr_scheduler", None)
            bases = getattr(scheduler, "base_lrs", None)
            taken["built_lrs"] = list(bases) if isinstance(bases, list) else [g["lr"] for g in optimizer.param_groups]
        if self.keep_scaler and hasattr(optimizer, "loss_scaler"):
            taken["loss_scaler"] = (optimizer.loss_scaler, optimizer.dynamic_loss_scale)
        return taken

    def after_load(self, engine: Any, taken: dict[str, Any]) -> list[str]:
        """Put the patched values back; return their names."""
        optimizer = engine.optimizer
        expected: dict[str, Any] = {}
        if "lr" in taken:
            # the first group's lr is the one checked: the patched lr where that group took the configured one
            bases = _rebase_schedule(getattr(engine, "lr_scheduler", None), taken["lr"], taken["built_lrs"])
            if bases is not None:
                expected["lr"] = expected["base_lr"] = bases[0]
            else:
                groups = optimizer.param_groups
                scale = _scale(taken["lr"], taken["built_lrs"], [g["lr"] for g in groups])
                for group in groups:
                    group["lr"] = group["lr"] * scale if scale is not None else taken["lr"]
                expected["lr"] = groups[0]["lr"]
        if "loss_scaler" in taken:
            optimizer.loss_scaler, optimizer.dynamic_loss_scale = taken["loss_scaler"]
            expected["dynamic_loss_scale"] = bool(optimizer.dynamic_loss_scale)
            if not optimizer.dynamic_loss_scale:
                expected["loss_scale"] = float(optimizer.loss_scaler.cur_scale)
        self.expected = expected or None
        return [name for name in ("lr", "loss_scaler") if name in taken]

    def check(self, observed: dict[str, Any]) -> tuple[dict[str, Any], bool] | None:
        """After the first step past a load: (expected, in effect), or None when there is nothing to check."""
        expected, self.expected = self.expected, None
        if expected is None:
            return None
        ok = all(name in observed and _same(name, observed[name], value) for name, value in expected.items())
        return expected, ok


def _rebase_schedule(scheduler: Any, lr: float, built: list[float]) -> list[float] | None:
    """Re-base a torch lr scheduler (``base_lrs``, one per param group) on the patched ``lr``; its new base lrs, or
    None when there is none.

    Groups given lrs of their own (LoRA's, layer-wise decay) keep their ratios: each base is scaled by patched ÷
    configured lr, the configured lr being the loaded base of a group the patched config built at ``lr``.
    """
    bases = getattr(scheduler, "base_lrs", None)
    groups = getattr(getattr(scheduler, "optimizer", None), "param_groups", None)
    if not isinstance(bases, list) or not groups or len(bases) != len(groups):
        return None
    scale = _scale(lr, built, bases)
    rebased = [base * scale if scale is not None else lr for base in bases]
    for group, base, new in zip(groups, bases, rebased):
        group["lr"] = group["lr"] * new / base if base else new
        if "initial_lr" in group:  # what the scheduler was built from, saved with the optimizer's state
            group["initial_lr"] = new
    scheduler.base_lrs = rebased
    if hasattr(scheduler, "_last_lr"):  # get_last_lr(), which the Trainer logs as learning_rate
        scheduler._last_lr = [group["lr"] for group in groups]
    return rebased


def _scale(lr: float, built: list[float], loaded: list[float]) -> float | None:
    """patched ÷ configured lr: ``built`` are the groups' lrs as the patched config made them, ``loaded`` as the
    checkpoint restored them; the configured lr is the loaded one of the first group built at ``lr`` (the first
    group's when none was, or the groups do not pair). None when that lr is 0: nothing to scale."""
    configured = loaded[0] if loaded else 0.0
    if len(built) == len(loaded):
        configured = next((old for new, old in zip(built, loaded) if math.isclose(new, lr, rel_tol=1e-9)), configured)
    return lr / configured if configured else None


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
