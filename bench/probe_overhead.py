"""Benchmark: what the probe costs a training step, by its own CPU clocks and by the whole job's wall time.

For each rank count (``--ranks``, default 1 2 4) and step shape (``--shapes``: a ~3 ms CPU micro-step,
and the same model with 47 ms of host work a step, ~50 ms), ``samples/train.py`` (DeepSpeed ZeRO-2,
DS_ACCELERATOR=cpu, gloo) runs as plain ``torchrun`` and as ``zerodoctor run -- torchrun``, in
interleaved pairs (the order swapped every other pair, so drift and machine noise weigh on both):

* wall: the median optimizer step of each run (each rank stamps its steps after warm-up; the
  ranks' medians averaged); per pair the ratio probed/plain; the table gives the median ratio of
  ``--pairs`` pairs and their spread (lowest..highest);
* the probe's own CPU time on the training thread, from the thread's CPU clock
  (``time.thread_time``) around the probe's work only: every engine method the probe wraps
  (forward, backward, step, checkpoints) and every collective of the comm backend is wrapped
  twice more, outside the probe's wrapper and inside it (class level, so the probe wraps it), and
  what lies outside the inner call and inside the outer one is the probe's. The same accounting
  in the plain runs (no probe between the two) is its own cost, subtracted;
* the writer thread's CPU time, from its own clock (``pthread_getcpuclockid`` of the
  ``zerodoctor-writer`` thread), over the same steps.

The per-step costs of the probe's code itself, apart from torch and DeepSpeed, come from a stub
engine: ``--profile`` prints where that time goes, function by function (cProfile); then the parts
(phase switches, one collective through the probe's wrapper as DeepSpeed calls it, one heartbeat),
timed in a hot loop. In a real step the backend's own work evicts the probe's code and data from the
caches between two ops, so the runs' per-op figures above are several times the hot loop's.

    python bench/probe_overhead.py [--pairs 5] [--ranks 1 2 4] [--shapes 3ms 50ms] [--steps 300] [--profile]

On a machine with fewer cores than ranks the ranks share cores: the wall ratios then measure
contention as much as the probe (say so beside the numbers).
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 20

# Runs as each rank's script (torchrun RUNNER train.py ...): stamps steps, accounts the probe's CPU.
RUNNER = r'''
import json, os, runpy, statistics, sys, threading, time

clock = time.thread_time
probe_cpu = {}  # per wrapped method or op: the probe's CPU time on this thread, before the inner call and after it
calls = {}  # per wrapped method or op: calls through the probe
frames = []  # per outer call in flight: [name, entry or inner-exit time, inner call pending]


def outer(name, fn):
    """Around the probe's wrapper (or, without a probe, the method itself)."""
    def outer_timed(*args, **kwargs):
        frames.append([name, clock(), True])
        try:
            return fn(*args, **kwargs)
        finally:
            now = clock()
            _, since, _ = frames.pop()
            probe_cpu[name] = probe_cpu.get(name, 0.0) + now - since
            calls[name] = calls.get(name, 0) + 1
    return outer_timed


def inner(fn):
    """Around the method the probe wraps: the probe's work stops at its entry and starts at its exit."""
    def inner_timed(*args, **kwargs):
        frame = frames[-1] if frames else None
        if frame is None or not frame[2]:  # a call from within the engine itself, not through the probe
            return fn(*args, **kwargs)
        frame[2] = False
        now = clock()
        probe_cpu[frame[0]] = probe_cpu.get(frame[0], 0.0) + now - frame[1]
        try:
            return fn(*args, **kwargs)
        finally:
            frame[1] = clock()
    inner_timed.__wrapped__ = fn
    return inner_timed


import deepspeed
from deepspeed.comm.torch import TorchBackend
from deepspeed.runtime.engine import DeepSpeedEngine
from zerodoctor.probe.comm import OPS

METHODS = ("forward", "backward", "step", "save_checkpoint", "load_checkpoint")
for name in METHODS:
    setattr(DeepSpeedEngine, name, inner(getattr(DeepSpeedEngine, name)))
for op in OPS:
    if callable(getattr(TorchBackend, op, None)):
        setattr(TorchBackend, op, inner(getattr(TorchBackend, op)))

