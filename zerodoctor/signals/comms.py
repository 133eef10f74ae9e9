"""Signals, communication: how much of each step the collectives take.

The probe times collectives itself (``comm_s`` per step, ``comm`` events per op):
``comms_logger`` reports running totals in 0.19.8, not per-call latencies.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.signals.base import Signal, StepSeries, nested, ratio
from zerodoctor.store.runs import RunData

SIGNALS = [
    Signal("comm.fraction", "ratio", "time in collectives / step time, per step", per_step=True),
    Signal("comm.step_s", "s", "time in collectives per step (median)"),
    Signal("comm.compute_s", "s", "forward + backward + optimizer time outside collectives, per step (median)"),
    Signal("comm.top_op", "name", "collective with the most time"),
    Signal("comm.top_op_share", "ratio", "share of collective time spent in comm.top_op"),
    Signal("comm.prefetch_bucket_size", "elements", "stage3_prefetch_bucket_size in effect (default 5e7)"),
    Signal("comm.larger_prefetch_bucket", "elements", "4x the prefetch bucket: fewer, larger all-gathers ahead of use"),
    Signal("comm.persistence_threshold", "elements", "stage3_param_persistence_threshold in effect (default 1e5)"),
    Signal("comm.larger_persistence_threshold", "elements", "10x the threshold: small params stay whole, not re-gathered"),
]


def compute(run: RunData, values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    steps = run.steps.get("step", [])
    comm = run.steps.get("comm_s", [])
    fraction = StepSeries.of(steps, ratio(comm, run.steps.get("step_time_s", [])))
    out["comm.fraction"] = fraction
    present = StepSeries.of(steps, comm)
    out["comm.step_s"] = present.summary if present else None
    # Collectives run inside forward (ZeRO-3 all-gathers) and backward (reductions), so the
    # compute that comm competes with is the phases' time minus the time in collectives.
    compute_s = [
        max(sum(x for x in parts if x is not None) - (c or 0.0), 0.0) if any(x is not None for x in parts) else None
        for *parts, c in zip(run.steps.get("fwd_s", []), run.steps.get("bwd_s", []), run.steps.get("optim_s", []),
                             comm or [None] * len(steps))
    ]
    compute_series = StepSeries.of(steps, compute_s)
    out["comm.compute_s"] = compute_series.summary if compute_series else None

    config = run.first_start().get("config") or {}
    prefetch = nested(config, "zero_optimization.stage3_prefetch_bucket_size", 5e7)
    persist = nested(config, "zero_optimization.stage3_param_persistence_threshold", 1e5)
    if isinstance(prefetch, (int, float)) and isinstance(persist, (int, float)):
        out["comm.prefetch_bucket_size"], out["comm.larger_prefetch_bucket"] = int(prefetch), int(prefetch * 4)
        out["comm.persistence_threshold"], out["comm.larger_persistence_threshold"] = int(persist), int(persist * 10)

    per_op: dict[str, float] = {}
    for e in run.events.get("comm", []):
        if e.get("total_s") is not None:
            per_op[e["op"]] = per_op.get(e["op"], 0.0) + e["total_s"]
    if per_op:
        top = max(per_op, key=per_op.__getitem__)
        out["comm.top_op"] = top
        out["comm.top_op_share"] = per_op[top] / (sum(per_op.values()) or 1.0)
    return out
