"""Sample training: a real DeepSpeed run on CPU with an optional injected fault.

Run it under ``zerodoctor run -- torchrun --nproc_per_node 2 samples/train.py --config X``;
``samples/record.py`` does, once per scenario. The script is ordinary DeepSpeed user code:
it never imports zerodoctor (the probe arrives through ``sitecustomize``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

import torch

SHIM = Path(__file__).resolve().parents[1] / "tests" / "shims" / "cpu_fp16.py"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help="DeepSpeed config JSON")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps to run")
    p.add_argument("--width", type=int, default=64, help="hidden width of the MLP")
    p.add_argument("--layers", type=int, default=2, help="hidden layers of the MLP")
    p.add_argument("--feed", type=int, default=None,
                   help="samples the loader feeds per micro-batch (default: the engine's micro-batch)")
    p.add_argument("--loss", choices=("mean", "sum"), default="mean", help="reduction of the squared error")
    p.add_argument("--loss-mult", type=float, default=1.0, help="fault: multiply the loss by this ...")
    p.add_argument("--loss-mult-from", type=int, default=0, help="... from this optimizer step on")
    p.add_argument("--cpu-fp16-shim", action="store_true", help="let DeepSpeed's CPU accelerator do fp16")
    p.add_argument("--hub_token", help="unused: as HF scripts take one to push to the Hub (the probe must redact it)")
    return p.parse_args()


def build_model(width: int, layers: int) -> torch.nn.Module:
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(width, width))


def main() -> None:
    args = parse_args()
    if args.cpu_fp16_shim:
        spec = importlib.util.spec_from_file_location("cpu_fp16_shim", SHIM)
        shim = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shim)
        shim.install()
    import deepspeed

    torch.manual_seed(0)
    model = build_model(args.width, args.layers)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=args.config)
    dtype = torch.float16 if engine.fp16_enabled() else torch.bfloat16 if engine.bfloat16_enabled() else torch.float32
    feed = args.feed or engine.train_micro_batch_size_per_gpu()
    generator = torch.Generator().manual_seed(1 + engine.global_rank)
    rank0 = engine.global_rank == 0
    while engine.global_steps < args.steps:
        x = torch.randn(feed, args.width, generator=generator).to(dtype)
        target = torch.randn(feed, args.width, generator=generator)
        err = (engine(x).float() - target) ** 2
        loss = err.sum() if args.loss == "sum" else err.mean()
        if engine.global_steps >= args.loss_mult_from:
            loss = loss * args.loss_mult
        engine.backward(loss)
        engine.step()
        if rank0 and engine.is_gradient_accumulation_boundary() and engine.global_steps % 10 == 0:
            print(f"step {engine.global_steps} loss {loss.item():.4f}", flush=True)
    if rank0:
        print(f"done: {engine.global_steps} steps, {engine.skipped_steps} skipped", flush=True)
    if os.environ.get("SAMPLE_DESTROY_PG", "1") == "1" and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
