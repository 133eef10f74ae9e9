"""Watch: what it said of a finding, or of a run, before → whether it must say it again, and what changed.

A live run is judged again and again, and its findings' numbers move every time: saying each
move would bury the lines that matter. A finding is said again when its severity changes, or
when one of its evidence numbers moves by a factor of ``FACTOR`` or more from the value last
*said* (not last judged, so a slow drift is said once it has gone far enough): a memory-creep
forecast of 2,212 steps that turns into 70, a stall that has doubled. A run is said when it is
first seen in this watch and when its ranks have all ended, cleanly or not.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.report.runfacts import facts_of, shape
from zerodoctor.report.units import evidence_items

FACTOR = 2.0  # how far a number must move from what was said; a countdown is said again at each halving


def said_of(body: dict[str, Any]) -> dict[str, Any]:
    """What an announcement of a finding (its JSON body) says, as kept in the store."""
    return {"severity": body["severity"],
            "evidence": {k: v for k, v in body.get("evidence", {}).items() if _number(v)}}


def change(said: dict[str, Any] | None, body: dict[str, Any]) -> str | None:
    """Why a finding announced as ``said`` is to be said again as ``body``; None: it is not."""
    if said is None:
        return None
    if said["severity"] != body["severity"]:
        return f"was {said['severity'].upper()}"
    before = said["evidence"]
    moved = {name: old for name, old in before.items()
             if _number(new := body.get("evidence", {}).get(name)) and _moved(old, new)}
    return f"was {'; '.join(evidence_items(moved))}" if moved else None


def _moved(old: float, new: float) -> bool:
    if old == new:
        return False
    if old == 0 or new == 0 or (old < 0) != (new < 0):
        return True  # from nothing, to nothing, or across zero
    return max(abs(old), abs(new)) / min(abs(old), abs(new)) >= FACTOR


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def run_state(values: dict[str, Any]) -> str:
    """``running``, ``ended`` or ``crashed``: every rank seen has said it ended, with exit code 0 or not."""
    seen, ended = values.get("run.ranks_seen"), values.get("run.ranks_ended")
    if not seen or not ended or ended < max(seen, values.get("run.world_size") or 0):
        return "running"
    return "crashed" if values.get("run.exit_code") else "ended"


def run_line(name: str, state: str, values: dict[str, Any]) -> str:
    """One line for a run seen or changed: its state, where it is, and what it is."""
    facts = facts_of(values)
    where = f" at step {facts['run.last_step']:,}" if "run.last_step" in facts else ""
    code = f" (exit code {values['run.exit_code']})" if state == "crashed" else ""
    return f"run {name}: {state}{code}{where}" + (f" — {shape(facts)}" if shape(facts) else "")
