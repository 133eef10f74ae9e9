"""Signals, stack dumps: py-spy / faulthandler dumps → the processes caught waiting in a collective.

Reads ``log`` events ``stack_dump`` (``sources/stackdump.py``). A dump is what someone takes of a job that
stopped making progress, so a process waiting in a collective is the hang's fingerprint; which collective, and
which call of the user's code issued it, say where to look. The ranks not in the collective (dumped, but
elsewhere) are the ones the others wait for.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from zerodoctor.signals.view import RunView
from zerodoctor.signals.base import Signal

READS = ()

SIGNALS = [
    Signal("stacks.in_collective", "processes", "dumped processes waiting in a collective"),
    Signal("stacks.waiting_ranks", "ranks", "ranks whose dumped stacks wait in a collective"),
    Signal("stacks.op", "name", "collective the dumped stacks wait in"),
    Signal("stacks.caller", "frame", "frame that called that collective"),
]


def compute(run: RunView, values: dict[str, Any]) -> dict[str, Any]:
    dumps = [e for e in run.events.get("log", []) if e.get("what") == "stack_dump"]
    out: dict[str, Any] = {"stacks.in_collective": len({e["rank"] for e in dumps})}
    if dumps:
        ops = Counter((e.get("data") or {}).get("op") for e in dumps)
        op = ops.most_common(1)[0][0]
        out.update({"stacks.waiting_ranks": sorted({e["rank"] for e in dumps}), "stacks.op": op,
                    "stacks.caller": next(((e.get("data") or {}).get("caller") for e in dumps
                                           if (e.get("data") or {}).get("op") == op), None)})
    return out
