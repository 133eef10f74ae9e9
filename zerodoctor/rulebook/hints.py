"""Rules: the signals a run lacked, and what its inputs held → what it lacked, and the switch that would show it.

An unevaluated rule should say what to turn on, not just what is missing, and nothing it says may be
false of the run: "no per-step lines" only where there are none, "run it under `zerodoctor run`"
only where it was not. So each missing signal is traced to the input that carries it (one table by
signal name prefix, most specific first), and the run's ``RunInputs`` say whether that input is there.
A signal missing although its input is there (too few steps, a value the lines do not print) is
named as missing, never blamed on an absent input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ZD_RUN = "run the job under `zerodoctor run`, which records it for every rank and step"

# the inputs a signal comes from (the keys of RunInputs.lacks)
CONFIG, STEPS, HEARTBEATS, DEVICE, DUMPS = "config", "steps", "heartbeats", "device memory", "flight-recorder dumps"
TRACES = "profiler traces"
PROFILE = ("profile a few steps: `zerodoctor run --profile 10-12`, or hand over torch.profiler traces "
           "(export_chrome_trace, TensorBoard's plugin folder) with the logs")

# (signal name prefix, the inputs it needs, the switch that shows it in a console log; None: only the probe)
HINTS: tuple[tuple[str, tuple[str, ...], str | None], ...] = (
    ("fp16.", (STEPS,), 'set "log_level": "info" and "steps_per_print": 1 in the DeepSpeed config (since 0.17.6 '
                        "the OVERFLOW and step=N lines are hidden at the default level)"),
    ("numerics.", (STEPS,), '"steps_per_print": 1 (with "log_level": "info") prints each step\'s lr and skips'),
    ("comm.", (STEPS,), '"wall_clock_breakdown": true prints step and allreduce times, "comms_logger": '
                        '{"enabled": true} the collectives'),
    ("offload.optimizer_fraction", (STEPS,), '"wall_clock_breakdown": true prints the optimizer step time'),
    ("offload.", (STEPS,), None),
    ("batch.samples_per_micro", (STEPS,), None),
    ("batch.effective", (STEPS,), None),
    ("batch.micro_batches_per_step", (STEPS,), None),
    ("batch.", (CONFIG,), 'the DeepSpeed config dump ("log_level": "info") prints the batch settings'),
    ("run.steps", (STEPS,), None),
    ("run.first_step", (STEPS,), None),
    ("run.last_step", (STEPS,), None),
    ("run.device_memory", (DEVICE,), None),
    ("run.params", (), None),
    ("run.", (CONFIG,), 'the DeepSpeed config dump ("log_level": "info") prints world size, stage and precision'),
    ("config.", (CONFIG,), 'the DeepSpeed config dump ("log_level": "info") prints the whole config'),
    ("memory.alloc", (STEPS,), None),
    ("memory.stage2", (CONFIG, DEVICE), None),
    ("hang.fr_", (DUMPS,), "TORCH_NCCL_DUMP_ON_TIMEOUT=1 makes NCCL dump its flight recorder (under "
                           "`zerodoctor run` the dumps land in the run directory)"),
    ("hang.kind", (HEARTBEATS,), None),
    ("hang.recovered", (HEARTBEATS,), None),
    ("hang.window", (HEARTBEATS,), None),
    ("hang.stalled", (HEARTBEATS,), None),
    ("hang.", (), None),  # the watchdog's timeouts: a console log shows them when they happen
    ("creep.host", (HEARTBEATS,), None),
    ("creep.device", (STEPS, DEVICE), None),
    ("straggler.", (STEPS,), '"wall_clock_breakdown": true prints the step and allreduce times'),
    ("trace.", (TRACES,), PROFILE),
)

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

    @classmethod
    def of(cls, values: dict[str, Any]) -> RunInputs:
        return cls(probe=not values.get("evidence.console_log"), config=values.get("config.zero_stage") is not None,
                   steps=values.get("run.steps") or 0, heartbeats=values.get("hang.window_s") is not None,
                   device_memory=values.get("run.device_memory_bytes") is not None,
                   dumps=values.get("hang.fr_behind") is not None, traces=bool(values.get("trace.present")))

    def has(self, what: str) -> bool:
        return {CONFIG: self.config, STEPS: self.steps > 0, HEARTBEATS: self.heartbeats,
                DEVICE: self.device_memory, DUMPS: self.dumps, TRACES: self.traces}[what]

    def lacks(self, missing: tuple[str, ...]) -> tuple[str, ...]:
        """The inputs this run lacks that ``missing`` signals come from (each once, first need first)."""
        out: dict[str, None] = {}
        for name in missing:
            absent = [n for n in needs(name) if not self.has(n)]
            if absent:
                out[absent[0]] = None  # steps before device memory: the first input missing explains it
        return tuple(out)


def needs(name: str) -> tuple[str, ...]:
    """The inputs the signal ``name`` comes from (none known: ``()``)."""
    entry = _entry(name)
    return entry[1] if entry else ()


def _entry(name: str) -> tuple[str, tuple[str, ...], str | None] | None:
    return next((e for e in HINTS if name.startswith(e[0])), None)


def hint_for(missing: tuple[str, ...], inputs: RunInputs) -> str | None:
    """The switches that would show the missing signals (each once), then the probe; ``None`` if none known.

    A run the probe recorded is never told to run under the probe: it is told what the probe lacked.
    """
    if inputs.probe:
        notes = [_PROBE_LACKS[w] for w in inputs.lacks(missing) if w in _PROBE_LACKS]
        dumps = [e[2] for e in map(_entry, missing) if e and DUMPS in e[1] and not inputs.dumps]
        return "; ".join(dict.fromkeys([*notes, *dumps])) or None
    entries = [_entry(name) for name in missing]
    if not any(entries):
        return None
    # a config dump is whole, and so is a trace: a run that has one gains nothing from the switch that gives it
    # (step lines are not: one that prints lr and loss may still lack the times another switch adds)
    switches = list(dict.fromkeys(e[2] for e in entries if e and e[2]
                                  and not (e[1] in ((CONFIG,), (TRACES,)) and inputs.has(e[1][0]))))
    return "; ".join(switches) + f"; or {ZD_RUN}" if switches else ZD_RUN[0].upper() + ZD_RUN[1:]
