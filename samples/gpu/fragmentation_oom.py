"""GPU repro: a fragmentation OOM in a real DeepSpeed run under ``zerodoctor run`` (CUDA machine, < 3 min).

    python samples/gpu/fragmentation_oom.py          # runs itself under zerodoctor run, 1 rank

The model keeps every other of its per-step 6 MiB buffers (a cache keyed by sequence
length that is never evicted), so the caching allocator's 20 MiB segments end up half
used: freed 6 MiB holes that cannot be returned to the driver, while each forward also
needs one contiguous 64 MiB workspace. Memory is capped at ``CAP_GIB`` with
``set_per_process_memory_fraction`` so the run is quick on any GPU. The workspace
allocation fails with far more than 64 MiB reserved but unallocated: a fragmentation
OOM, which the probe records as an ``oom`` event with the allocator's message and stats.

The run directory goes to ``$OUT/runs`` when ``OUT`` is set, else ``./runs``. Exit 0 when
the OOM was recorded and more memory sat reserved-but-unallocated than was requested.

``--expandable`` tries ZD401's first fix: the same run with
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, recorded as it comes (exit 0 when the run
was recorded). On an H200 it got to step 20 instead of 18 and inactive split bytes fell to 0,
yet it still failed with 301 MiB idle: the model's cache pins memory between its buffers.

``--capacity`` records the counterpart, for ZD402: the cache keeps every 64 MiB buffer (whole
large blocks, no holes), so the OOM comes with allocated ≈ reserved. Exit 0 when the OOM left
less reserved-but-unallocated memory than the request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CAP_GIB = 6
BUFFER_MIB, WORKSPACE_MIB, BUFFERS_PER_STEP = 6, 64, 96
RUN_NAME = "fragmentation-oom-gpu"
VARIANTS = ("fragmented", "expandable", "capacity")
MODE_ENV = "ZD_OOM_REPRO_MODE"


def train() -> None:
    import deepspeed
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(CAP_GIB * 2**30 / total)

    class CachingModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(1024, 1024)
            self.cache: list[torch.Tensor] = []  # the bug: grows every step, half of each step's buffers

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if os.environ.get(MODE_ENV) == "capacity":  # whole 64 MiB blocks kept: full, not fragmented
                self.cache.append(torch.empty(WORKSPACE_MIB * 2**18, device=x.device))
                return self.proj(x).pow(2).mean()
            buffers = [torch.empty(BUFFER_MIB * 2**18, device=x.device) for _ in range(BUFFERS_PER_STEP)]
            self.cache += buffers[::2]
            del buffers
            workspace = torch.empty(WORKSPACE_MIB * 2**18, device=x.device)  # needs one contiguous block
            return self.proj(x).pow(2).mean() + workspace[:1].sum() * 0

    model = CachingModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    config = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "steps_per_print": 1000,
              "zero_optimization": {"stage": 2, "reduce_bucket_size": 250_000, "allgather_bucket_size": 250_000}}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    device = torch.device("cuda", torch.cuda.current_device())
    for step in range(10_000):
        loss = engine(torch.randn(8, 1024, device=device))
        engine.backward(loss)
        engine.step()
        if step % 10 == 0:
            print(f"step {step} reserved {torch.cuda.memory_reserved() / 2**30:.2f} GiB", flush=True)


def main(variant: str) -> int:
    runs = Path(os.environ.get("OUT", ".")) / "runs"
    name = RUN_NAME + ("" if variant == "fragmented" else f"-{variant}")
    env = {**os.environ, MODE_ENV: variant,
           **({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"} if variant == "expandable" else {})}
    command = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(runs), "--name", name, "--",
               sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
               __file__, "--train"]
    code = subprocess.run(command, timeout=170, env=env).returncode
    events = [json.loads(line) for line in (runs / name / "rank-0.jsonl").read_text().splitlines()]
    ooms = [e for e in events if e["kind"] == "oom"]
    steps = [e for e in events if e["kind"] == "step"]
    print(f"zerodoctor run exited {code}; {len(steps)} steps, {len(ooms)} oom event(s)")
    if not ooms:
        return 0 if variant == "expandable" else 1
    oom = ooms[0]
    spare = oom["reserved_bytes"] - oom["allocated_bytes"]
    print(json.dumps({k: oom.get(k) for k in ("step", "requested_bytes", "reserved_bytes", "allocated_bytes",
                                               "free_bytes", "alloc_retries", "inactive_split_bytes")}))
    print(f"reserved but unallocated: {spare / 2**20:.0f} MiB = {spare / oom['requested_bytes']:.1f}x the request")
    print(oom["message"])
    if variant == "expandable":
        return 0
    fragmented = spare >= oom["requested_bytes"]
    return 0 if fragmented == (variant == "fragmented") else 1


if __name__ == "__main__":
    if "--train" in sys.argv:
        train()
    else:
        sys.exit(main(next((v for v in VARIANTS if f"--{v}" in sys.argv), "fragmented")))
