"""Benchmark: the probe's cost per optimizer step, same CPU training with and without it.

Runs ``samples/train.py`` (DeepSpeed, ZeRO-2, DS_ACCELERATOR=cpu) in one process per run,
alternating probed and bare runs so machine noise hits both alike. Each run times its
steps itself (a wall-clock stamp per optimizer step, after warm-up), which works with or
without the probe. Prints per-step times, the difference in µs per step and in percent.

    python bench/probe_overhead.py [--repeats 5] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 10

# One process, one rank: the probe's cost is per process, and 2 ranks on 2 cores only add noise.
RUNNER = """
import json, sys, time, runpy
stamps = []
import deepspeed
original = deepspeed.initialize
def initialize(*a, **k):
    result = original(*a, **k)
    engine = result[0]
    step = engine.step
    def timed_step(*args, **kwargs):
        out = step(*args, **kwargs)
        if engine.is_gradient_accumulation_boundary():
            stamps.append(time.perf_counter())
        return out
    engine.step = timed_step
    return result
deepspeed.initialize = initialize
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("STAMPS " + json.dumps(stamps))
"""

SHAPES = {  # name: (width, layers, micro-batch)
    "tiny (worst case)": (64, 2, 4),
    "realistic (8.4M MLP)": (1024, 7, 32),
}


def one_run(work: Path, probed: bool, width: int, layers: int, micro: int, steps: int) -> list[float]:
    config = work / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                                  "zero_optimization": {"stage": 2}}))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29700 + os.getpid() % 200), "OMP_NUM_THREADS": "1"}
    train = [sys.executable, "-c", RUNNER, str(ROOT / "samples" / "train.py"), "--config", str(config),
             "--steps", str(steps), "--width", str(width), "--layers", str(layers)]
    prefix = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(work / "runs"), "--"] if probed else []
    out = subprocess.run(prefix + train, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    line = next((x for x in out.stdout.splitlines() if x.startswith("STAMPS ")), None)
    if line is None:
        raise SystemExit(f"run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    stamps = json.loads(line[len("STAMPS "):])[WARMUP:]
    return [b - a for a, b in zip(stamps, stamps[1:])]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5, help="probed/bare pairs per shape")
    p.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="zerodoctor-bench-") as tmp:
        for name, (width, layers, micro) in SHAPES.items():
            bare, probed = [], []
            for _ in range(args.repeats):  # interleaved: bare, probed, bare, probed, ...
                bare.append(statistics.median(one_run(Path(tmp), False, width, layers, micro, args.steps)))
                probed.append(statistics.median(one_run(Path(tmp), True, width, layers, micro, args.steps)))
            b, q = statistics.median(bare), statistics.median(probed)
            rows.append((name, b, q, (q - b) * 1e6, (q / b - 1) * 100, statistics.pstdev(bare) / b * 100))
    print(f"{'shape':<22} {'bare ms/step':>12} {'probed ms/step':>15} {'cost µs/step':>13} {'overhead':>9} "
          f"{'bare noise':>11}")
    for name, b, q, cost, pct, noise in rows:
        print(f"{name:<22} {b * 1e3:>12.3f} {q * 1e3:>15.3f} {cost:>13.1f} {pct:>8.2f}% {noise:>10.2f}%")


if __name__ == "__main__":
    main()
