"""Signals, evidence: how strong the evidence behind each family of signals is, for runs read from a console log.

Events from the probe cover every rank and step; a console log shows what DeepSpeed chose to
print — rank 0's lines for most of its messages, one OOM message, the watchdogs that fired.
``evidence.<family>`` says so in words; the rule engine attaches it to a finding as
``evidence_strength`` by the family of the finding's signals. Absent for runs with events.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.signals.base import Signal
from zerodoctor.runview import RunView

FAMILIES = ("fp16", "numerics", "comm", "offload", "batch", "memory", "hang", "trainer")

SIGNALS = [Signal(f"evidence.{family}", "text", f"how strong the evidence behind the {family}.* signals is "
                  "(console logs only)") for family in FAMILIES]


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    if not view.from_console_log:
        return {}
    logs = view.events.get("log", [])
    step_ranks = sorted(view.per_rank)
    steps = values.get("run.steps") or 0
    if step_ranks:
        who = "rank 0's lines only" if step_ranks == [0] else "lines of ranks " + ", ".join(map(str, step_ranks))
        stepwise = f"text: {who}, {steps} step(s) seen"
    else:
        stepwise = "text: no per-step lines"
    out = {f"evidence.{family}": stepwise for family in ("fp16", "numerics", "comm", "offload")}
    if values.get("fp16.hit_min_scale") and not steps:
        out["evidence.fp16"] = "text: the 'loss scale already at minimum' exception only"
    ooms = view.events.get("oom", [])
    if ooms:
        ranks = sorted({e["rank"] for e in ooms})
        out["evidence.memory"] = ("text: a single OOM message" if len(ooms) == 1 else
                                  f"text: {len(ooms)} OOM messages from ranks {', '.join(map(str, ranks))}")
    timeouts = sorted({e["rank"] for e in logs if e.get("what") == "collective_timeout"})
    if timeouts:
        out["evidence.hang"] = f"text: watchdog lines from rank(s) {', '.join(map(str, timeouts))}"
    said = [e.get("what") for e in logs if e.get("what") in ("batch_assertion", "trainer_batch", "grad_accum_update")]
    out["evidence.batch"] = out["evidence.trainer"] = (
        "text: " + ", ".join(dict.fromkeys(w.replace("_", " ") for w in said)) + " message(s)" if said else stepwise)
    return out
