"""Signals: the view of one run → named numbers (``fp16.overflow_rate``, ``comm.fraction``…).

One module per concern, contributed through the ``register_signals`` hook (the core's
first, then plugins'); each declares ``SIGNALS`` (name, unit, doc), what it reads
(``STEP_FIELDS``, ``RANK_FIELDS``, ``FOLD_EVENTS``), a ``Fold`` the run view keeps up to date
step by step, and a ``compute(view, values)`` that returns the values it could derive from
its fold and the view. A signal it could not derive is simply absent, and a rule that
needs it is reported as unevaluated. A module may read other modules' signals (``values``), those
it names in ``READS``: the order the modules run in follows from that (``signals/contracts.py``).
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any

from zerodoctor import plugins
from zerodoctor.signals.contracts import ContractError, DeclaredValues, ordered

if TYPE_CHECKING:  # the view reads the store: loading the plugins (``zerodoctor --help``) must not
    from zerodoctor.signals.base import Signal
    from zerodoctor.signals.view import RunView

log = logging.getLogger("zerodoctor.signals")


def signal_modules() -> list[ModuleType]:
    """Every signal module, the core's and the plugins', each after the modules whose signals it reads."""
    return ordered(plugins.collected(plugins.hook().register_signals()))


def catalog(modules: list[ModuleType] | None = None) -> dict[str, Signal]:
    """Every known signal by name."""
    return {s.name: s for m in (modules or signal_modules()) for s in m.SIGNALS}


def compute(view: RunView, modules: list[ModuleType] | None = None) -> dict[str, Any]:
    """All signals of one run that its data supports, by name.

    A module that raises (a plugin's, say) costs only its own signals: they are missing, so the
    rules that need them are reported as unevaluated, and every other rule is still judged. A module
    that breaks its contract (a look-up of a signal it did not declare) stops the run: that is a bug
    every run would hit, for its author to see at once.
    """
    values: dict[str, Any] = {}
    for module in ordered(modules) if modules else signal_modules():
        try:
            declared = DeclaredValues(values, module) if hasattr(module, "READS") else values
            computed = module.compute(view, declared)
        except ContractError:
            raise
        except Exception as exc:  # noqa: BLE001 - one broken module must not hide every finding
            log.warning("signal module %s failed on run %s, its signals are missing: %s: %s",
                        module.__name__, view.name, type(exc).__name__, exc)
            continue
        values.update({k: v for k, v in computed.items() if v is not None})
    return values

