"""Bench helper: a real 2-rank gloo ZeRO-3 DeepSpeed job on CPU, profiled with shapes and stacks over every
step, as people record the large traces they hand over. Rank 0 exports ``OUT`` (``.json`` or ``.json.gz``).

    DS_ACCELERATOR=cpu torchrun --standalone --nproc_per_node 2 bench/trace_job.py OUT STEPS
"""

from __future__ import annotations

import os
import sys

import deepspeed
import torch
from torch.profiler import ProfilerActivity, profile, schedule

out, steps = sys.argv[1], int(sys.argv[2])
deepspeed.init_distributed(dist_backend="gloo")
config = {"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 4096, "reduce_bucket_size": 4096,
                                "stage3_param_persistence_threshold": 10}}
model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(16)])
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
             schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
    for _ in range(steps + 1):
        loss = engine(torch.randn(4, 64)).pow(2).mean()
        engine.backward(loss)
        engine.step()
        prof.step()
if int(os.environ["RANK"]) == 0:
    prof.export_chrome_trace(out)
