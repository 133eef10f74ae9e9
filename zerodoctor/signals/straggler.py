"""Signals, stragglers: each rank's time in and out of collectives per step → the slow ranks, their cost, their cause.

In data parallelism every rank meets the others at each collective, so a rank that is slower
elsewhere makes the others wait in the collective: their ``comm_s`` is its extra time. The rank
that waits least is the slow one; what the others wait beyond its own wait is what it costs them
per step. Where it spends that extra time says why: outside the engine (data loading, host work,
``step_time - forward - backward - step``) or inside forward/backward/step but not in a
collective (its device).

Judged twice, and the recent judgement is said when it stands out: over the whole run (per-rank
means of the store's totals, each rank's worst step left out, so one long pause — a stall that
recovered, ZD706's business — does not pass for a rank that is slow at every step), and over each
rank's last ``WINDOW_STEPS`` steps (per-rank medians, a fold with that many steps a rank), so a rank
that turns slow on day 3 of a week-long job is named although its mean over the week never gets there.
Ranks are compared by robust statistics: the median wait and its median absolute deviation (MAD), so
among thousands of ranks the one that waits least is named only when it stands out of their spread,
and all the ranks that stand out as far are named with it; when they are the ranks of one node
(their ``run_start`` hosts), the node is.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from zerodoctor.events.columns import Steps
from zerodoctor.events.merges import ByRank
from zerodoctor.signals import view as run_view
from zerodoctor.signals.base import shown_by, verdict
from zerodoctor.signals.inputs import STEP_TIMES, STEPS
from zerodoctor.signals.view import RunView

_timed = shown_by(STEPS, switch=STEP_TIMES)

READS = ()

WINDOW_STEPS = 16  # each rank's recent steps the recent judgement compares
SCOPES = ("rank", "node", "rank_recent", "node_recent")

SIGNALS = [
    _timed("straggler.rank", "rank", "the rank the others wait for: the one that waits least in collectives"),
    _timed("straggler.ranks", "ranks", "the straggling ranks: every rank that waits as much less as the slowest "
                                       "does, beyond the ranks' spread"),
    verdict("straggler.scope", "who holds the others up, and over which steps: rank | node (several ranks, all of "
                               "one host) over the whole run, or rank_recent | node_recent over each rank's last "
                               f"{WINDOW_STEPS} steps (said when it costs more than the whole run's judgement)",
            SCOPES, guarantees={"node": ("straggler.node",), "rank_recent": ("straggler.window_steps",),
                                "node_recent": ("straggler.node", "straggler.window_steps")},
            shown_by=(STEPS,), switch=STEP_TIMES),
    _timed("straggler.node", "host", "the host all the straggling ranks run on, when they are several"),
    _timed("straggler.window_steps", "steps", "steps of each rank the recent judgement is over"),
    _timed("straggler.cost_s", "s", "per step, how much longer the other ranks wait in collectives than the "
                                    "straggler does"),
    _timed("straggler.share", "ratio", "the straggler's cost / the median rank's step time: the share of each step "
                                       "lost (0 when only one rank reports its times: there is no other to wait for, "
                                       "or when no rank stands out of the ranks' spread)"),
    _timed("straggler.step_s", "s", "mean step time (the median over ranks)"),
    _timed("straggler.outside_extra_s", "s", "the straggler's time outside the engine per step, beyond the "
                                             "others' (median)"),
    _timed("straggler.device_extra_s", "s", "the straggler's forward+backward+step time outside collectives, "
                                            "beyond the others'"),
    _timed("straggler.data_s", "s", "the straggler's time in the DataLoader per step"),
    _timed("straggler.others_data_s", "s", "the other ranks' time in the DataLoader per step (median)"),
]

MIN_STEPS = 20  # steps per rank before a rank can be called a straggler
# Among this many ranks or more, the slowest must stand OUTLIER robust deviations (1.4826 × MAD) below the
# median wait: the least of 4,096 healthy ranks' waits lies about 3.5 deviations below it by chance alone.
# Fewer ranks have no spread to speak of (two ranks' MAD is half their difference).
SPREAD_RANKS, OUTLIER = 8, 5.0
RECENT_LEAD = 1.25  # the recent judgement is said when its share is this much the whole run's (or the run names none)
_SUMS = ("comm_s", "step_time_s", "fwd_s", "bwd_s", "optim_s", "data_s")
RANK_FIELDS = {**{f"straggler_{name}": (name, "sum") for name in _SUMS},
               "straggler_comm_max": ("comm_s", "max"), "straggler_step_max": ("step_time_s", "max")}
STEP_FIELDS = {f"straggler_{name}_by_rank": (name, "ranks") for name in _SUMS}


@dataclass
class Fold(run_view.Fold):
    """Each rank's last ``WINDOW_STEPS`` steps: ``[step, wait, device, outside, data]`` (data None where unknown)."""

    VERSION = 1
    recent: dict[str, list[list[Any]]] = field(default_factory=dict)

    def add_steps(self, block: Steps, view: RunView) -> None:
        """Each rank's window takes its last ``WINDOW_STEPS`` timed steps of the block: only those can stay in
        it, so the block is walked from its end until every rank in it has them, where a walk over every
        step and rank cost 6 s of a 1M-event ``diagnose``. A rank new to the window is placed where a walk
        from the block's start would first meet it (``_judge`` takes the first of equally slow ranks)."""
        cols = block.columns
        comm, step_time, fwd, bwd, optim, data = (cols[f"straggler_{name}_by_rank"] for name in _SUMS)
        steps = cols["step"]
        waiting = _ranks_in(comm) & _ranks_in(step_time)  # ranks that may have timed steps here
        rows: dict[int, list[list[Any]]] = {}  # rank → its last timed rows of the block, latest first
        i = len(steps)
        while waiting and i:
            i -= 1
            times, parts, known = step_time[i] or {}, [part[i] or {} for part in (fwd, bwd, optim)], data[i] or {}
            for rank, wait in (comm[i] or {}).items():
                total = times.get(rank)
                if total is None or rank not in waiting:
                    continue
                engine = sum(part.get(rank, 0.0) for part in parts)
                device = max(engine - wait, 0.0)  # waits happen inside collectives: this part has none of them
                mine = rows.setdefault(rank, [])
                mine.append([steps[i], round(wait, 6), round(device, 6),
                             round(max(total - wait - device, 0.0), 6), known.get(rank)])
                if len(mine) == WINDOW_STEPS:
                    waiting.discard(rank)
        for rank in _first_met(rows, self.recent, comm, step_time):
            ring = self.recent.setdefault(str(rank), [])
            ring += reversed(rows[rank])
            del ring[:-WINDOW_STEPS]


