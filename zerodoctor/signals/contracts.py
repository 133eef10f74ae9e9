"""Signals, contracts: what each signal module provides and reads → the order the modules run in.

A module provides the signals its ``SIGNALS`` declares and names in ``READS`` the signals of other modules its
``compute`` looks up in ``values``. The order is computed from that, not from the order the modules were
registered in: a module runs after the providers of everything it reads, and otherwise keeps its registered
place (a stable topological sort). A name no module provides, or modules that read each other in a circle, stop
the run with an error naming them; a module that looks up a name it did not declare gets the same error from
``values`` (``DeclaredValues``), so a contract cannot drift from the code that relies on it. A module written
before contracts (no ``READS`` at all: a plugin's, say) keeps the old terms: it runs in its registered place
and may read anything computed before it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any


class ContractError(ValueError):
    """A signal module reads a signal no module provides, an undeclared one, or modules read each other in a
    circle."""


def reads(module: ModuleType) -> tuple[str, ...]:
    """The names of other modules' signals ``module`` reads (``READS``; none when it declares none)."""
    return tuple(getattr(module, "READS", ()))


def ordered(modules: Sequence[ModuleType]) -> list[ModuleType]:
    """``modules``, each after the providers of what it reads, otherwise in the order given.

    Raises:
        ContractError: a module reads a name no module provides, or reads (through others) its own signals.
    """
    provider: dict[str, int] = {}
    for index, module in enumerate(modules):
        for signal in module.SIGNALS:
            provider.setdefault(signal.name, index)
    needs: list[set[int]] = []
    for index, module in enumerate(modules):
        missing = [name for name in reads(module) if name not in provider]
        if missing:
            raise ContractError(f"{module.__name__} reads {', '.join(missing)}, which no signal module provides")
        needs.append({provider[name] for name in reads(module)} - {index})
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(modules):
        ready = next((i for i in range(len(modules)) if i not in done and needs[i] <= done), None)
        if ready is None:
            circle = [modules[i].__name__ for i in range(len(modules)) if i not in done]
            raise ContractError(f"signal modules read each other in a circle: {', '.join(circle)}")
        order.append(ready)
        done.add(ready)
    return [modules[i] for i in order]


class DeclaredValues(Mapping[str, Any]):
    """The values computed so far, as one module may read them: its own signals and those it declared in
    ``READS``; a look-up of any other name raises ``ContractError``."""

    def __init__(self, values: Mapping[str, Any], module: ModuleType) -> None:
        self._values, self._module = values, module
        self._allowed = {*reads(module), *(signal.name for signal in module.SIGNALS)}

    def _declared(self, name: str) -> str:
        if name not in self._allowed:
            raise ContractError(f"{self._module.__name__} reads {name} without declaring it in READS")
        return name

    def __getitem__(self, name: str) -> Any:
        return self._values[self._declared(name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._declared(name) in self._values

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._values if name in self._allowed)

    def __len__(self) -> int:
        return sum(1 for _ in self)
