"""Rules: the signals a run lacked → the switch that would have shown them.

An unevaluated rule should say what to turn on, not just what is missing. One table by signal
name prefix, most specific first, so no rule needs its own special case.
"""

from __future__ import annotations

ZD_RUN = "run the job under `zerodoctor run`, which records it for every rank and step"

HINTS: tuple[tuple[str, str], ...] = (
    ("fp16.", 'set "log_level": "info" and "steps_per_print": 1 in the DeepSpeed config: since 0.17.6 the '
              "OVERFLOW and step=N lines are hidden at the default level; or " + ZD_RUN),
    ("numerics.", '"steps_per_print": 1 (with "log_level": "info") prints each step\'s lr and skips; or ' + ZD_RUN),
    ("comm.", '"wall_clock_breakdown": true prints step and allreduce times, "comms_logger": {"enabled": true} '
              "the collectives; or " + ZD_RUN),
    ("offload.optimizer_fraction", '"wall_clock_breakdown": true prints the optimizer step time; or ' + ZD_RUN),
    ("batch.samples_per_micro", "only the samples really fed show this: " + ZD_RUN),
    ("batch.effective", "only the samples really fed show this: " + ZD_RUN),
    ("batch.micro_batches_per_step", "only counting backward calls shows this: " + ZD_RUN),
    ("batch.", 'the DeepSpeed config dump ("log_level": "info") prints the batch settings; or ' + ZD_RUN),
    ("run.", 'the DeepSpeed config dump ("log_level": "info") prints world size, stage and precision; or ' + ZD_RUN),
    ("memory.stage2", "the parameter count and device memory: " + ZD_RUN),
)


def hint_for(missing: tuple[str, ...]) -> str | None:
    """The switches for the missing signals the table knows (each once), or ``None``."""
    hints = [next((hint for prefix, hint in HINTS if name.startswith(prefix)), None) for name in missing]
    return "; ".join(dict.fromkeys(h for h in hints if h)) or None
