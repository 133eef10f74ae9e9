"""Signals, communication: how much of each step the collectives take.

The probe times collectives itself (``comm_s`` per step, ``comm`` events per op). A console log gives,
with ``wall_clock_breakdown``, the step's timers (backward's all-reduce, ZeRO-1/2's all-gather after the
step: none of ZeRO-3's gathers and reduce-scatters inside forward and backward), and the per-op totals of
the comms logger's summary over the run so far (``sources/dsblocks.CommsTable`` reads 0.18.3+'s running
totals back; ``since_step`` marks its events), whose mean per step stands for the step's collectives where
it shows more than the timers.
Of ZeRO-3's collectives only the parameter all-gathers are its own: gradients are reduced
(reduce-scatter, all-reduce) under stage 2 too, so what stage 2 would save is the all-gather share.

Time in a collective includes waiting for the last rank to arrive: when one rank is slow
elsewhere, the others' collective time is that wait, not the network (``signals/straggler.py``
measures it, and ZD301 stays silent when it explains the share).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from zerodoctor.deepspeed import defaults as ds
from zerodoctor.deepspeed.modelstates import weight_bytes
from zerodoctor.signals import view as runview
from zerodoctor.signals.view import RunView, Steps
from zerodoctor.signals.inputs import COMM_TIMES, STEPS, SYNCED
from zerodoctor.signals.base import StepWindow, nested, ratios, shown_by, verdict
from zerodoctor.signals.config import BUCKET_TARGET_COLLECTIVES, round_up
from zerodoctor.signals.config_values import config_int
from zerodoctor.messages.units import GB

_timed = shown_by(STEPS, switch=COMM_TIMES)
_verdict = partial(verdict, shown_by=(STEPS,), switch=COMM_TIMES)

# The share of the step in ZeRO-3's own collectives (its parameter all-gathers) from which stage 2 is worth
# weighing: it makes half as many, so it would save some 10% of the step.
STAGE3_OWN = 0.2
# A straggler that costs the others this share of the step explains their collective time: it is a wait.
WAITING = 0.2
# Collectives this share of the step or more dominate it: more than all the compute together.
DOMINANT = 0.5
# Calls smaller than this pay their latency more than their bytes (NCCL's bus bandwidth flattens out from
# some megabytes in nccl-tests' sweeps): such collectives are too many, not too slow.
SMALL_CALL_BYTES = 1 << 20
# A collective's largest call carrying this share of its bucket or more was cut by the bucket (DeepSpeed flushes a
# bucket when the next gradient would overflow it, so full buckets come out between half and all of their size):
# a larger bucket makes fewer calls. Calls far below it (a scalar all_reduce, a model smaller than its bucket) are
# not the bucket's doing, and no bucket size changes them.
FILLED = 0.5

READS = ("run.zero_stage", "run.world_size_stated", "run.host_only", "straggler.share", "trace.present",
         "trace.allgather_exposed_fraction", "run.params", "run.precision", "run.step_s")

SIGNALS = [
    _timed("comm.fraction", "ratio", "time in collectives / step time, per step (a console's comms-logger "
           "summary's mean per step where it shows more than the step timers)", per_step=True),
    _timed("comm.step_s", "s", "time in collectives per step (median; the summary's mean where it shows more)"),
    _timed("comm.first_step", "step", "first step of the window comm.fraction is the median of"),
    _timed("comm.last_step", "step", "last step of that window"),
    _timed("comm.compute_s", "s", "forward + backward + optimizer time outside collectives, per step (median)"),
    _timed("comm.top_op", "name", "collective with the most time"),
    _timed("comm.top_op_share", "ratio", "share of collective time spent in comm.top_op"),
    _timed("comm.top_op_busbw_gbps", "GB/s",
           "bus bandwidth in GB/s that the collective with the most time achieved (its bytes over its time, times "
           "nccl-tests' factor for the op and the world size n: all-reduce 2(n-1)/n; all-gather, reduce-scatter, "
           "all-to-all (n-1)/n)"),
    _timed("comm.allgather_share", "ratio",
           "share of collective time in all-gathers (ZeRO-3's parameter gathers; gradient reductions excluded)"),
    _timed("comm.prefetch_bucket_size", "elements",
           f"stage3_prefetch_bucket_size in effect (default {ds.STAGE3_PREFETCH_BUCKET_SIZE:.0e})"),
    _timed("comm.allgather_step_fraction", "ratio",
           "share of the step in ZeRO-3's parameter all-gathers: the exposed share where a profiler trace shows it, "
           "else the collectives' share times the all-gathers' share of them"),
    _verdict("comm.stage3_verdict",
             f"what ZeRO-3's own collectives cost: allgathers (comm.allgather_step_fraction is {STAGE3_OWN:.0%} or "
             "more, from the timings), exposed_allgathers (as much with no compute beside them, from a profiler "
             f"trace), hidden (a trace shows less exposed), straggler (a straggler costs {WAITING:.0%} of the step "
             "or more: the collective time is a wait), minor (less), not_stage3",
             ("allgathers", "exposed_allgathers", "hidden", "straggler", "minor", "not_stage3"),
             shown_by=(STEPS, SYNCED)),
    _timed("comm.top_op_call_bytes", "bytes", "mean message size of one call of the collective with the most time"),
    _verdict("comm.step_verdict",
             f"what the collectives cost the step: named (they take {DOMINANT:.0%} of each step or more, per-op "
             "timings name the one with the most time), small_calls (as much, in calls of less than "
             f"{SMALL_CALL_BYTES >> 20} MiB on average), unnamed (as much, no per-op timings), stage3_own (ZeRO-3's "
             "parameter all-gathers, comm.stage3_verdict), straggler (a wait for a slow rank), host_only (DeepSpeed's "
             "CPU accelerator: loopback copies, not a network), minor (less)",
             ("named", "small_calls", "unnamed", "stage3_own", "straggler", "host_only", "minor")),
    _timed("comm.overlap_comm", "bool",
           "overlap_comm in effect (DeepSpeed's default: on under stage 3, off below; overlap_comm_valid)"),
    _timed("comm.top_op_bucket_key", "name",
           "the zero_optimization key that sizes the calls of the collective with the most time: reduce_bucket_size "
           "for gradient reductions, allgather_bucket_size for stage 1-2's all-gather after the step, "
           "stage3_prefetch_bucket_size for ZeRO-3's parameter gathers"),
    _timed("comm.top_op_bucket", "elements", "that key's value in effect (the config's, else DeepSpeed's default)",
           label="bucket size of the collective with the most time"),
    _timed("comm.top_op_fills_bucket", "bool",
           f"the largest call of the collective with the most time carries {FILLED:.0%} of its bucket or more, and the "
           "bucket holds fewer elements than the model has parameters: the bucket cuts the calls, so a larger one "
           "makes fewer", label="whether the collective's calls fill their bucket"),
    _timed("comm.bucket_patch", "patch",
           f"merge patch raising that bucket to about {BUCKET_TARGET_COLLECTIVES} collectives per step (ZD622's aim), "
           "never above DeepSpeed's default; only where the bucket is smaller"),
    _timed("comm.persistence_threshold", "elements",
           f"stage3_param_persistence_threshold in effect (default {ds.STAGE3_PARAM_PERSISTENCE_THRESHOLD:.0e})"),
]


STEP_FIELDS = {"comm_s": "mean", "step_time_s": "max", "fwd_s": "mean", "bwd_s": "mean", "optim_s": "mean"}
FOLD_EVENTS = ("comm",)


@dataclass
class PerOp:
    """Collective time, bytes, calls and largest call per op, summed over ``comm`` events."""

    per_op_s: dict[str, float] = field(default_factory=dict)
    per_op_bytes: dict[str, float | None] = field(default_factory=dict)  # None once a call of the op came without
    per_op_calls: dict[str, int] = field(default_factory=dict)
    per_op_largest: dict[str, float] = field(default_factory=dict)  # bytes of the op's largest call (mean of an event)

    def add(self, event: dict[str, Any]) -> None:
        op = event.get("op")
        if event.get("total_s") is not None and op:
            self.per_op_s[op] = self.per_op_s.get(op, 0.0) + event["total_s"]
            known, size = self.per_op_bytes.get(op, 0.0), event.get("bytes")
            self.per_op_bytes[op] = known + size if known is not None and size is not None else None
            self.per_op_calls[op] = self.per_op_calls.get(op, 0) + (event.get("count") or 0)
            if size and event.get("count"):
                self.per_op_largest[op] = max(self.per_op_largest.get(op, 0.0), size / event["count"])


@dataclass
class Fold(PerOp, runview.Fold):
    """The last WINDOW steps' collective share, comm and compute time; collective time per op, from per-step
    intervals (the probe's), and the last summary of the run so far (a console's comms-logger table)."""

    VERSION = 4  # of the saved state: bump it when the fields or what they hold change
    # the last WINDOW steps: step, comm share, comm s, compute s, step s, phases s (forward + backward + optimizer)
    recent: list[list[Any]] = field(default_factory=list)
    table: list[dict[str, Any]] = field(default_factory=list)  # the last summary's rows: op, count, bytes, total_s…

    def add_steps(self, block: Steps, view: RunView) -> None:
        steps, comm, total, *parts = StepWindow.tail(block, "step", "comm_s", "step_time_s",
                                                     "fwd_s", "bwd_s", "optim_s")
        compute = list(map(_compute_s, comm, *parts))
        phases = [sum(known) if (known := [x for x in p if x is not None]) else None for p in zip(*parts)]
        StepWindow.extend(self.recent, [steps, ratios(comm, total), comm, compute, total, phases])

    def event(self, event: dict[str, Any]) -> None:
        if event.get("since_step") is None:
            self.add(event)
            return
        row = {k: event.get(k) for k in ("op", "count", "bytes", "total_s", "step")}
        # each summary holds all the earlier ones did: a later step, or a row again, starts the next
        if self.table and (self.table[-1]["step"] != row["step"] or any(
                (r["op"], r["bytes"], r["count"]) == (row["op"], row["bytes"], row["count"]) for r in self.table)):
            self.table = []
        self.table.append(row)

    def ops(self) -> tuple[PerOp, int | None]:
        """The per-op figures: the per-step intervals' where there are any, else the summary's with the steps it
        counts (None for the intervals': their steps are the run's)."""
        if self.per_op_s or not self.table:
            return self, None
        summary = PerOp()
        for row in self.table:
            summary.add(row)
        return summary, self.table[-1]["step"]


def _summarised(recent: list[list[Any]], comm_s: float) -> list[list[Any]]:
    """The window with ``comm_s`` (a comms-logger summary's mean per step) as each step's collective time: where
    the summary shows more than the step timers, which hold no collective of forward and only the all-reduce of
    backward (ZeRO-3 gathers and reduce-scatters inside ``fwd`` and ``bwd_inner``)."""
    steps, _, _, _, total, phases = recent
    comm = [comm_s] * len(steps)
    compute = [max(p - comm_s, 0.0) if p is not None else None for p in phases]
    return [steps, ratios(comm, total), comm, compute, total, phases]


def _compute_s(comm: float | None, *parts: float | None) -> float | None:
    """One step's forward + backward + optimizer time outside collectives.

    Collectives run inside forward (ZeRO-3 all-gathers) and backward (reductions), so the
    compute that comm competes with is the phases' time minus the time in collectives.
    """
    known = [x for x in parts if x is not None]
    return max(sum(known) - (comm or 0.0), 0.0) if known else None


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    fold: Fold = view.fold(__name__)
    out: dict[str, Any] = {}
    ops, summary_steps = fold.ops()
    recent = fold.recent
    timed = StepWindow.series(recent, 2)
    if summary_steps and ops.per_op_s and recent:
        summarised = sum(ops.per_op_s.values()) / summary_steps
        if timed is None or summarised > (timed.summary or 0.0):
            recent = _summarised(recent, summarised)
    out["comm.fraction"] = shares = StepWindow.series(recent, 1)
    if shares is not None:
        known = [step for step, share in zip(shares.steps, shares.values) if share is not None]
        out["comm.first_step"], out["comm.last_step"] = known[0], known[-1]
    present = StepWindow.series(recent, 2)
    out["comm.step_s"] = present.summary if present else None
    compute_series = StepWindow.series(recent, 3)
    out["comm.compute_s"] = compute_series.summary if compute_series else None

    config = view.config
    prefetch = nested(config, "zero_optimization.stage3_prefetch_bucket_size", ds.STAGE3_PREFETCH_BUCKET_SIZE)
    persist = nested(config, "zero_optimization.stage3_param_persistence_threshold",
                     ds.STAGE3_PARAM_PERSISTENCE_THRESHOLD)
    prefetch = config_int(prefetch, ds.STAGE3_PREFETCH_BUCKET_SIZE)
    persist = config_int(persist, ds.STAGE3_PARAM_PERSISTENCE_THRESHOLD)
    if prefetch is not None and persist is not None:
        out["comm.prefetch_bucket_size"], out["comm.persistence_threshold"] = prefetch, persist

    stage = values.get("run.zero_stage")
    if config and stage is not None:
        overlap = nested(config, "zero_optimization.overlap_comm")
        out["comm.overlap_comm"] = bool(overlap) if overlap is not None else stage == 3

    allgather_s = None
    if ops.per_op_s:
        top = max(ops.per_op_s, key=ops.per_op_s.__getitem__)
        out["comm.top_op"] = top
        allgather_s = sum(s for op, s in ops.per_op_s.items() if "all_gather" in op)
        total = sum(ops.per_op_s.values()) or 1.0
        out["comm.top_op_share"] = ops.per_op_s[top] / total
        out["comm.allgather_share"] = allgather_s / total
        # the world size the run stated: a log of rank 0's lines alone says at least 1, which no factor can use
        size, world = ops.per_op_bytes.get(top), values.get("run.world_size_stated")
        if size and world and world > 1 and ops.per_op_s[top] > 0:
            out["comm.top_op_busbw_gbps"] = size / ops.per_op_s[top] * _bus_factor(top, world) / GB
        if size and ops.per_op_calls.get(top):
            out["comm.top_op_call_bytes"] = size / ops.per_op_calls[top]
        out.update(_bucket(top, ops.per_op_largest.get(top), config, values))
    summarised = allgather_s / summary_steps if allgather_s is not None and summary_steps else None
    out["comm.stage3_verdict"], out["comm.allgather_step_fraction"] = _stage3(values, out, summarised)
    out["comm.step_verdict"] = _step(values, out)
    return out


def _bucket(op: str, largest: float | None, config: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The config key that sizes ``op``'s calls, its value, and whether the calls fill it (``FILLED``); nothing for
    an op no bucket sizes, and no judgement without the op's call sizes or the model's parameter count."""
    stage = values.get("run.zero_stage")
    if "reduce" in op:
        key, default = "reduce_bucket_size", ds.REDUCE_BUCKET_SIZE
    elif "all_gather" in op and stage == 3:
        key, default = "stage3_prefetch_bucket_size", ds.STAGE3_PREFETCH_BUCKET_SIZE
    elif "all_gather" in op and stage in (1, 2):
        key, default = "allgather_bucket_size", ds.ALLGATHER_BUCKET_SIZE
    else:
        return {}
    bucket = config_int(nested(config, f"zero_optimization.{key}", default), default)
    if bucket is None:
        return {}
    out: dict[str, Any] = {"comm.top_op_bucket_key": key, "comm.top_op_bucket": bucket}
    params = values.get("run.params")
    if largest is not None and params:
        bucket_bytes = bucket * weight_bytes(values.get("run.precision"))
        out["comm.top_op_fills_bucket"] = largest >= FILLED * bucket_bytes and bucket < params
        proposed = min(default, round_up(params / BUCKET_TARGET_COLLECTIVES))
        if bucket < proposed:  # a bucket already at the aim, or above it, is not what makes the calls small
            out["comm.bucket_patch"] = {"zero_optimization": {key: proposed}}
    return out


def _step(values: dict[str, Any], out: dict[str, Any]) -> str | None:
    """Whether collectives dominate the step, and what the run says about why; None without their share."""
    shares = out.get("comm.fraction")
    if shares is None:
        return None
    if shares.summary < DOMINANT:
        return "minor"
    if out.get("comm.stage3_verdict") in ("allgathers", "exposed_allgathers"):
        return "stage3_own"
    if (values.get("straggler.share") or 0.0) >= WAITING:
        return "straggler"
    if values.get("run.host_only"):
        return "host_only"
    if not out.get("comm.top_op"):
        return "unnamed"
    call = out.get("comm.top_op_call_bytes")
    return "small_calls" if call is not None and call < SMALL_CALL_BYTES else "named"


def _stage3(values: dict[str, Any], out: dict[str, Any], summarised: float | None
            ) -> tuple[str | None, float | None]:
    """What stage 3's own all-gathers cost the step, and the verdict on it; (None, None) while a figure it needs
    (the stage, the straggler's cost, the collectives' or the trace's shares) is unknown.

    ``summarised``: seconds per step in all-gathers by a console's comms-logger summary, where no per-step
    interval timed the collectives. A console's step timers hold no all-gather of stage 3 (they run inside
    ``fwd`` and ``bwd_inner``), so the share comes from the summary over the steps it counts; unknown on the CPU
    accelerator, where the summary timed the async all-gathers to their launch (``sources/dsblocks.CommsTable``)."""
    stage, waiting = values.get("run.zero_stage"), values.get("straggler.share")
    if stage is None:
        return None, None
    if stage != 3:
        return "not_stage3", None
    if waiting is None:
        return None, None
    if values.get("trace.present"):
        own = values.get("trace.allgather_exposed_fraction")
        judged = "exposed_allgathers" if own >= STAGE3_OWN else "hidden"
    elif summarised is not None:
        step_s = values.get("run.step_s")
        if values.get("run.host_only") or not step_s:
            return None, None
        own = summarised / step_s
        judged = "allgathers" if own >= STAGE3_OWN else "minor"
    else:
        fraction, share = out.get("comm.fraction"), out.get("comm.allgather_share")
        if fraction is None or share is None:
            return None, None
        own = fraction.summary * share
        judged = "allgathers" if own >= STAGE3_OWN else "minor"
    return ("straggler" if waiting >= WAITING else judged), own


def _bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor (its PERFORMANCE.md): what each rank's link carries per byte of the
    collective's whole buffer, so that figures of different ops and world sizes compare with the link's own."""
    if "all_reduce" in op:
        return 2 * (n - 1) / n
    if any(name in op for name in ("all_gather", "reduce_scatter", "all_to_all")):
        return (n - 1) / n
    return 1.0
