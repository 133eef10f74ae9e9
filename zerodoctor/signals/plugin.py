"""Signals as the core's own plugin: the modules that compute them."""

from __future__ import annotations

from types import ModuleType

from zerodoctor.plugins.hookspecs import hookimpl


@hookimpl
def register_signals() -> list[ModuleType | type]:
    from zerodoctor.signals import (amp, barrier, batch, comms, config, crashes, creep, evidence, fatal, hang, loss,
                                    memory, mismatch, numerics, offload, plots, price, run, stacks, straggler,
                                    throughput, trace, trainer)

    # The order they run in is computed from what each reads (READS, signals/contracts.py); this one is kept
    # where nothing decides it, and so is the catalogue's. plots computes nothing: its fold keeps what the
    # report's plots draw.
    return [run, batch, numerics, amp, comms, trace, creep, memory, offload, price, config, hang, barrier, straggler,
            trainer, crashes, fatal, loss, mismatch, stacks, throughput, plots, evidence]
