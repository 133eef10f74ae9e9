"""Signals, evidence: what a run read from a console log could show at all → facts that word the findings' strength.

Events from the probe cover every rank and step; a console log shows what DeepSpeed chose to
print — rank 0's lines for most of its messages, one OOM message, the watchdogs that fired.
These signals say which of that the log held; ``rulebook/strength.py`` words it as a finding's
``evidence_strength``. Absent for runs with events.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.signals.view import RunView
from zerodoctor.signals.base import Signal

# Console messages that carry the batch and trainer settings, in the words a finding uses for them.
MESSAGES = {"batch_assertion": "DeepSpeed's batch assertion", "trainer_batch": "the Trainer's batch header",
            "grad_accum_update": "Accelerate's grad-accum update", "hf_config_mismatch": "the Trainer's mismatch error"}

READS = ()

SIGNALS = [
    Signal("evidence.console_log", "bool", "the run was read from console logs only, not the probe's events"),
    Signal("evidence.step_ranks", "ranks", "ranks whose per-step lines the log holds (console logs only)"),
    Signal("evidence.messages", "keys", "batch and trainer messages the log holds: " + ", ".join(MESSAGES)),
]


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    if not view.from_console_log:
        return {}
    said = [e.get("what") for e in view.events.get("log", []) if e.get("what") in MESSAGES]
    return {"evidence.console_log": True, "evidence.step_ranks": sorted(view.per_rank) or None,
            "evidence.messages": list(dict.fromkeys(said)) or None}