stamps, marks = [], {}
profiler = None
if os.environ.get("BENCH_CPROFILE") and os.environ.get("RANK", "0") == "0":
    import cProfile
    profiler = cProfile.Profile(time.thread_time)


def writer_cpu():
    thread = next((t for t in threading.enumerate() if t.name == "zerodoctor-writer"), None)
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident)) if thread is not None else 0.0


def mark(name):
    marks[name] = {"t": time.perf_counter(), "probe": dict(probe_cpu), "calls": dict(calls), "writer": writer_cpu(),
                   "train": clock()}


original = deepspeed.initialize


def initialize(*args, **kwargs):
    result = original(*args, **kwargs)  # the probe, if any, is attached now
    engine = result[0]
    for name in METHODS:
        object.__setattr__(engine, name, outer(name, getattr(engine, name)))
    backend = deepspeed.comm.comm.cdb
    for op in OPS:
        if callable(getattr(backend, op, None)):
            setattr(backend, op, outer(op, getattr(backend, op)))
    step = engine.step

    def stamped_step(*a, **k):
        out = step(*a, **k)
        stamps.append(time.perf_counter())
        if len(stamps) == WARMUP:
            mark("start")
            if profiler is not None:
                profiler.enable()
        return out

    object.__setattr__(engine, "step", stamped_step)
    return result


deepspeed.initialize = initialize
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
mark("end")
if profiler is not None:
    import pstats
    profiler.disable()
    print(f"CPROFILE rank 0, {len(stamps) - WARMUP} steps, the thread's CPU clock (cProfile slows what it times):")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(os.environ["BENCH_CPROFILE"], 25)
a, b = marks["start"], marks["end"]
steps = len(stamps) - WARMUP
durations = [y - x for x, y in zip(stamps[WARMUP - 1:], stamps[WARMUP:])]
record = json.dumps({"rank": int(os.environ.get("RANK", 0)), "steps": steps,
                             "step_s": statistics.median(durations),
                             "probe_cpu_s": {k: (v - a["probe"].get(k, 0.0)) / steps for k, v in b["probe"].items()},
                             "calls": {k: (v - a["calls"].get(k, 0)) / steps for k, v in b["calls"].items()},
                             "writer_cpu_s": (b["writer"] - a["writer"]) / steps,
                             "train_cpu_s": (b["train"] - a["train"]) / steps})
with open(os.path.join(os.environ["BENCH_OUT"], f"rank-{os.environ.get('RANK', 0)}.json"), "w") as out:
    out.write(record)  # a file each: the ranks share one stdout, where their lines may interleave
