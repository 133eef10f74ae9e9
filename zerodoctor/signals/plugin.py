"""Signals as the core's own plugin: the modules that compute them, in the order they run."""

from __future__ import annotations

from zerodoctor.plugins.hookspecs import hookimpl


@hookimpl
def register_signals() -> list:
    from zerodoctor.signals import (amp, batch, comms, config, crashes, creep, evidence, fatal, hang, memory,
                                    mismatch, numerics, offload, plots, run, stacks, straggler, trace, trainer)

    # Order matters: a module may read what earlier ones computed; evidence sums up last. plots computes
    # nothing: its fold keeps what the report's plots draw.
    return [run, batch, numerics, amp, trace, straggler, comms, memory, creep, offload, config, hang, trainer, crashes,
            fatal, mismatch, stacks, plots, evidence]
