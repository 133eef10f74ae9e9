"""Benchmark: the probe's cost per optimizer step, same CPU training with and without it.

Runs ``samples/train.py`` (DeepSpeed, ZeRO-2, DS_ACCELERATOR=cpu, one rank) two ways:

* across processes: bare runs and ``zerodoctor run`` runs, interleaved so machine noise
  hits both alike (this includes everything: injection, writer thread, comm wrappers);
* within one process: the probe attached, switched on and off in alternating blocks of
  ``BLOCK`` steps, so both halves share the process, its allocator and the machine's
  load at that moment; this isolates the per-step work of the engine wrappers.

Each run stamps its optimizer steps itself (after warm-up). Prints ms per step both ways,
the difference in µs per step and in percent, and the spread of the bare runs. Then the
heartbeat's share on its own: the phase switches of one step and of one collective on the
training thread, and one heartbeat on the writer's thread (every 5 s), against a step of
each shape measured in the same run.

    python bench/probe_overhead.py [--repeats 3] [--steps 80]
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
BLOCK = 5

# Wraps deepspeed.initialize in the training process to stamp each optimizer step with the
# mode the next step runs in ("on"/"off" when toggling the probe, else "run").
RUNNER = """
import json, os, sys, time, runpy
stamps = []
import deepspeed
original = deepspeed.initialize
def initialize(*a, **k):
    result = original(*a, **k)
    engine = result[0]
    probe = None
    if os.environ.get("BENCH_TOGGLE"):
        from zerodoctor.probe import attach
        probe = attach(engine, run_dir=os.environ["BENCH_TOGGLE"])
    step = engine.step
    def stamped_step(*args, **kwargs):
        out = step(*args, **kwargs)
        if probe is not None and len(stamps) %% %(block)d == 0:
            probe.enabled = not probe.enabled
        stamps.append((time.perf_counter(), "run" if probe is None else ("on" if probe.enabled else "off")))
        return out
    engine.step = stamped_step
    return result
deepspeed.initialize = initialize
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("STAMPS " + json.dumps(stamps))
""" % {"block": BLOCK}

SHAPES = {  # name: (width, layers, micro-batch)
    "tiny (worst case)": (64, 2, 4),
    "realistic (8.4M MLP)": (1024, 7, 32),
}


def one_run(work: Path, mode: str, width: int, layers: int, micro: int, steps: int) -> dict[str, list[float]]:
    """Step durations by the mode each step ran in; ``mode`` is bare, wrapped or toggle."""
    config = work / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                                  "zero_optimization": {"stage": 2}}))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29700 + os.getpid() % 200), "OMP_NUM_THREADS": "1"}
    if mode == "toggle":
        env["BENCH_TOGGLE"] = str(work / "toggle")
    train = [sys.executable, "-c", RUNNER, str(ROOT / "samples" / "train.py"), "--config", str(config),
             "--steps", str(steps), "--width", str(width), "--layers", str(layers)]
    prefix = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(work / "runs"), "--"]
    out = subprocess.run((prefix if mode == "wrapped" else []) + train, capture_output=True, text=True, env=env,
                         timeout=600, cwd=ROOT)
    line = next((x for x in out.stdout.splitlines() if x.startswith("STAMPS ")), None)
    if line is None:
        raise SystemExit(f"run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    stamps = json.loads(line[len("STAMPS "):])[WARMUP:]
    by_mode: dict[str, list[float]] = {}
    for (t0, ran_in), (t1, _) in zip(stamps, stamps[1:]):
        by_mode.setdefault(ran_in, []).append(t1 - t0)
    return by_mode


class _StubEngine:
    """The engine surface the probe touches, doing nothing: what remains is the probe's own cost."""

    global_steps = skipped_steps = global_rank = 0

    class module:  # noqa: N801 - the attribute the probe reads: training mode
        training = True

    def forward(self, x):  # noqa: ANN001, ANN201
        return x

    def backward(self, loss):  # noqa: ANN001, ANN201
        return loss

    def step(self) -> None:
        self.global_steps += 1

    def is_gradient_accumulation_boundary(self) -> bool:
        return True

    def fp16_enabled(self) -> bool:
        return False

    def get_lr(self) -> list[float]:
        return [1e-4]

    def get_global_grad_norm(self) -> float:
        return 1.0