def _ranks_in(column: Sequence[dict[int, Any] | None]) -> set[int]:
    """The ranks with a value at some step of a ``ranks`` column (a ``ByRank`` knows without building a step's dict)."""
    return column.ranks() if isinstance(column, ByRank) else set().union(*filter(None, column))


def _first_met(rows: dict[int, Any], known: dict[str, Any], comm: list[Any], step_time: list[Any]) -> list[int]:
    """The ranks of ``rows``, those not ``known`` yet in the order a walk from the block's start meets their
    first timed step (the rows of a step come in the order their lines were read)."""
    new = {rank for rank in rows if str(rank) not in known}
    order = [rank for rank in rows if rank not in new]
    if len(new) <= 1:
        return order + list(new)
    for i, waits in enumerate(comm):
        times = step_time[i] or {}
        for rank in waits or {}:
            if rank in new and times.get(rank) is not None:
                new.discard(rank)
                order.append(rank)
        if not new:
            break
    return order


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    timed = {rank: m for rank, totals in view.per_rank.items() if (m := _means(totals)) is not None}
    # A straggler is slow at every step: over a short run, one pause that spans two steps still
    # weighs on the mean after the worst step is left out, so too few steps call no straggler.
    per_rank = {rank: m for rank, m in timed.items() if view.per_rank[rank]["steps"] >= MIN_STEPS}
    if len(per_rank) < 2:
        return {"straggler.share": 0.0} if timed else {}
    hosts = {start["rank"]: start.get("host") for start in view.starts}
    run = _judge(per_rank, hosts)
    recent = _judge(_recent(view), hosts)
    if recent is not None and (run is None or recent["straggler.share"] >= RECENT_LEAD * run["straggler.share"]):
        recent["straggler.scope"] += "_recent"
        recent["straggler.window_steps"] = WINDOW_STEPS
        return recent
    return run if run is not None else {"straggler.share": 0.0}


