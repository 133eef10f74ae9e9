"""Rules: the signals a run lacked, and what its inputs held → what it lacked, and the switch that would show it.

An unevaluated rule should say what to turn on, not just what is missing, and nothing it says may be
false of the run: "no per-step lines" only where there are none, "run it under `zerodoctor run`"
only where it was not. Each signal declares the inputs it comes from and the switch that shows it
(``Signal.shown_by``, ``Signal.switch``: the catalogue, ``signals/inputs.py``), and the run's
``RunInputs`` say whether that input is there. A signal missing although its inputs are there (too
few steps, a value the lines do not print) is named as missing, never blamed on an absent input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from zerodoctor.signals.base import Signal
from zerodoctor.signals.inputs import CONFIG, DEVICE, DUMPS, HEARTBEATS, HOST_TIMES, PROFILE, STEPS, SYNCED, TRACES

ZD_RUN = "run the job under `zerodoctor run`, which records it for every rank and step"

# what the probe would have needed, for a run it recorded that still lacks the input
_PROBE_LACKS = {
    HEARTBEATS: "the probe writes a heartbeat every 5 s while a rank trains (this run recorded none)",
    DEVICE: "a GPU run: the probe records the device's memory there (this run stated none)",
    STEPS: "a run that reaches its first optimizer step (this run recorded none)",
    TRACES: PROFILE,
}


@dataclass(frozen=True)
class RunInputs:
    """What one run's inputs held, read from its signals (``run.*``, ``config.*``, ``hang.*``, ``evidence.*``)."""

    probe: bool  # recorded by `zerodoctor run` (rank files), not only read from console logs
    config: bool  # the resolved DeepSpeed config (the probe's run_start, a console log's config dump)
    steps: int  # optimizer steps recorded
    heartbeats: bool
    device_memory: bool  # the accelerator's memory, as the run stated it
    dumps: bool  # flight-recorder dumps
    traces: bool = False  # profiler traces
    host_only: bool = False  # DeepSpeed's CPU accelerator: a console's collective times never waited for a device

    @classmethod
    def of(cls, values: dict[str, Any]) -> RunInputs:
        return cls(probe=not values.get("evidence.console_log"), config=values.get("config.zero_stage") is not None,
                   steps=values.get("run.steps") or 0, heartbeats=values.get("hang.window_s") is not None,
                   device_memory=values.get("run.device_memory_bytes") is not None,
                   dumps=values.get("hang.fr_behind") is not None, traces=bool(values.get("trace.present")),
                   host_only=bool(values.get("run.host_only")))

    def has(self, what: str) -> bool:
        return {CONFIG: self.config, STEPS: self.steps > 0, HEARTBEATS: self.heartbeats,
                DEVICE: self.device_memory, DUMPS: self.dumps, TRACES: self.traces,
                SYNCED: self.probe or not self.host_only}[what]

    def lacks(self, missing: Iterable[Signal]) -> tuple[str, ...]:
        """The inputs this run lacks that ``missing`` signals come from (each once, first need first)."""
        out: dict[str, None] = {}
        for signal in missing:
            absent = [n for n in signal.shown_by if not self.has(n)]
            if absent:
                out[absent[0]] = None  # steps before device memory: the first input missing explains it
        return tuple(out)

    def unexplained(self, missing: Iterable[Signal]) -> tuple[str, ...]:
        """The ``missing`` signals whose inputs this run has: named as missing, never blamed on an input."""
        return tuple(s.label for s in missing if all(self.has(n) for n in s.shown_by))


def hint_for(missing: list[Signal], inputs: RunInputs) -> str | None:
    """The switches that would show the missing signals (each once), then the probe; ``None`` if none known.

    A run the probe recorded is never told to run under the probe: it is told what the probe lacked.
    """
    if inputs.probe:
        notes = [_PROBE_LACKS[w] for w in inputs.lacks(missing) if w in _PROBE_LACKS]
        dumps = [s.switch for s in missing if DUMPS in s.shown_by and not inputs.dumps]
        return "; ".join(dict.fromkeys([*notes, *dumps])) or None
    if not any(s.shown_by or s.switch for s in missing):
        return None
    # a switch already on, but blind on this accelerator, is not worth naming: only the probe times these
    blind = [s for s in missing if inputs.lacks([s]) == (SYNCED,)]
    missing = [s for s in missing if s not in blind]
    if blind and not missing:
        return f"{HOST_TIMES}; {ZD_RUN}"
    # a config dump is whole, and so is a trace: a run that has one gains nothing from the switch that gives it
    # (step lines are not: one that prints lr and loss may still lack the times another switch adds)
    switches = list(dict.fromkeys(s.switch for s in missing if s.switch
                                  and not (s.shown_by in ((CONFIG,), (TRACES,)) and inputs.has(s.shown_by[0]))))
    return "; ".join(switches) + f"; or {ZD_RUN}" if switches else ZD_RUN[0].upper() + ZD_RUN[1:]
