"""Benchmark: the signal folds alone over rank-merged steps, handed one step at a time vs in blocks.

The steps are those of ``bench/diagnose.py``'s log (8 ranks merged: dynamic fp16 with the scale
reported, an overflow every 997th step, every timer and memory field), built as the store's
``Steps`` columns, so the table shows what the folds cost without parsing or SQL. Blocks of one
step are what a live ``watch`` pass hands on; ``diagnose`` hands blocks of up to 8192. Each row is
one module's fold: microseconds per step in each block size and the ratio against blocks of one.
Target: all folds together ≤ 2.5 µs per step in blocks of 8192 (0.3 s for 125k steps).

    python bench/folds.py [--steps 125000] [--blocks 1 64 8192] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

from zerodoctor.signals.view import Reads, RunView, Steps
from zerodoctor.signals import signal_modules

CONFIG = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
          "fp16": {"enabled": True, "loss_scale": 0}, "zero_optimization": {"stage": 3}}


def merged_columns(n: int, fields: dict[str, str]) -> dict[str, list]:
    """Steps 1..n as the store merges bench/diagnose.py's rows; a field no module here knows is None."""
    steps = list(range(1, n + 1))
    known = {
        "t": [i * 0.5 for i in steps], "overflow": [int(i % 997 == 0) for i in steps], "loss_scale": [65536.0] * n,
        "lr": [1e-4] * n, "loss_nonfinite": [0] * n, "grad_nonfinite": [0] * n, "micro_batches": [4] * n,
        "step_time_s": [0.5] * n, "fwd_s": [0.1] * n, "bwd_s": [0.2] * n, "optim_s": [0.05] * n,
        "comm_s": [0.15 + (i % 7) * 0.01 for i in steps], "mem_allocated_bytes": [10_000_000_000 + i for i in steps],
        "alloc_retries": [0] * n,
    }
    return {"step": steps, "t": known["t"], **{f: known.get(f, [None] * n) for f in fields}}


def fold_time(module: str, reads: Reads, columns: dict[str, list], block: int) -> float:
    """Seconds one module's fold takes for every step, handed in blocks of ``block``."""
    view = RunView(0, "bench", reads)
    view.events["run_start"] = [{"rank": 0, "config": CONFIG, "precision": "fp16"}]
    fold = view.folds[module]
    n = len(columns["step"])
    blocks = [Steps({k: v[i:i + block] for k, v in columns.items()}) for i in range(0, n, block)]
    start = time.perf_counter()
    for b in blocks:
        fold.add_steps(b, view)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=125_000)
    ap.add_argument("--blocks", type=int, nargs="+", default=[1, 64, 8192])
    ap.add_argument("--repeat", type=int, default=3, help="best of this many passes (the machine is shared)")
    args = ap.parse_args()
    reads = Reads.of(signal_modules())
    columns = merged_columns(args.steps, reads.step_fields)
    per_step = {m: [min(fold_time(m, reads, columns, b) for _ in range(args.repeat)) / args.steps * 1e6
                    for b in args.blocks] for m in reads.folds}
    per_step["all folds"] = [sum(row[i] for row in per_step.values()) for i in range(len(args.blocks))]
    heads = [f"block {b} µs/step" for b in args.blocks]
    print(f"\nfolds over {args.steps:,} merged steps, best of {args.repeat}; ratio: block {args.blocks[0]} / "
          f"block {args.blocks[-1]}\n")
    print(f"{'module':<28}" + "".join(f"{h:>20}" for h in heads) + f"{'ratio':>8}")
    for module, us in per_step.items():
        ratio = us[0] / us[-1] if us[-1] else float("inf")
        name = module.removeprefix("zerodoctor.signals.")
        print(f"{name:<28}" + "".join(f"{u:>20.3f}" for u in us) + f"{ratio:>8.1f}")
    total = per_step["all folds"][-1] * args.steps / 1e6
    print(f"\nall folds, block {args.blocks[-1]}: {total:.3f} s for {args.steps:,} steps (target ≤ "
          f"{2.5 * args.steps / 1e6:.3f} s)")


if __name__ == "__main__":
    main()