def _recent(view: RunView) -> dict[int, dict[str, Any]]:
    """Per rank with a full window of steps that are recent (a rank that stopped has none): medians over it."""
    rings = {int(rank): ring for rank, ring in view.fold(__name__).recent.items()
             if len(ring) == WINDOW_STEPS and view.per_rank.get(int(rank), {}).get("steps", 0) >= MIN_STEPS}
    if not rings:
        return {}
    latest = max(ring[-1][0] for ring in rings.values())
    out = {}
    for rank, ring in rings.items():
        if ring[-1][0] < latest - WINDOW_STEPS:
            continue
        data = [row[4] for row in ring if row[4] is not None]
        out[rank] = {"wait": statistics.median(row[1] for row in ring),
                     "device": statistics.median(row[2] for row in ring),
                     "outside": statistics.median(row[3] for row in ring),
                     "step": statistics.median(row[1] + row[2] + row[3] for row in ring),
                     "data": statistics.median(data) if data else None}
    return out


def _judge(per_rank: dict[int, dict[str, Any]], hosts: dict[int, Any]) -> dict[str, Any] | None:
    """The slow ranks among ``per_rank`` (wait, step, device, outside, data per step), or None when none
    stands out of the ranks' spread."""
    if len(per_rank) < 2:
        return None
    waits = [m["wait"] for m in per_rank.values()]
    middle = statistics.median(waits)
    spread = 1.4826 * statistics.median(abs(w - middle) for w in waits) if len(waits) >= SPREAD_RANKS else 0.0
    slowest = min(per_rank, key=lambda r: per_rank[r]["wait"])
    deficit = middle - per_rank[slowest]["wait"]
    if deficit <= 0 or deficit < OUTLIER * spread:
        return None
    # the ranks as far below the median as the slowest, give or take half (8 throttled GPUs of one node are
    # not equally slow), and beyond the spread
    slow = sorted(r for r, m in per_rank.items() if middle - m["wait"] >= max(deficit / 2, OUTLIER * spread))
    others = [m for r, m in per_rank.items() if r not in slow]
    if not others:
        return None
    me = {key: statistics.median(per_rank[r][key] for r in slow) for key in ("wait", "device", "outside")}
    cost = statistics.median(m["wait"] for m in others) - me["wait"]
    step = statistics.median(m["step"] for m in per_rank.values())
    node = {hosts.get(r) for r in slow}
    shared = next(iter(node)) if len(slow) > 1 and len(node) == 1 and None not in node else None
    out: dict[str, Any] = {
        "straggler.rank": slowest, "straggler.ranks": slow, "straggler.scope": "node" if shared else "rank",
        "straggler.cost_s": cost, "straggler.share": cost / step if step > 0 else None, "straggler.step_s": step,
        "straggler.outside_extra_s": me["outside"] - statistics.median(m["outside"] for m in others),
        "straggler.device_extra_s": me["device"] - statistics.median(m["device"] for m in others),
    }
    if shared:
        out["straggler.node"] = shared
    # to the µs: sums folded line by line and sums read back from the store differ in the last bits
    out = {k: round(v, 6) if isinstance(v, float) else v for k, v in out.items()}
    known = [per_rank[r]["data"] for r in slow if per_rank[r]["data"] is not None]
    if known:
        out["straggler.data_s"] = round(statistics.median(known), 6)
        theirs = [m["data"] for m in others if m["data"] is not None]
        out["straggler.others_data_s"] = round(statistics.median(theirs), 6) if theirs else None
    return out


def _means(totals: dict[str, Any]) -> dict[str, Any] | None:
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
