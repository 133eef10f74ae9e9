"""Signals, memory: OOMs told apart (leak, fragmentation, capacity), what expandable_segments buys, model-state fits.

Decided from the message alone, by what ``c10/cuda/CUDACachingAllocator.cpp`` does before it
raises: a failed cudaMalloc is retried after freeing cached blocks large enough, then after
``release_cached_blocks`` frees every cached block that is not split (``num_alloc_retries`` + 1),
and only then the OOM is raised. So what the message calls "reserved but unallocated" is stranded
in segments that still hold a live block, and the usable free memory is what cudaMemGetInfo
reports, capped by ``allowed`` when a memory fraction is set.

Judged as a practitioner would, against the memory the process could use (the device, or the
``allowed`` cap): the bytes existed but not in one piece — fragmentation — only when stranded + free
≥ the request *and* the stranded part is a material share of that memory (≥ 3 %). Below 1 % it is
the allocator's rounding on a full GPU (capacity: even if this allocation were served, the next one
fails); in between it is capacity first, with a note that ``expandable_segments`` might serve this
one allocation. Allocator retries in the steps before are evidence, never a condition: PyTorch's
own pre-raise retry makes every OOM's count at least 1.

Before any of that, a steady climb of allocated memory up to the OOM (``creep.device_steady``) makes it a
leak: more memory, a smaller batch or an allocator setting only moves the OOM a few steps later (the H200
sample climbing 288 MiB a step ran out two steps later with ``expandable_segments``). Stranded memory of a
material share then aggravates the leak by the steps of the climb it holds.

The verdict (``memory.oom_verdict``) and what ``expandable_segments:True`` buys
(``memory.expandable_segments_gain``) are decided here, once; the rules word each value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zerodoctor.deepspeed import defaults as ds
from zerodoctor.signals import view as runview
from zerodoctor.deepspeed.modelstates import model_state_bytes
from zerodoctor.signals.view import RunView, Steps
from zerodoctor.signals.inputs import CONFIG, DEVICE, STEPS
from zerodoctor.signals.base import Signal, nested, shown_by, verdict
from zerodoctor.signals.config_values import config_int
from zerodoctor.messages.oom import oom_numbers
from zerodoctor.messages.units import GB

HEADROOM = 0.7  # share of device memory model states may take; the rest is activations and buffers
# Share of device memory left for ZeRO's buffers (reduce and gather buckets), the allocator's cache and fragmentation
# when a plan prices activations too (check --model): assumed, nobody measured it here.
BUFFER_SHARE = 0.1
# Stranded (reserved but unallocated) bytes as a share of the memory the process could use. Real OOMs
# of GPUs 96-100 % full had 0.2-0.8 % stranded (121-195 MiB: the allocator's 2 MiB and 20 MiB blocks
# and the tails of split segments) and were cured by a smaller batch, not an allocator setting.
FRAGMENTED_SHARE = 0.03  # at least this much stranded, and enough with the free memory: fragmentation
ROUNDING_SHARE = 0.01  # under this much stranded: the allocator's rounding, a capacity OOM
OUTSIDE_SHARE = 0.1  # memory held outside PyTorch's allocator worth naming (other processes on the GPU)

VERDICTS = ("leak", "leak_fragmented", "fragmentation", "capacity_partly_fragmented", "capacity")
GAINS = ("already_on", "cure", "this_allocation", "a_few_allocations", "one_allocation", "nothing", "a_few_steps")

_planned = shown_by(CONFIG, DEVICE)
_stepwise = shown_by(STEPS)

READS = ("run.params", "run.world_size", "run.device_memory_bytes", "run.precision", "creep.device_bytes_per_step",
         "creep.device_steady")

SIGNALS = [
    Signal("memory.oom_count", "events", "out-of-memory errors"),
    Signal("memory.oom_ranks", "ranks", "ranks that hit an OOM"),
    Signal("memory.oom_step", "step", "step of the first OOM"),
    Signal("memory.oom_requested_bytes", "bytes", "size of the failed allocation (first OOM)"),
    Signal("memory.oom_allocated_bytes", "bytes", "memory allocated by PyTorch at the first OOM"),
    Signal("memory.oom_free_unallocated_bytes", "bytes", "reserved but unallocated (stranded) at the first OOM"),
    Signal("memory.oom_frag_ratio", "ratio", "reserved-but-unallocated / requested at the first OOM"),
    Signal("memory.oom_reserved_bytes", "bytes", "memory reserved by PyTorch at the first OOM"),
    Signal("memory.oom_headroom_bytes", "bytes",
           "device memory free at the first OOM, capped by the process's allowed memory when a fraction is set"),
    Signal("memory.oom_limit_bytes", "bytes",
           "usable device memory at the first OOM (capacity, or the allowed cap of a memory fraction; "
           "reserved + free where the message lost the capacity)"),
    Signal("memory.oom_used_share", "ratio", "share of usable device memory not free at the first OOM"),
    Signal("memory.oom_outside_bytes", "bytes",
           "memory in use outside PyTorch's allocator at the first OOM (other processes, CUDA context), where it is "
           f">= {OUTSIDE_SHARE:.0%} of usable device memory"),
    Signal("memory.oom_stranded_share", "ratio", "reserved but unallocated / usable device memory at the first OOM"),
    Signal("memory.oom_requests_in_reach", "allocations",
           "allocations of the failed size that stranded + free memory hold (the most expandable_segments buys)"),
    Signal("memory.oom_fragmentation_steps", "steps",
           "steps of the leak's climb held by stranded memory (what fragmentation cost)"),
    verdict("memory.oom_verdict",
            "the first OOM judged: a steady climb to it is a leak (fragmented where stranded is >= "
            f"{FRAGMENTED_SHARE:.0%} of usable memory); else stranded + free covering the request with stranded >= "
            f"{FRAGMENTED_SHARE:.0%} is fragmentation, {ROUNDING_SHARE:.0%}-{FRAGMENTED_SHARE:.0%} capacity first, "
            "anything else capacity", VERDICTS,
            label="the OOM's allocated and reserved memory",
            switch="the whole CUDA out-of-memory message, with the memory PyTorch had allocated and reserved (a "
                   "message cut before those figures cannot be judged)"),
    verdict("memory.expandable_segments_gain",
            "what PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True buys at the first OOM: a cure (fragmentation), this "
            "one allocation, a few allocations or one, nothing, a few steps of a leak; or it is already on", GAINS),
    _stepwise("memory.alloc_retries", "retries", "cudaMalloc retries (cache flushes) in the steps, the OOM's own "
                                                 "retry excluded"),
    _stepwise("memory.cache_flush_steps", "steps", "steps in which the allocator flushed its cache and retried "
                                                   "cudaMalloc (its retry count rose: ZeRO-3's 'pytorch allocator "
                                                   "cache flushes since last step')",
              label="steps with allocator cache flushes"),
    Signal("memory.expandable_segments", "bool", "PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True"),
    _stepwise("memory.alloc_conf", "text", "PYTORCH_CUDA_ALLOC_CONF as recorded ('unset' when absent)"),
    _planned("memory.stage2_fit_known", "bool", "parameters, world size and device memory are all known"),
    Signal("memory.reduce_bucket_size", "elements",
           f"zero_optimization.reduce_bucket_size in effect (default {ds.REDUCE_BUCKET_SIZE:.0e})"),
    _planned("memory.stage2_gb", "GB",
             "model states per GPU under ZeRO-2, no offload (ZeRO paper, in the run's precision)"),
    _planned("memory.stage2_fits", "bool", f"ZeRO-2 model states fit in {HEADROOM:.0%} of device memory"),
    _planned("memory.stage2_offload_gb", "GB", "model states per GPU under ZeRO-2 with optimizer offload"),
    _planned("memory.stage2_offload_fits", "bool", f"ZeRO-2 + optimizer offload fits in {HEADROOM:.0%} of device "
                                                   "memory"),
]


STEP_FIELDS = {"alloc_retries": "max"}


@dataclass
class Fold(runview.Fold):
    VERSION = 2  # of the saved state: bump it when the fields or what they hold change
    alloc_retries: int | None = None  # the most any rank reported
    flush_steps: int = 0  # steps whose count (cumulative, the most of any rank) rose past every count before

    def add_steps(self, block: Steps, view: RunView) -> None:
        for retries in block.columns["alloc_retries"]:
            if retries is None:
                continue
            if retries > (self.alloc_retries or 0):
                self.flush_steps += 1
            self.alloc_retries = retries if self.alloc_retries is None else max(self.alloc_retries, retries)


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    start = view.first_start()
    config = view.config
    ooms = view.events.get("oom", [])
    out: dict[str, Any] = {"memory.oom_count": len(ooms)}
    conf = (start.get("env") or {}).get("PYTORCH_CUDA_ALLOC_CONF") or next(
        (o["alloc_conf"] for o in ooms if o.get("alloc_conf")), "")
    out["memory.expandable_segments"] = "expandable_segments:true" in conf.replace(" ", "").lower()
    out["memory.alloc_conf"] = conf or "unset"
    bucket = nested(config, "zero_optimization.reduce_bucket_size", ds.REDUCE_BUCKET_SIZE)
    if (bucket := config_int(bucket, ds.REDUCE_BUCKET_SIZE)) is not None:
        out["memory.reduce_bucket_size"] = bucket
    # From the steps only: PyTorch frees its cache and retries once before raising any OOM, so the
    # OOM's own count is 1 even on a plainly full GPU (seen on an H200: capacity OOM, retries 0 → 1).
    out["memory.alloc_retries"] = view.fold(__name__).alloc_retries
    if out["memory.alloc_retries"] is not None:
        out["memory.cache_flush_steps"] = view.fold(__name__).flush_steps
    if ooms:
        first = ooms[0]
        out["memory.oom_ranks"] = sorted({o["rank"] for o in ooms})
        out["memory.oom_step"] = first.get("step")
        out["memory.oom_requested_bytes"] = first.get("requested_bytes")
        out["memory.oom_reserved_bytes"] = first.get("reserved_bytes")
        out.update(_judged(first, values.get("run.device_memory_bytes")))
        out.update(_verdict({**values, **out}, out["memory.expandable_segments"]))
    out.update(_fits(values))
    return out


def _judged(oom: dict[str, Any], device_bytes: int | None) -> dict[str, Any]:
    """The first OOM's numbers against the memory the process could use (the verdict weighs them).

    Free memory the message does not give counts as none, so an unknown never makes a fragmentation.
    """
    requested, reserved, allocated = (oom.get(k) for k in ("requested_bytes", "reserved_bytes", "allocated_bytes"))
    if reserved is None or allocated is None:
        return {}
    stranded = max(reserved - allocated, 0)
    headroom = _headroom(oom)
    limit = _limit(oom, device_bytes, headroom)
    out: dict[str, Any] = {"memory.oom_allocated_bytes": allocated, "memory.oom_free_unallocated_bytes": stranded,
                           "memory.oom_headroom_bytes": headroom}
    if limit:
        out["memory.oom_limit_bytes"] = limit
        out["memory.oom_stranded_share"] = stranded / limit
        if headroom is not None:
            out["memory.oom_used_share"] = min(1 - headroom / limit, 1.0)
            outside = max(limit - headroom - reserved, 0)
            out["memory.oom_outside_bytes"] = outside if outside >= OUTSIDE_SHARE * limit else None
    if requested:
        in_reach = stranded + (headroom or 0)
        out["memory.oom_frag_ratio"] = stranded / requested
        out["memory.oom_requests_in_reach"] = in_reach // requested
    return out


def _verdict(values: dict[str, Any], expandable: bool) -> dict[str, Any]:
    """The first OOM's verdict and what expandable_segments buys, from its numbers and the climb before it."""
    share, in_reach = values.get("memory.oom_stranded_share"), values.get("memory.oom_requests_in_reach")
    slope = values.get("creep.device_bytes_per_step")
    if values.get("creep.device_steady") and slope:
        fragmented = share is not None and share >= FRAGMENTED_SHARE
        stranded = values.get("memory.oom_free_unallocated_bytes")
        return {"memory.oom_verdict": "leak_fragmented" if fragmented else "leak",
                "memory.oom_fragmentation_steps": stranded / slope if stranded is not None else None,
                "memory.expandable_segments_gain": "already_on" if expandable else "a_few_steps"}
    if share is None or in_reach is None:
        return {}
    if in_reach >= 1 and share >= FRAGMENTED_SHARE:
        judged, gain = "fragmentation", "cure"
    elif in_reach >= 1 and share >= ROUNDING_SHARE:
        judged, gain = "capacity_partly_fragmented", "this_allocation"
    else:
        judged = "capacity"
        gain = "a_few_allocations" if in_reach >= 2 else "one_allocation" if in_reach == 1 else "nothing"
    return {"memory.oom_verdict": judged, "memory.expandable_segments_gain": "already_on" if expandable else gain}


