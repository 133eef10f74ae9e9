"""Signals, config values: a value of the DeepSpeed config → the value DeepSpeed reads from it, or why it refuses it.

DeepSpeed reads its sections with pydantic models in lax mode (``"2"`` is 2, ``1.0`` is 1, ``"yes"`` is
true) plus validators of its own, and it leaves ``"auto"`` to its default. A signal that computes
with a config value takes it from here, so a value DeepSpeed would refuse is a config finding
(ZD623 for the loss scaler), never an exception or a loop in a fold. The ``fp16`` section is
``DeepSpeedFP16Config`` (deepspeed/runtime/precision_config.py, 0.19); unknown keys, which it
refuses too, are left to ``check``'s run of DeepSpeed itself. ``tests/signals/test_config_values.py``
compares every answer here with the installed DeepSpeed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from zerodoctor.deepspeed.defaults import FP16
from zerodoctor.messages.deferred import deferred

_INT_TEXT = deferred(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")  # pydantic's int from a string, whitespace stripped
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
_I64 = 2.0 ** 63


class Refused(ValueError):
    """A value DeepSpeed's config refuses; the message says why, as DeepSpeed would."""


def _shown(value: Any) -> str:
    """The value as the config wrote it (JSON), cut short: a config value can be a megabyte."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def lax_int(value: Any) -> int:
    """pydantic's lax ``int``: a bool, an int, an integral float inside int64, or a string holding an integer."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Refused(f"{_shown(value)} is not a finite number")
        if not value.is_integer():
            raise Refused(f"{_shown(value)} is not an integer")
        if not -_I64 < value < _I64:
            raise Refused(f"{_shown(value)} is past int64")
        return int(value)
    if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        try:
            return int(value.strip().split(".")[0])
        except ValueError:  # more digits than Python converts (4300): no config means that
            raise Refused(f"{_shown(value)} has too many digits") from None
    raise Refused(f"{_shown(value)} is not an integer")


def lax_bool(value: Any) -> bool:
    """pydantic's lax ``bool``: a bool, 0 or 1, or one of its words (``"yes"``, ``"off"``…)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise Refused(f"{_shown(value)} is not a boolean")


def config_int(value: Any, default: int) -> int | None:
    """A config value DeepSpeed reads as an ``int`` (``zero_optimization`` sizes…): ``"auto"`` is ``default``;
    None where DeepSpeed would refuse it (its bounds are left to ``check``'s run of DeepSpeed)."""
    if value == "auto":
        return default
    try:
        return lax_int(value)
    except Refused:
        return None


@dataclass(frozen=True)
class Fp16Config:
    """The ``fp16`` section as DeepSpeed resolves it: every key present, each of its type."""

    enabled: bool = False
    loss_scale: float = float(FP16["loss_scale"])
    initial_scale_power: int = FP16["initial_scale_power"]
    loss_scale_window: int = FP16["loss_scale_window"]
    hysteresis: int = FP16["hysteresis"]
    consecutive_hysteresis: bool = FP16["consecutive_hysteresis"]
    min_loss_scale: int = FP16["min_loss_scale"]

    @property
    def dynamic(self) -> bool:
        return self.loss_scale == 0

    @property
    def initial_scale(self) -> float:
        """2^initial_scale_power as the replay keeps it: a float, inf past float's range."""
        try:
            return math.ldexp(1.0, self.initial_scale_power)
        except OverflowError:
            return math.inf


def read_fp16(config: dict[str, Any] | None) -> tuple[Fp16Config | None, dict[str, str]]:
    """``(the fp16 section as DeepSpeed reads it, {}))``, or ``(None, {dotted key: why DeepSpeed refuses it})``."""
    section = (config or {}).get("fp16", {})
    if not isinstance(section, dict):
        return None, {"fp16": f"{_shown(section)} is not a section (a JSON object)"}
    read: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for key, parse in _FIELDS.items():
        value = section.get(key, "auto")
        if value == "auto":  # DeepSpeedConfigModel drops "auto": the default stands
            continue
        try:
            read[key] = parse(value)
        except Refused as exc:
            refused[f"fp16.{key}"] = str(exc)
    fp16 = Fp16Config(**read)  # a refused value's default stands in, so every refusal is named at once
    if fp16.enabled and fp16.dynamic:  # DeepSpeed checks these only where the dynamic scaler uses them
        if fp16.loss_scale_window <= 0:
            refused["fp16.loss_scale_window"] = (f"{fp16.loss_scale_window} is not > 0 "
                                                 "(dynamic loss scaling divides by it)")
        if fp16.min_loss_scale <= 0:
            refused["fp16.min_loss_scale"] = f"{fp16.min_loss_scale} is not > 0 (the loss scale's floor)"
    return (None, refused) if refused else (fp16, {})


def _loss_scale(value: Any) -> float:
    if isinstance(value, bool):
        raise Refused(f"{_shown(value)} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise Refused(f"{_shown(value)} is not a number") from None
    if not math.isfinite(number):
        raise Refused(f"{_shown(value)} is not a finite number")
    if number < 0:
        raise Refused(f"{_shown(value)} is below 0 (0 means dynamic loss scaling)")
    return number


def _scaler_int(value: Any) -> int:
    """DeepSpeed's own check of loss_scale_window and min_loss_scale before pydantic's: no bool, no NaN,
    ``int()`` works."""
    if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
        raise Refused(f"{_shown(value)} is not a finite integer")
    try:
        int(value)
    except (TypeError, ValueError):
        raise Refused(f"{_shown(value)} is not an integer") from None
    return lax_int(value)


_FIELDS = {"enabled": lax_bool, "loss_scale": _loss_scale, "initial_scale_power": lax_int,
           "loss_scale_window": _scaler_int, "hysteresis": lax_int, "consecutive_hysteresis": lax_bool,
           "min_loss_scale": _scaler_int}


def read_optimizer_lr(config: dict[str, Any] | None) -> float | None:
    """``optimizer.params.lr``, the base lr a schedule scales, where it is a positive number; None for none,
    ``"auto"`` (the Trainer fills it: its run_start's config holds the number) or a value DeepSpeed passes to the
    torch optimizer unread, for it to refuse."""
    optimizer = (config or {}).get("optimizer")
    params = optimizer.get("params") if isinstance(optimizer, dict) else None
    lr = params.get("lr") if isinstance(params, dict) else None
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        return None
    return float(lr)
