"""Signal contracts: the order is computed from what each module reads, a broken contract stops the run, a
saved fold is keyed by its own version, and a signal's evidence label is the one it declares."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from zerodoctor import signals
from zerodoctor.signals import view as runview
from zerodoctor.signals.base import Signal
from zerodoctor.signals.contracts import ContractError, ordered
from zerodoctor.signals.view import Reads, ReadsConflict


def _module(name: str, provides: tuple[str, ...], reads: tuple[str, ...] = (), compute: Any = None) -> ModuleType:
    module = ModuleType(name)
    module.SIGNALS = [Signal(s, "x", f"the {s}") for s in provides]
    module.READS = reads
    module.compute = compute or (lambda view, values: {s: 1 for s in provides})
    return module


def test_a_module_runs_after_the_providers_of_what_it_reads_and_otherwise_keeps_its_place() -> None:
    a, b = _module("a", ("a.x",), reads=("c.x",)), _module("b", ("b.x",))
    c, d = _module("c", ("c.x",), reads=("d.x",)), _module("d", ("d.x",))
    assert [m.__name__ for m in ordered([a, b, c, d])] == ["b", "d", "c", "a"]
    assert [m.__name__ for m in ordered([b, d, c, a])] == ["b", "d", "c", "a"]


def test_the_core_order_puts_every_provider_first() -> None:
    modules = signals.signal_modules()
    position = {m.__name__: i for i, m in enumerate(modules)}
    catalog = {s.name: m.__name__ for m in modules for s in m.SIGNALS}
    late = [(m.__name__, name) for m in modules for name in getattr(m, "READS", ())
            if position[catalog[name]] > position[m.__name__]]
    assert not late
    assert [m.__name__ for m in ordered(list(reversed(modules)))].index("zerodoctor.signals.run") < \
        [m.__name__ for m in ordered(list(reversed(modules)))].index("zerodoctor.signals.memory")


def test_a_read_no_module_provides_is_refused_by_name() -> None:
    with pytest.raises(ContractError, match="a reads gone.x, which no signal module provides"):
        ordered([_module("a", ("a.x",), reads=("gone.x",))])


def test_modules_that_read_each_other_are_refused_by_name() -> None:
    a, b = _module("a", ("a.x",), reads=("b.x",)), _module("b", ("b.x",), reads=("a.x",))
    with pytest.raises(ContractError, match="in a circle: a, b"):
        ordered([_module("c", ("c.x",)), a, b])


def test_a_module_reading_a_signal_it_did_not_declare_stops_the_run() -> None:
    sneaky = _module("sneaky", ("s.x",), compute=lambda view, values: {"s.x": values.get("a.x")})
    honest = _module("honest", ("h.x",), reads=("a.x",), compute=lambda view, values: {"h.x": values["a.x"] + 1})
    assert signals.compute(None, [_module("a", ("a.x",)), honest]) == {"a.x": 1, "h.x": 2}
    with pytest.raises(ContractError, match="sneaky reads a.x without declaring it in READS"):
        signals.compute(None, [_module("a", ("a.x",)), sneaky])


def _fold_module(version: int | None) -> ModuleType:
    module = ModuleType("folding")

    @dataclass
    class Fold(runview.Fold):
        count: int = 0

    if version is not None:
        Fold.VERSION = version
    module.Fold = Fold
    return module


def test_a_fold_is_keyed_by_its_own_version_not_by_its_code() -> None:
    first = Reads.of([_fold_module(1)]).fold_versions["folding"]
    assert Reads.of([_fold_module(1)]).fold_versions["folding"] == first
    assert Reads.of([_fold_module(2)]).fold_versions["folding"] != first
    with pytest.raises(ReadsConflict, match="folding: its Fold declares no VERSION"):
        Reads.of([_fold_module(None)])


def test_every_core_fold_declares_its_version() -> None:
    assert all("VERSION" in vars(fold) for fold in Reads.of(signals.signal_modules()).folds.values())


def test_a_signal_label_is_the_one_it_declares_else_its_doc_head(monkeypatch: pytest.MonkeyPatch) -> None:
    from zerodoctor.report import units

    declared = Signal("x.free", "bytes", "bytes the allocator could hand out (reserved - allocated)", label="free")
    assert declared.label == "free"
    assert Signal("x.stage", "stage", "ZeRO stage 0-3").label == "ZeRO stage"
    monkeypatch.setattr(units, "_catalog", lambda: {"x.free": declared})
    assert units.evidence_items({"x.free": 2**30}) == ["free: 1024.00 MiB"]


def test_every_core_module_declares_what_it_reads_and_an_older_plugin_still_reads_freely() -> None:
    assert all(hasattr(m, "READS") for m in signals.signal_modules() if m.__name__.startswith("zerodoctor.signals."))
    older = _module("older", ("o.x",), compute=lambda view, values: {"o.x": values.get("a.x")})
    del older.READS
    assert signals.compute(None, [_module("a", ("a.x",)), older]) == {"a.x": 1, "o.x": 1}
