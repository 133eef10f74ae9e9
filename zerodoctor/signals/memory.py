"""Signals, memory: OOMs told apart (fragmentation vs capacity) and model-state fits.

Decided from the message alone, by what ``c10/cuda/CUDACachingAllocator.cpp`` does before it
raises: a failed cudaMalloc is retried after freeing cached blocks large enough, then after
``release_cached_blocks`` frees every cached block that is not split (``num_alloc_retries`` + 1),
and only then the OOM is raised. So what the message calls "reserved but unallocated" is stranded
in segments that still hold a live block, and the usable free memory is what cudaMemGetInfo
reports, capped by ``allowed`` when a memory fraction is set. The bytes existed but not in one
piece — fragmentation — when stranded + free ≥ the request and the stranded part is a real share
of it (at least a quarter: less is the allocator's own rounding, and a GPU that full fails again at
the next allocation); otherwise the GPU is full — capacity. Allocator retries in the steps before
are evidence, never a condition: PyTorch's own pre-raise retry makes every OOM's count at least 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zerodoctor import deepspeed_defaults as ds
from zerodoctor import runview
from zerodoctor.modelstates import model_state_bytes
from zerodoctor.runview import RunView, Steps
from zerodoctor.signals.base import Signal, nested
from zerodoctor.sources.torch import oom_numbers
from zerodoctor.units import GB

HEADROOM = 0.7  # share of device memory model states may take; the rest is activations and buffers
STRANDED_SHARE = 0.25  # stranded bytes below this share of a request are rounding, not fragmentation

SIGNALS = [
    Signal("memory.oom_count", "events", "out-of-memory errors"),
    Signal("memory.oom_ranks", "ranks", "ranks that hit an OOM"),
    Signal("memory.oom_step", "step", "step of the first OOM"),
    Signal("memory.oom_requested_bytes", "bytes", "size of the failed allocation (first OOM)"),
    Signal("memory.oom_free_unallocated_bytes", "bytes", "reserved but unallocated at the first OOM"),
    Signal("memory.oom_frag_ratio", "ratio", "reserved-but-unallocated / requested at the first OOM"),
    Signal("memory.oom_reserved_bytes", "bytes", "memory reserved by PyTorch at the first OOM"),
    Signal("memory.oom_headroom_bytes", "bytes",
           "device memory free at the first OOM, capped by the process's allowed memory when a fraction is set"),
    Signal("memory.oom_fragmented", "bool",
           f"at the first OOM, stranded + free memory covered the request and stranded was >= {STRANDED_SHARE:.0%} of it"),
    Signal("memory.alloc_retries", "retries", "cudaMalloc retries (cache flushes) in the steps, the OOM's own retry excluded"),
    Signal("memory.expandable_segments", "bool", "PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True"),
    Signal("memory.alloc_conf", "text", "PYTORCH_CUDA_ALLOC_CONF as recorded ('unset' when absent)"),
    Signal("memory.stage2_fit_known", "bool", "parameters, world size and device memory are all known"),
    Signal("memory.reduce_bucket_size", "elements",
           f"zero_optimization.reduce_bucket_size in effect (default {ds.REDUCE_BUCKET_SIZE:.0e})"),
    Signal("memory.stage2_gb", "GB", "model states per GPU under ZeRO-2, no offload (ZeRO paper)"),
    Signal("memory.stage2_fits", "bool", f"ZeRO-2 model states fit in {HEADROOM:.0%} of device memory"),
    Signal("memory.stage2_offload_gb", "GB", "model states per GPU under ZeRO-2 with optimizer offload"),
    Signal("memory.stage2_offload_fits", "bool", f"ZeRO-2 + optimizer offload fits in {HEADROOM:.0%} of device memory"),
]


STEP_FIELDS = {"alloc_retries": "max"}


@dataclass
class Fold(runview.Fold):
    alloc_retries: int | None = None  # the most any rank reported

    def add_steps(self, block: Steps, view: RunView) -> None:
        reported = [r for r in block.columns["alloc_retries"] if r is not None]
        if reported:
            top = max(reported)
            self.alloc_retries = top if self.alloc_retries is None else max(self.alloc_retries, top)


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
    if isinstance(bucket, (int, float)):
        out["memory.reduce_bucket_size"] = int(bucket)
    # From the steps only: PyTorch frees its cache and retries once before raising any OOM, so the
    # OOM's own count is 1 even on a plainly full GPU (seen on an H200: capacity OOM, retries 0 → 1).
    out["memory.alloc_retries"] = view.fold(__name__).alloc_retries
    if ooms:
        first = ooms[0]
        out["memory.oom_ranks"] = sorted({o["rank"] for o in ooms})
        out["memory.oom_step"] = first.get("step")
        requested, reserved, allocated = (first.get(k) for k in ("requested_bytes", "reserved_bytes", "allocated_bytes"))
        out["memory.oom_requested_bytes"] = requested
        out["memory.oom_reserved_bytes"] = reserved
        if reserved is not None and allocated is not None:
            spare = max(reserved - allocated, 0)
            out["memory.oom_free_unallocated_bytes"] = spare
            if requested:
                out["memory.oom_frag_ratio"] = spare / requested
                headroom = _headroom(first)
                out["memory.oom_headroom_bytes"] = headroom
                out["memory.oom_fragmented"] = spare >= requested or (
                    spare >= STRANDED_SHARE * requested and headroom is not None and spare + headroom >= requested)
    out.update(_fits(values))
    return out


def _headroom(oom: dict[str, Any]) -> int | None:
    """Free device memory the allocator could still have had: cudaMemGetInfo's, within the fraction cap."""
    free, allowed, reserved = oom.get("free_bytes"), oom.get("allowed_bytes"), oom.get("reserved_bytes")
    if allowed is None and oom.get("message"):  # events recorded before the cap was a field of its own
        allowed = oom_numbers(oom["message"]).get("allowed_bytes")
    if free is None:
        return None
    if allowed is not None and reserved is not None:
        return max(min(free, allowed - reserved), 0)
    return free


def _fits(values: dict[str, Any]) -> dict[str, Any]:
    params, world, device = values.get("run.params"), values.get("run.world_size"), values.get("run.device_memory_bytes")
    if not params or not world:
        return {"memory.stage2_fit_known": False}
    stage2 = model_state_bytes(params, world, 2)
    stage2_offload = model_state_bytes(params, world, 2, "optimizer")
    out: dict[str, Any] = {"memory.stage2_gb": stage2 / GB, "memory.stage2_offload_gb": stage2_offload / GB,
                           "memory.stage2_fit_known": bool(device)}
    if device:
        out["memory.stage2_fits"] = stage2 <= HEADROOM * device
        out["memory.stage2_offload_fits"] = stage2_offload <= HEADROOM * device
    return out
