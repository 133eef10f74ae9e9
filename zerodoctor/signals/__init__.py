"""Signals: ``RunData`` of one run → named numbers (``fp16.overflow_rate``, ``comm.fraction``…).

One module per concern, contributed through the ``register_signals`` hook (the core's
first, then plugins'); each declares ``SIGNALS`` (name, unit, doc) and a
``compute(run, values)`` that returns the values it could derive. A signal it could not
derive is simply absent, and a rule that needs it is reported as unevaluated. Modules
run in order and may read what earlier ones computed (``values``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from zerodoctor import plugins
from zerodoctor.signals.base import Signal, StepSeries
from zerodoctor.store.runs import RunData


def signal_modules() -> list[ModuleType]:
    return plugins.collected(plugins.hook().register_signals())


def catalog(modules: list[ModuleType] | None = None) -> dict[str, Signal]:
    """Every known signal by name."""
    return {s.name: s for m in (modules or signal_modules()) for s in m.SIGNALS}


def compute(run_data: RunData, modules: list[ModuleType] | None = None) -> dict[str, Any]:
    """All signals of one run that its data supports, by name."""
    values: dict[str, Any] = {}
    for module in modules or signal_modules():
        values.update({k: v for k, v in module.compute(run_data, values).items() if v is not None})
    return values


__all__ = ["Signal", "StepSeries", "catalog", "compute", "signal_modules"]