def _allowed(oom: dict[str, Any]) -> int | None:
    """The cap of ``set_per_process_memory_fraction``: a field of its own, or read from older events' message."""
    if oom.get("allowed_bytes") is None and oom.get("message"):
        return oom_numbers(oom["message"]).get("allowed_bytes")
    return oom.get("allowed_bytes")


def _limit(oom: dict[str, Any], device_bytes: int | None, headroom: int | None) -> int | None:
    """Memory the process could use: the device's capacity (the message's, else run_start's), within the cap.

    A message cut where it names the capacity (a terminal's hard wrap) still says what PyTorch reserved and
    what was free: their sum is a floor of the capacity, so the stranded share it gives errs high, never low.
    """
    capacity, allowed = oom.get("capacity_bytes") or device_bytes, _allowed(oom)
    if capacity and allowed:
        return min(capacity, allowed)
    if capacity or allowed:
        return capacity or allowed
    reserved = oom.get("reserved_bytes")
    return reserved + headroom if reserved is not None and headroom is not None else None


def _headroom(oom: dict[str, Any]) -> int | None:
    """Free device memory the allocator could still have had: cudaMemGetInfo's, within the fraction cap."""
    free, allowed, reserved = oom.get("free_bytes"), _allowed(oom), oom.get("reserved_bytes")
    if free is None:
        return None
    if allowed is not None and reserved is not None:
        return max(min(free, allowed - reserved), 0)
    return free


def _fits(values: dict[str, Any]) -> dict[str, Any]:
    params, world = values.get("run.params"), values.get("run.world_size")
    device = values.get("run.device_memory_bytes")
    if not params or not world:
        return {"memory.stage2_fit_known": False}
    precision = values.get("run.precision")
    stage2 = model_state_bytes(params, world, 2, precision=precision)
    stage2_offload = model_state_bytes(params, world, 2, "optimizer", precision=precision)
    out: dict[str, Any] = {"memory.stage2_gb": stage2 / GB, "memory.stage2_offload_gb": stage2_offload / GB,
                           "memory.stage2_fit_known": bool(device)}
    if device:
        out["memory.stage2_fits"] = stage2 <= HEADROOM * device
        out["memory.stage2_offload_fits"] = stage2_offload <= HEADROOM * device
    return out
