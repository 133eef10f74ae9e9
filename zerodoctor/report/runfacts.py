"""Report: a run's signals → the line that says what the run was and how it went, beside its findings.

A healthy run used to print "no findings" and nothing more: whether the tool saw 2 ranks or 64,
ZeRO-2 or ZeRO-3, the steps the user expected, and how many rules could judge them, was left to
guess. Each part is left out when the run does not show it (a console log without step times).
"""

from __future__ import annotations

from typing import Any

from zerodoctor.messages.units import format_count, format_seconds, plural

# The signals the line reads, then those `check --from` calibrates its step times with: what a report keeps of
# each run's values
FACTS = ("run.world_size_stated", "run.ranks_seen", "run.zero_stage", "run.precision", "run.first_step",
         "run.last_step", "run.step_s", "batch.effective_batch", "comm.fraction",
         "run.world_size", "run.params", "comm.step_s", "comm.compute_s", "offload.optimizer", "offload.param",
         "offload.optimizer_fraction")


def facts_of(values: dict[str, Any]) -> dict[str, Any]:
    """The run's facts from its signals; a per-step series as its summary."""
    out = {}
    for name in FACTS:
        value = values.get(name)
        value = getattr(value, "summary", value)
        if value is not None:
            out[name] = value
    return out


def shape(facts: dict[str, Any]) -> str:
    """``2 ranks, ZeRO-2, bf16``: what the run is, as far as it showed (ranks "seen" when it never said)."""
    world, seen, stage = facts.get("run.world_size_stated"), facts.get("run.ranks_seen"), facts.get("run.zero_stage")
    return ", ".join(part for part in (
        f"{world} {plural('rank', world)}" if world else f"{seen} {plural('rank', seen)} seen" if seen else None,
        f"ZeRO-{stage}" if stage is not None else None,
        facts.get("run.precision")) if part)


def pace(facts: dict[str, Any]) -> str:
    """``steps 1–30, 30.3 ms a step, 528 samples/s, collectives 79% of a step``: how far, how fast."""
    first, last, step_s = facts.get("run.first_step"), facts.get("run.last_step"), facts.get("run.step_s")
    batch, comm = facts.get("batch.effective_batch"), facts.get("comm.fraction")
    parts = []
    if last is not None:
        parts.append(f"step {last:,}" if first in (None, last) else f"steps {first:,}–{last:,}")
    if step_s:
        parts.append(f"{format_seconds(step_s)} a step")
        if batch:
            rate = batch / step_s
            parts.append(f"{rate:,.0f} samples/s" if rate >= 100 else f"{rate:.3g} samples/s")
    if comm is not None:
        parts.append(f"collectives {comm:.0%} of a step")
    return ", ".join(parts)


def run_line(run: str, facts: dict[str, Any], rules: int, unjudged: int, fired: int) -> str:
    """``run r: 2 ranks, ZeRO-2, fp32; steps 1–30, …; 42 of 54 rules judged, none fired``."""
    judged = f"{rules - unjudged} of {format_count(rules, 'rule')} judged, " + (
        f"{fired} fired" if fired else "none fired")
    return f"run {run}: " + "; ".join(part for part in (shape(facts), pace(facts), judged) if part)
