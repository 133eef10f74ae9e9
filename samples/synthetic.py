"""Samples, synthetic: a GPU-only fault written as the probe would record it → ``samples/<name>/``.

The fragmentation OOM cannot happen on the CPU machines that record the other samples.
Its numbers and the allocator message follow PyTorch ≥ 2.2's caching allocator (the
"reserved by PyTorch but unallocated" wording), on an 80 GB H100, ZeRO-2 bf16, 2 ranks.
``samples/gpu/fragmentation_oom.py`` provokes the real thing on a CUDA machine.
"""

from __future__ import annotations

import json
from pathlib import Path

from zerodoctor import events

GIB = 2**30
RUN = "fragmentation-oom"
T0 = 1_764_000_000.0
CAPACITY = int(79.11 * GIB)
CONFIG = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4,
          "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}},
          "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
OOM_STEP = 41
MESSAGE = ("CUDA out of memory. Tried to allocate 2.50 GiB. GPU {rank} has a total capacity of 79.11 GiB of which "
           "952.00 MiB is free. Including non-PyTorch memory, this process has 78.18 GiB memory in use. Of the "
           "allocated memory 65.91 GiB is allocated by PyTorch, and 10.29 GiB is reserved by PyTorch but "
           "unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
           "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
NOTE = ("Synthetic: a GPU-only fault. Variable-length batches split the caching allocator's blocks until a "
        "2.50 GiB request fails with 10.29 GiB reserved but unallocated (4.1x the request) after 27 allocator "
        "retries; message and stats in PyTorch >= 2.2's format. samples/gpu/fragmentation_oom.py provokes it for real.")


def _rank_events(rank: int) -> list[dict]:
    out = [events.new("run_start", t=T0, run=RUN, rank=rank, world_size=2, local_rank=rank, host="gpu-node-07",
                      pid=41200 + rank, argv=["train.py", "--deepspeed", "ds_config.json"], zero_stage=2,
                      precision="bf16", config=CONFIG,
                      derived={"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8,
                               "gradient_accumulation_steps": 4},
                      params=1_315_577_856, device_name="NVIDIA H100 80GB HBM3", device_memory_bytes=CAPACITY,
                      versions={"torch": "2.5.1+cu124", "deepspeed": "0.19.8", "cuda": "12.4", "nccl": "2.21.5",
                                "python": "3.11.10"},
                      env={"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "WARN"})]
    t = T0 + 20
    for step in range(1, OOM_STEP):
        t += 1.9 + 0.01 * (step % 7)
        reserved = int((61.0 + 15.2 * step / OOM_STEP) * GIB)  # grows as splits accumulate
        out.append(events.new(
            "step", t=t, run=RUN, rank=rank, step=step, micro_batches=4, samples=32, loss=2.9 - 0.02 * step,
            lr=2e-5, grad_norm=1.1 - 0.01 * step, step_time_s=1.9 + 0.01 * (step % 7), fwd_s=0.55, bwd_s=1.1,
            optim_s=0.21, comm_s=0.18, mem_allocated_bytes=int(52.4 * GIB), mem_reserved_bytes=reserved,
            mem_peak_bytes=int((60.1 + 0.1 * step) * GIB), alloc_retries=max(0, step - 14),
            inactive_split_bytes=reserved - int(58.0 * GIB)))
    t += 1.2
    out.append(events.new("oom", t=t, run=RUN, rank=rank, step=OOM_STEP, message=MESSAGE.format(rank=rank),
                          device=rank, requested_bytes=int(2.5 * GIB), capacity_bytes=CAPACITY,
                          free_bytes=952 * 2**20, allocated_bytes=int(65.91 * GIB), reserved_bytes=int(76.20 * GIB),
                          alloc_retries=27, inactive_split_bytes=int(9.87 * GIB)))
    out.append(events.new("exception", t=t, run=RUN, rank=rank, step=OOM_STEP, type="OutOfMemoryError",
                          message=MESSAGE.format(rank=rank),
                          traceback=['  File "train.py", line 88, in <module>', "    loss = engine(batch)",
                                     f"torch.OutOfMemoryError: {MESSAGE.format(rank=rank)}"]))
    out.append(events.new("run_end", t=t + 0.4, run=RUN, rank=rank, exit_code=1, duration_s=t + 0.4 - T0 + 35))
    return out


def write_fragmentation_oom(out: Path) -> Path:
    target = out / RUN
    target.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        lines = (json.dumps(e, separators=(",", ":")) for e in _rank_events(rank))
        (target / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
    console = "".join(f"[rank{r}]: torch.OutOfMemoryError: {MESSAGE.format(rank=r)}\n" for r in (0, 1))
    (target / "console.log").write_text(console)
    (target / "ds_config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    (target / "meta.json").write_text(json.dumps({"run": RUN, "argv": ["deepspeed", "train.py"], "exit_code": 1,
                                                  "synthetic": True}, indent=2) + "\n")
    (target / "expected.json").write_text(json.dumps(
        {"origin": "synthetic", "findings": ["ZD401"], "note": NOTE}, indent=2) + "\n")
    return target
