"""Every core fold gives the same signals however the merged steps are cut into blocks.

Folds take a block of steps at once (runs of clean steps replayed arithmetically, windows cut
to their tail, stalls looked for only where the clock jumped); ``diagnose`` hands blocks of
thousands, a live ``watch`` pass a handful. Over histories with overflow bursts, unreported
fields, NaNs and two stalls, folding one step at a time, in random blocks (the state going
through JSON between them, as the store keeps it), and in one block must agree signal for signal.
"""

from __future__ import annotations

import json
import random

import pytest

from zerodoctor import signals
from zerodoctor.signals.view import Reads, RunView, Steps

CORE = [m for m in signals.signal_modules() if m.__name__.startswith("zerodoctor.signals.")]
CONFIGS = [{"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": power, "loss_scale_window": window,
                      "hysteresis": hysteresis, "consecutive_hysteresis": consecutive, "min_loss_scale": low}}
           for power, window, hysteresis, consecutive, low in
           ((12, 50, 2, False, 1), (16, 1000, 1, False, 1), (8, 1, 4, True, 4), (12, 7, 2, True, 1))]


def history(seed: int, n: int) -> tuple[dict[str, list], list[dict]]:
    """Merged step columns and the heartbeats of two ranks, one of them stuck through each stall."""
    rng = random.Random(seed)
    stalls = set(rng.sample(range(n // 4, n), 2))
    cols: dict[str, list] = {k: [] for k in ("step", "t", "overflow", "loss_scale", "lr", "loss_nonfinite",
                                             "grad_nonfinite", "micro_batches", "step_time_s", "comm_s", "fwd_s",
                                             "bwd_s", "optim_s", "mem_allocated_bytes", "alloc_retries")}
    beats, step, t, scale, burst = [], 0, 1000.0, 4096.0, 0.0

    def maybe(value, p_none):
        return None if rng.random() < p_none else value

    for i in range(n):
        step += rng.choice((1, 1, 1, 2))
        if i in stalls:
            beats += [{"kind": "heartbeat", "rank": r, "t": t + s, "phase": phase, "since_t": t + 1, "op": op,
                       "group": 0, "seq": 7 if op else None, "last_step": step - 1, "rss_bytes": 10**9 + i}
                      for s in range(5, 95, 5) for r, phase, op in ((0, "collective", "all_reduce"), (1, "data", None))]
            t += 95.0
        t += rng.uniform(0.3, 0.7)
        burst = rng.choice((0.0, 0.05, 0.6)) if rng.random() < 0.02 else burst
        flag = rng.random() < burst
        scale = max(scale / 2, 1.0) if flag else scale * 2 if rng.random() < 0.02 else scale
        cols["step"].append(step)
        cols["t"].append(t)
        cols["overflow"].append(maybe(int(flag), 0.05))
        cols["loss_scale"].append(maybe(scale, 0.4))
        cols["lr"].append(maybe(1e-4 * (1 + i / n), 0.1))
        cols["loss_nonfinite"].append(maybe(int(rng.random() < 0.01), 0.05))
        cols["grad_nonfinite"].append(maybe(2 * (flag or rng.random() < 0.01), 0.05))
        cols["micro_batches"].append(maybe(rng.choice((4, 4, 4, 2)), 0.1))
        cols["step_time_s"].append(maybe(rng.uniform(0.4, 0.6), 0.05))
        for name, mean in (("comm_s", 0.15), ("fwd_s", 0.1), ("bwd_s", 0.2), ("optim_s", 0.05)):
            cols[name].append(maybe(rng.uniform(0.5, 1.5) * mean, 0.1))
        cols["mem_allocated_bytes"].append(maybe(10**10 + 1000 * i + rng.randrange(100), 0.1))
        cols["alloc_retries"].append(maybe(rng.choice((0, 0, 0, 1, 3)), 0.1))
    for name in ("comm_s", "step_time_s", "fwd_s", "bwd_s", "optim_s"):  # the straggler fold's: values by rank
        cols[f"straggler_{name}_by_rank"] = [{} if v is None else {0: v, 1: 0.9 * v} for v in cols[name]]
    for name in Reads.of(CORE).step_fields:  # as the store merges them: every declared field, None where unreported
        cols.setdefault(name, [None] * n)
    return cols, beats


def judged(config: dict, cols: dict[str, list], beats: list[dict], sizes: list[int], *, json_between: bool) -> dict:
    view = RunView(0, "r", Reads.of(CORE))
    view.events["run_start"] = [{"rank": r, "t": 999.0, "config": config, "precision": "fp16", "host": "h",
                                 "host_memory_bytes": 10**11, "device_memory_bytes": 8 * 10**10} for r in (0, 1)]
    view.add(beats, "rank.jsonl", "jsonl")
    start = 0
    for size in sizes:
        block = Steps({k: v[start:start + size] for k, v in cols.items()})
        for fold in view.folds.values():
            fold.add_steps(block, view)
        if json_between:
            view.folds = {m: type(f).load(json.loads(json.dumps(f.dump()))) for m, f in view.folds.items()}
        start += size
    assert start == len(cols["step"])
    view.now = cols["t"][-1] + 1.0
    return signals.compute(view, CORE)


def cuts(rng: random.Random, n: int) -> list[int]:
    sizes = []
    while sum(sizes) < n:
        sizes.append(min(rng.choice((1, 2, 3, 19, 20, 21, 64, 500, 1500)), n - sum(sizes)))
    return sizes


@pytest.mark.parametrize("seed", range(8))
def test_blocks_of_any_size_give_the_same_signals(seed: int) -> None:
    n = 3000
    cols, beats = history(seed, n)
    config = CONFIGS[seed % len(CONFIGS)]
    one_by_one = judged(config, cols, beats, [1] * n, json_between=False)
    assert one_by_one["hang.recovered"] == 2  # both stalls were seen: the history exercises every fold
    assert one_by_one["fp16.overflow_count"] > 0 and one_by_one["numerics.nonfinite_loss_steps"] > 0
    assert judged(config, cols, beats, cuts(random.Random(seed), n), json_between=True) == one_by_one
    assert judged(config, cols, beats, [n], json_between=False) == one_by_one