'''

SHAPES = {  # name: train.py arguments (tiny MLP, micro-batch 4: ~3 ms a step on one CPU core)
    "3ms": ["--width", "64", "--layers", "2"],
    "50ms": ["--width", "64", "--layers", "2", "--host-work-s", "0.047"],
}


def one_run(work: Path, probed: bool, ranks: int, shape: str, steps: int, cprofile: str = "") -> list[dict]:
    """Each rank's BENCH record for one run, plain torchrun or under ``zerodoctor run``; with ``cprofile``
    (a regular expression of file names), rank 0's cProfile of those files is printed."""
    config = work / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                                  "zero_optimization": {"stage": 2}}))
    runner = work / "bench_runner.py"
    runner.write_text(f"WARMUP = {WARMUP}\n" + RUNNER)
    results = Path(tempfile.mkdtemp(dir=work))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "BENCH_CPROFILE": cprofile,
           "BENCH_OUT": str(results)}
    train = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
             str(runner), str(ROOT / "samples" / "train.py"), "--config", str(config), "--steps",
             str(steps + WARMUP), *SHAPES[shape]]
    prefix = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(work / "runs"), "--"] if probed else []
    out = subprocess.run(prefix + train, capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    records = [json.loads(f.read_text()) for f in sorted(results.glob("rank-*.json"))]
    if cprofile:
        print(out.stdout[out.stdout.index("CPROFILE"):])
    if len(records) != ranks:
        raise SystemExit(f"run failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return records


def mean(records: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in records)


def by_hook(records: list[dict]) -> dict[str, float]:
    """The probe's CPU seconds a step on the training thread, per wrapped method or collective, averaged over ranks."""
    names = {name for r in records for name in r["probe_cpu_s"]}
    return {name: statistics.fmean(r["probe_cpu_s"].get(name, 0.0) for r in records) for name in names}


def own_cost(probed: list[dict[str, float]], plain: list[dict[str, float]]) -> dict[str, float]:
    """Per hook, the median over pairs of the probed runs' share less the plain runs' (the accounting's own)."""
    names = {name for run in probed for name in run}
    return {name: statistics.median(run.get(name, 0.0) for run in probed)
            - statistics.median(run.get(name, 0.0) for run in plain) for name in names}


class _StubEngine:
    """The engine surface the probe touches, doing nothing: what remains is the probe's own cost."""

    global_steps = skipped_steps = global_rank = 0

    class module:  # noqa: N801 - the attribute the probe reads: training mode
        training = True

    def forward(self, x):  # noqa: ANN001, ANN202
        return x

    def backward(self, loss):  # noqa: ANN001, ANN202
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


def probe_code(work: Path, steps: int = 20_000, profile: bool = False) -> tuple[float, float]:
    """(training thread µs, writer thread µs) per optimizer step in the probe's code on a stub engine,
    by thread CPU clocks; with ``profile``, cProfile's top functions of the training thread's share."""
    import time

    import torch

    from zerodoctor.probe.crash import CrashRecorder
    from zerodoctor.probe.engine import EngineProbe
    from zerodoctor.probe.writer import EventWriter

    x, loss = torch.zeros(4, 64), torch.tensor(1.0)

    def loop(engine: _StubEngine) -> float:
        start = time.thread_time()
        for _ in range(steps):
            engine.backward(engine.forward(x) is not None and loss)
            engine.step()
        return time.thread_time() - start

    bare = min(loop(_StubEngine()) for _ in range(3))
    engine = _StubEngine()
    writer = EventWriter(work / "stub", "stub", 0)
    EngineProbe(engine, writer, CrashRecorder(writer), None).install()
    probed = loop(engine)
    writer_s = time.clock_gettime(time.pthread_getcpuclockid(writer._thread.ident))
    start = time.thread_time()
    writer.close()  # what the writer thread had not done yet, done on this thread: the writer's share too
    writer_s += time.thread_time() - start
    if profile:
        import cProfile
        import pstats

        engine = _StubEngine()
        writer = EventWriter(work / "stub-profiled", "stub", 0)
        EngineProbe(engine, writer, CrashRecorder(writer), None).install()
        profiler = cProfile.Profile(time.thread_time)
        profiler.runcall(loop, engine)
        writer.close()
        print(f"\nwhere the training thread's share goes (stub engine, {steps} steps, cProfile on the thread's CPU "
              "clock, so slower than unprofiled):")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
    return (probed - bare) / steps * 1e6, writer_s / steps * 1e6


def heartbeat_costs_us(repeat: int = 20_000) -> dict[str, float]:
    """µs for: one step's phase switches, one collective through the probe's wrapper (as DeepSpeed calls
    all_reduce: positional, the group among the arguments; and all_gather_into_tensor: keywords, the default
    group), one heartbeat. Hot caches: a real step evicts them between ops, so the runs' figures are higher."""
    import time

    import torch

    from zerodoctor.probe.comm import CommClock, _group_types
    from zerodoctor.probe.phase import RankPhase

    def best_us(fn: Any, *args: Any, **kwargs: Any) -> float:
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(repeat):
                fn(*args, **kwargs)
            runs.append(time.perf_counter() - start)
        return min(runs) / repeat * 1e6

    phase = RankPhase()

    def phases() -> None:  # forward, backward, step: enter and leave each
        for name in ("forward", "backward", "step"):
            phase.leave(phase.enter(name), "user")

    import torch.distributed as dist

    if not dist.is_initialized():  # a real one-rank gloo group: its name and c10d count are what is read
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    clock = CommClock(phase=phase, default_group=lambda: dist.distributed_c10d.GroupMember.WORLD,
                      group_types=_group_types())

    def collective(*args: Any, **kwargs: Any) -> None:  # the backend's op, doing nothing
        return None

    tensor, out, world = torch.zeros(1024), torch.zeros(2048), dist.distributed_c10d.GroupMember.WORLD
    all_reduce, all_gather = clock.wrap("all_reduce", collective), clock.wrap("all_gather_into_tensor", collective)
    positional = (tensor, dist.ReduceOp.SUM, world, False)
    keywords = {"output_tensor": out, "input_tensor": tensor, "group": None, "async_op": False}
    return {"phases per step": best_us(phases),
            "all_reduce (positional)": best_us(all_reduce, *positional) - best_us(collective, *positional),
            "all_gather_into_tensor (kw)": best_us(all_gather, **keywords) - best_us(collective, **keywords),
            "one heartbeat": best_us(phase.heartbeat) if repeat else 0.0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=5, help="plain/probed pairs per rank count and shape")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--steps", type=int, default=300, help="optimizer steps measured per run, after warm-up")
    p.add_argument("--profile", action="store_true", help="also cProfile the probe's code on a stub engine")
    p.add_argument("--cprofile", metavar="REGEX", help="only cProfile rank 0 of one probed run of the first rank "
                   "count and shape, its functions in files matching REGEX (e.g. zerodoctor), and stop")
    args = p.parse_args()
    if args.cprofile:
        with tempfile.TemporaryDirectory(prefix="zerodoctor-bench-") as tmp:
            one_run(Path(tmp), True, args.ranks[0], args.shapes[0], args.steps, args.cprofile)
        return
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    header = (f"{'ranks':>5} {'step':>5} {'plain ms':>9} {'probed ms':>10} {'A/B median':>11} {'A/B spread':>17} "
              f"{'train-thread µs':>16} {'% step':>7} {'writer µs':>10} {'% step':>7}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="zerodoctor-bench-") as tmp:
        for shape in args.shapes:
            for ranks in args.ranks:
                ratios, plain, probed, own, calib, writer = [], [], [], [], [], []
                for pair in range(args.pairs):
                    order = (False, True) if pair % 2 == 0 else (True, False)
                    got = {mode: one_run(Path(tmp), mode, ranks, shape, args.steps) for mode in order}
                    a, b = mean(got[False], "step_s"), mean(got[True], "step_s")
                    plain.append(a)
                    probed.append(b)
                    ratios.append(b / a)
                    own.append(by_hook(got[True]))
                    calib.append(by_hook(got[False]))  # the accounting's own cost, no probe inside
                    writer.append(mean(got[True], "writer_cpu_s"))
                step = statistics.median(plain)
                hooks = own_cost(own, calib)
                train_us = sum(hooks.values()) * 1e6
                writer_us = statistics.median(writer) * 1e6
                row = (f"{ranks:>5} {shape:>5} {step * 1e3:>9.2f} {statistics.median(probed) * 1e3:>10.2f} "
                       f"{(statistics.median(ratios) - 1) * 100:>+10.2f}% "
                       f"{(min(ratios) - 1) * 100:>+7.2f}..{(max(ratios) - 1) * 100:>+6.2f}% "
                       f"{train_us:>16.1f} {train_us / (step * 1e6) * 100:>6.2f}% "
                       f"{writer_us:>10.1f} {writer_us / (step * 1e6) * 100:>6.2f}%")
                top = sorted(hooks.items(), key=lambda kv: -kv[1])[:5]
                per_step = got[True][0]["calls"]  # calls a step through each wrapper (rank 0, the last pair)
                where = "   training thread, µs a step (calls a step): " + ", ".join(
                    f"{name} {us * 1e6:.1f} ({per_step.get(name, 0):.0f})" for name, us in top)
                print(("" if rows else header + "\n") + row + "\n" + where, flush=True)
                rows.append(row)
        print(f"\n(A/B: probed/plain median step, {args.pairs} interleaved pairs, spread lowest..highest pair; "
              f"train-thread: probe CPU per step minus the accounting's own, medians; load average "
              f"{os.getloadavg()[0]:.1f} at the end)")
        train_us, writer_us = probe_code(Path(tmp), profile=args.profile)
    print(f"\nprobe code alone (stub engine, thread CPU clocks): training thread {train_us:.1f} µs, "
          f"writer thread {writer_us:.1f} µs per optimizer step")
    costs = heartbeat_costs_us()
    print(f"\n{'probe part (hot loop)':<28} {'µs':>8}")
    for part, us in costs.items():
        print(f"{part:<28} {us:>8.2f}")
    print("(a heartbeat runs once per 5 s on the writer thread; a collective's: times the step's collectives)")


if __name__ == "__main__":
    main()