def probe_code_us(work: Path, steps: int = 20_000) -> float:
    """µs per optimizer step in the probe's code, validation and serialisation included."""
    import time

    import torch

    from zerodoctor.probe.crash import CrashRecorder
    from zerodoctor.probe.engine import EngineProbe
    from zerodoctor.probe.writer import EventWriter

    x, loss = torch.zeros(4, 64), torch.tensor(1.0)

    def loop(engine: _StubEngine) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            engine.backward(engine.forward(x) is not None and loss)
            engine.step()
        return time.perf_counter() - start

    bare = min(loop(_StubEngine()) for _ in range(3))
    engine = _StubEngine()
    writer = EventWriter(work / "stub", "stub", 0)
    EngineProbe(engine, writer, CrashRecorder(writer), None).install()
    start = time.perf_counter()
    probed = loop(engine)
    writer.close()  # the writer thread's share: validating and writing every event
    probed = time.perf_counter() - start
    return (probed - bare) / steps * 1e6


def heartbeat_costs_us(repeat: int = 20_000) -> dict[str, float]:
    """µs for: one step's phase switches, one collective's (group, sequence number, phase), one heartbeat."""
    import time

    from zerodoctor.probe.comm import CommClock
    from zerodoctor.probe.phase import RankPhase

    phase = RankPhase()
    start = time.perf_counter()
    for _ in range(repeat):  # forward, backward, step: enter and leave each
        for name in ("forward", "backward", "step"):
            phase.leave(phase.enter(name), "user")
    per_step = (time.perf_counter() - start) / repeat * 1e6

    import torch.distributed as dist

    if not dist.is_initialized():  # a real one-rank gloo group: its name and c10d count are what is read
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    clock = CommClock(phase=phase, default_group=dist.distributed_c10d._get_default_group())
    start = time.perf_counter()
    for _ in range(repeat):  # what the collective wrapper gained: the group's name and count, two phase switches
        group, seq = clock._group((), {"group": None})
        phase.leave(phase.enter_collective("all_reduce", group, seq))
    per_collective = (time.perf_counter() - start) / repeat * 1e6
    start = time.perf_counter()
    for _ in range(repeat // 10):
        phase.heartbeat()
    beat = (time.perf_counter() - start) / (repeat // 10) * 1e6
    return {"phases per step": per_step, "per collective (group+seq)": per_collective, "one heartbeat": beat}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="bare/wrapped pairs (and toggle runs) per shape")
    p.add_argument("--steps", type=int, default=80, help="optimizer steps per run")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="zerodoctor-bench-") as tmp:
        code_us = probe_code_us(Path(tmp))
        for name, (width, layers, micro) in SHAPES.items():
            bare, wrapped, on, off = [], [], [], []
            for _ in range(args.repeats):  # interleaved: bare, wrapped, toggle, bare, wrapped, toggle, ...
                bare.append(statistics.median(one_run(Path(tmp), "bare", width, layers, micro, args.steps)["run"]))
                wrapped.append(statistics.median(
                    one_run(Path(tmp), "wrapped", width, layers, micro, args.steps)["run"]))
                toggled = one_run(Path(tmp), "toggle", width, layers, micro, args.steps)
                on.append(statistics.median(toggled["on"]))
                off.append(statistics.median(toggled["off"]))
            noise = statistics.pstdev(bare) / statistics.median(bare) * 100
            for how, base, probed in (("across processes", bare, wrapped), ("in-process on/off", off, on)):
                b, q = statistics.median(base), statistics.median(probed)
                rows.append((name, how, b, q, (q - b) * 1e6, (q / b - 1) * 100, noise))
    print(f"{'shape':<22} {'comparison':<18} {'without ms/step':>15} {'with ms/step':>12} {'cost µs/step':>13} "
          f"{'overhead':>9} {'bare spread':>11}")
    for name, how, b, q, cost, pct, noise in rows:
        print(f"{name:<22} {how:<18} {b * 1e3:>15.3f} {q * 1e3:>12.3f} {cost:>13.1f} {pct:>8.2f}% {noise:>10.2f}%")
    print(f"\nprobe code alone (stub engine, serialisation included): {code_us:.1f} µs per optimizer step")
    for name, how, b, *_ in rows[1::2]:
        print(f"  = {code_us / (b * 1e6) * 100:.3f}% of a {name} step ({b * 1e3:.2f} ms)")
    costs = heartbeat_costs_us()
    print(f"\n{'heartbeat part':<28} {'µs':>8}  " + "  ".join(f"{'% of ' + n.split()[0] + ' step':>18}" for n, *_ in rows[1::2]))
    for part, us in costs.items():
        # a heartbeat runs once per 5 s on the writer thread: its share of a step is us / (5 s / step)
        shares = [us * (b / 5.0 if part == "one heartbeat" else 1.0) / (b * 1e6) * 100 for _, _, b, *_ in rows[1::2]]
        print(f"{part:<28} {us:>8.2f}  " + "  ".join(f"{x:>17.4f}%" for x in shares))
    print("(per collective: times the step's collectives; ZeRO-3 issues one all-gather per partitioned module)")


if __name__ == "__main__":
    main()
