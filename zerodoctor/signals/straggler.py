"""Signals, stragglers: each rank's time in and out of collectives per step → the slow rank, its cost, its cause.

In data parallelism every rank meets the others at each collective, so a rank that is slower
elsewhere makes the others wait in the collective: their ``comm_s`` is its extra time. The rank
that waits least is the slow one; what the others wait beyond its own wait is what it costs them
per step. Where it spends that extra time says why: outside the engine (data loading, host work,
``step_time - forward - backward - step``) or inside forward/backward/step but not in a
collective (its device). Per-rank means over the run's steps, from the probe's events or a
console log's per-rank timers alike; each rank's worst step is left out, so one long pause (a
stall that recovered, ZD706's business) does not pass for a rank that is slow at every step.
"""

from __future__ import annotations

import statistics
from typing import Any

from zerodoctor.signals.view import RunView
from zerodoctor.signals.inputs import STEPS, STEP_TIMES
from zerodoctor.signals.base import shown_by

_timed = shown_by(STEPS, switch=STEP_TIMES)

READS = ()

SIGNALS = [
    _timed("straggler.rank", "rank", "the rank the others wait for: the one that waits least in collectives"),
    _timed("straggler.ranks", "ranks", "the straggling rank, as a list"),
    _timed("straggler.cost_s", "s", "per step, how much longer the other ranks wait in collectives than the "
                                    "straggler does"),
    _timed("straggler.share", "ratio", "the straggler's cost / the median rank's step time: the share of each step "
                                       "lost (0 when only one rank reports its times: there is no other to wait for)"),
    _timed("straggler.step_s", "s", "mean step time (the median over ranks)"),
    _timed("straggler.outside_extra_s", "s", "the straggler's time outside the engine per step, beyond the "
                                             "others' (median)"),
    _timed("straggler.device_extra_s", "s", "the straggler's forward+backward+step time outside collectives, "
                                            "beyond the others'"),
    _timed("straggler.data_s", "s", "the straggler's time in the DataLoader per step"),
    _timed("straggler.others_data_s", "s", "the other ranks' time in the DataLoader per step (median)"),
]

MIN_STEPS = 20  # steps per rank before a rank can be called a straggler
_SUMS = ("comm_s", "step_time_s", "fwd_s", "bwd_s", "optim_s", "data_s")
RANK_FIELDS = {**{f"straggler_{name}": (name, "sum") for name in _SUMS},
               "straggler_comm_max": ("comm_s", "max"), "straggler_step_max": ("step_time_s", "max")}


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    timed = {rank: m for rank, totals in view.per_rank.items() if (m := _means(totals)) is not None}
    # A straggler is slow at every step: over a short run, one pause that spans two steps still
    # weighs on the mean after the worst step is left out, so too few steps call no straggler.
    per_rank = {rank: m for rank, m in timed.items() if view.per_rank[rank]["steps"] >= MIN_STEPS}
    if len(per_rank) < 2:
        return {"straggler.share": 0.0} if timed else {}
    slow = min(per_rank, key=lambda r: per_rank[r]["wait"])
    others = [m for r, m in per_rank.items() if r != slow]
    me = per_rank[slow]
    cost = statistics.median(m["wait"] for m in others) - me["wait"]
    step = statistics.median(m["step"] for m in per_rank.values())
    out: dict[str, Any] = {
        "straggler.rank": slow, "straggler.ranks": [slow], "straggler.cost_s": cost,
        "straggler.share": cost / step if step > 0 else None, "straggler.step_s": step,
        "straggler.outside_extra_s": me["outside"] - statistics.median(m["outside"] for m in others),
        "straggler.device_extra_s": me["device"] - statistics.median(m["device"] for m in others),
    }
    # to the µs: sums folded line by line and sums read back from the store differ in the last bits
    out = {k: round(v, 6) if isinstance(v, float) else v for k, v in out.items()}
    if me["data"] is not None:
        out["straggler.data_s"] = round(me["data"], 6)
        known = [m["data"] for m in others if m["data"] is not None]
        out["straggler.others_data_s"] = round(statistics.median(known), 6) if known else None
    return out


def _means(totals: dict[str, Any]) -> dict[str, float] | None:
    """Per step: wait in collectives, step time, device work outside collectives, time outside the engine."""
    n = totals.get("steps") or 0
    comm, step = totals.get("straggler_comm_s"), totals.get("straggler_step_time_s")
    if n < 3 or comm is None or step is None:
        return None
    engine = sum(totals.get(f"straggler_{k}") or 0.0 for k in ("fwd_s", "bwd_s", "optim_s"))
    data = totals.get("straggler_data_s")
    wait = (comm - (totals.get("straggler_comm_max") or 0.0)) / (n - 1)
    step_s = (step - (totals.get("straggler_step_max") or 0.0)) / (n - 1)
    device = max(engine - comm, 0.0) / n  # waits happen inside collectives: this part has none of them
    return {"wait": wait, "step": step_s, "device": device, "outside": max(step_s - wait - device, 0.0),
            "data": None if data is None else data / n}
