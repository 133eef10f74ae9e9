"""Rules: the signals a run lacked → the switch that would have shown them.

An unevaluated rule should say what to turn on, not just what is missing. One table by signal
name prefix, most specific first, so no rule needs its own special case.
"""

from __future__ import annotations

ZD_RUN = "run the job under `zerodoctor run`, which records it for every rank and step"

# (signal name prefix, the switch that shows it in a console log; None: only the probe sees it)
HINTS: tuple[tuple[str, str | None], ...] = (
    ("fp16.", 'set "log_level": "info" and "steps_per_print": 1 in the DeepSpeed config (since 0.17.6 the '
              "OVERFLOW and step=N lines are hidden at the default level)"),
    ("numerics.", '"steps_per_print": 1 (with "log_level": "info") prints each step\'s lr and skips'),
    ("comm.", '"wall_clock_breakdown": true prints step and allreduce times, "comms_logger": {"enabled": true} '
              "the collectives"),
    ("offload.optimizer_fraction", '"wall_clock_breakdown": true prints the optimizer step time'),
    ("batch.samples_per_micro", None),
    ("batch.effective", None),
    ("batch.micro_batches_per_step", None),
    ("batch.", 'the DeepSpeed config dump ("log_level": "info") prints the batch settings'),
    ("run.", 'the DeepSpeed config dump ("log_level": "info") prints world size, stage and precision'),
    ("memory.stage2", None),
    ("hang.fr_", "TORCH_NCCL_DUMP_ON_TIMEOUT=1 makes NCCL dump its flight recorder (under `zerodoctor run` the "
                 "dumps land in the run directory)"),
    ("hang.", None),  # heartbeats: only the probe writes them
    ("creep.host", None),
    ("straggler.", '"wall_clock_breakdown": true prints the step and allreduce times'),
)


def hint_for(missing: tuple[str, ...]) -> str | None:
    """The switches for the missing signals the table knows (each once), then the probe; ``None`` if none known."""
    known = [next(((hint,) for prefix, hint in HINTS if name.startswith(prefix)), None) for name in missing]
    if not any(known):
        return None
    switches = list(dict.fromkeys(k[0] for k in known if k and k[0]))
    return "; ".join(switches) + f"; or {ZD_RUN}" if switches else ZD_RUN[0].upper() + ZD_RUN[1:]
