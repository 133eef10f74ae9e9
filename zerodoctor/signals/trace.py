"""Signals, profiler traces: the ``trace`` events of a run (one per rank and profiled step) → how much of
the step communication, idle time and the host took, and how much of the communication compute hid.

A sum of collective time says how long the collectives ran; only a trace says whether anything
ran beside them (``sources/profiler_trace.py`` measures it on the device's streams, or a CPU-only
trace's threads). The figures are summed over every profiled step of every rank before dividing,
so a long step weighs as much as it cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerodoctor.signals import view as runview
from zerodoctor.signals.view import RunView
from zerodoctor.signals.inputs import PROFILE, TRACES
from zerodoctor.signals.base import shown_by

_traced = shown_by(TRACES, switch=PROFILE)

READS = ()

SIGNALS = [
    _traced("trace.present", "flag", "the run has profiler trace figures (a trace read beside or instead of its logs)"),
    _traced("trace.timeline", "name", "device: GPU streams were measured; host: a CPU-only trace's threads"),
    _traced("trace.steps", "steps", "profiled steps read, summed over ranks"),
    _traced("trace.first_step", "step", "the first profiled step (the trace's ProfilerStep#N)"),
    _traced("trace.last_step", "step", "the last profiled step"),
    _traced("trace.ranks", "ranks", "the ranks whose traces were read"),
    _traced("trace.comm_fraction", "ratio", "time some collective runs / profiled step time"),
    _traced("trace.exposed_comm_fraction", "ratio", "time a collective runs while no compute does / profiled step "
                                                    "time"),
    _traced("trace.overlap_share", "ratio", "share of collective time hidden behind compute"),
    _traced("trace.allgather_fraction", "ratio", "all-gather time / profiled step time"),
    _traced("trace.allgather_exposed_fraction", "ratio", "all-gather time no compute hides / profiled step time"),
    _traced("trace.allgather_overlap_share", "ratio", "share of all-gather time hidden behind compute"),
    _traced("trace.idle_fraction", "ratio", "time nothing runs on the measured timeline / profiled step time"),
    _traced("trace.idle_cause", "name",
            "where the host was while the timeline idled, the largest of: dataloader, optimizer (Optimizer.step), "
            "host (anything else: Python, kernel launches, waits)"),
    _traced("trace.idle_cause_share", "ratio", "share of the idle time spent in trace.idle_cause"),
    _traced("trace.host_gap_fraction", "ratio", "time of the steps' CPU ranges with no operator on any thread / step "
                                                "time"),
    _traced("trace.top_exposed_op", "name", "the collective op of the longest exposed collective"),
    _traced("trace.top_exposed_s", "s", "exposed time of the longest exposed collective"),
    _traced("trace.top_exposed_bytes", "bytes", "message size of the longest exposed collective (when recorded)"),
    _traced("trace.top_exposed_step", "step", "profiled step of the longest exposed collective"),
    _traced("trace.allgather_top_exposed_s", "s", "exposed time of the longest exposed all-gather"),
    _traced("trace.allgather_top_exposed_bytes", "bytes", "message size of the longest exposed all-gather (when "
                                                          "recorded)"),
    _traced("trace.allgather_top_exposed_step", "step", "profiled step of the longest exposed all-gather"),
]

FOLD_EVENTS = ("trace",)
_SUMMED = ("window_s", "compute_s", "comm_s", "exposed_comm_s", "idle_s", "idle_dataloader_s", "idle_optimizer_s",
           "host_gap_s")


@dataclass
class Fold(runview.Fold):
    """Sums of the figures over every trace row, per-op sums, and the longest exposed collective."""

    VERSION = 1  # of the saved state: bump it when the fields or what they hold change
    rows: int = 0
    ranks: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)  # first and last profiled step
    timelines: list[str] = field(default_factory=list)
    sums: dict[str, float] = field(default_factory=dict)
    per_op: dict[str, list[float]] = field(default_factory=dict)  # op → [total s, exposed s]
    top: dict[str, dict[str, Any]] = field(default_factory=dict)  # op → its longest exposed call, with step and rank

    def event(self, event: dict[str, Any]) -> None:
        self.rows += 1
        if event["rank"] not in self.ranks:
            self.ranks.append(event["rank"])
        if event.get("step") is not None:
            self.steps = [min(self.steps[0], event["step"]), max(self.steps[1], event["step"])] if self.steps \
                else [event["step"], event["step"]]
        if event.get("timeline") and event["timeline"] not in self.timelines:
            self.timelines.append(event["timeline"])
        for name in _SUMMED:
            if event.get(name) is not None:
                self.sums[name] = self.sums.get(name, 0.0) + event[name]
        for op, row in (event.get("collectives") or {}).items():
            kept = self.per_op.setdefault(op, [0.0, 0.0])
            kept[0] += row.get("total_s") or 0.0
            kept[1] += row.get("exposed_s") or 0.0
        for row in event.get("exposed_top") or []:
            if row.get("exposed_s", 0.0) > self.top.get(row["op"], {}).get("exposed_s", 0.0):
                self.top[row["op"]] = {**row, "step": event.get("step"), "rank": event["rank"]}


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    fold: Fold = view.fold(__name__)
    window = fold.sums.get("window_s", 0.0)
    if not fold.rows or window <= 0:
        return {"trace.present": False}
    sums = fold.sums
    out: dict[str, Any] = {
        "trace.present": True,
        # a run read from a GPU trace and a CPU one is measured on the device where it has one
        "trace.timeline": "device" if "device" in fold.timelines else "host",
        "trace.steps": fold.rows,
        "trace.ranks": sorted(fold.ranks),
        "trace.comm_fraction": sums.get("comm_s", 0.0) / window,
        "trace.exposed_comm_fraction": sums.get("exposed_comm_s", 0.0) / window,
        "trace.idle_fraction": sums.get("idle_s", 0.0) / window,
        "trace.host_gap_fraction": sums.get("host_gap_s", 0.0) / window,
    }
    if fold.steps:
        out["trace.first_step"], out["trace.last_step"] = fold.steps
    if sums.get("comm_s"):
        out["trace.overlap_share"] = 1.0 - sums.get("exposed_comm_s", 0.0) / sums["comm_s"]
    gather_s, gather_exposed = fold.per_op.get("all_gather", [0.0, 0.0])
    out["trace.allgather_fraction"] = gather_s / window
    out["trace.allgather_exposed_fraction"] = gather_exposed / window
    if gather_s > 0:
        out["trace.allgather_overlap_share"] = 1.0 - gather_exposed / gather_s
    idle = sums.get("idle_s", 0.0)
    if idle > 0:
        parts = {"dataloader": sums.get("idle_dataloader_s", 0.0), "optimizer": sums.get("idle_optimizer_s", 0.0)}
        parts["host"] = max(idle - parts["dataloader"] - parts["optimizer"], 0.0)
        cause = max(parts, key=parts.__getitem__)
        out["trace.idle_cause"], out["trace.idle_cause_share"] = cause, parts[cause] / idle
    if fold.top:
        top = max(fold.top.values(), key=lambda row: row.get("exposed_s", 0.0))
        out.update(_longest("trace.top_exposed", top), **{"trace.top_exposed_op": top.get("op")})
    if "all_gather" in fold.top:
        out.update(_longest("trace.allgather_top_exposed", fold.top["all_gather"]))
    return out


def _longest(prefix: str, row: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}_s": row.get("exposed_s"), f"{prefix}_bytes": row.get("bytes"), f"{prefix}_step": row.get("step")}
