"""Benchmark: the "text" parser on console logs, against plain line reading measured in the same run.

Two logs: one of ordinary lines no dialect claims (DeepSpeed-style INFO prefixes, tqdm bars,
prints — the bulk of any real console), and a dense DeepSpeed log where every step prints an
OVERFLOW line, ``step=N, skipped=K``, a throughput line and two timer lines. For each: the
baseline (``for line in f``), the parser alone over the lines (``feed`` per line), and the
whole source stage as ``diagnose`` runs it (``read_batches``: size-capped reading, offsets,
quarantine). Target: ≥ 100 MB/s on the unclaimed log through ``read_batches``.

    python bench/rawlog.py [--mb 200] [--keep DIR]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from zerodoctor.sources.batches import make_parser, read_batches

WORDS = ("the model layer loss epoch data loader batch worker token sample node host info warning "
         "saving checkpoint evaluating tokenizer shard cache download config").split()


def write_unclaimed(path: Path, mb: int) -> None:
    rng = random.Random(7)
    target = mb * 1_000_000
    with path.open("w") as f:
        size, i = 0, 0
        while size < target:
            i += 1
            if i % 3:
                line = (f"[2026-01-12 09:{i // 60 % 60:02d}:{i % 60:02d},{i % 1000:03d}] [INFO] "
                        f"[engine.py:{i % 900}:run] "
                        + " ".join(rng.choice(WORDS) for _ in range(10)) + "\n")
            else:
                line = f" {i % 100:3d}%|████      | {i % 1000}/1000 [01:{i % 60:02d}<02:10,  3.21it/s]\n"
            f.write(line)
            size += len(line)


def write_dense(path: Path, mb: int) -> None:
    target = mb * 1_000_000
    with path.open("w") as f:
        size, step = 0, 0
        while size < target:
            step += 1
            lines = [
                "[2026-01-12 09:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                "Skipping step. Attempted loss scale: 65536, reducing to 32768\n" if step % 50 == 0 else "",
                f"[2026-01-12 09:00:00,000] [INFO] [logging.py:107:log_dist] [Rank 0] step={step}, "
                f"skipped={step // 50}, "
                f"lr=[0.0001], mom=[(0.9, 0.999)]\n",
                f"[2026-01-12 09:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step={step}/global_step={step}, "
                f"RunningAvgSamplesPerSec=41.5, CurrSamplesPerSec=40.2, MemAllocated=12.5GB, MaxMemAllocated=30.25GB\n",
                "[Rank 0] time (ms) | fwd_microstep: 10.00 | bwd_microstep: 20.00 | bwd_inner_microstep: 15.00 | "
                "bwd_allreduce_microstep: 5.00 | step_microstep: 3.00\n",
                "[Rank 0] time (ms) | fwd: 10.00 | bwd: 20.00 | bwd_inner: 15.00 | bwd_allreduce: 5.00 | step: 3.00\n",
            ]
            text = "".join(lines)
            f.write(text)
            size += len(text)


def _rate(path: Path, run) -> tuple[float, int]:  # noqa: ANN001 - a callable taking the path
    start = time.perf_counter()
    count = run(path)
    return path.stat().st_size / 1e6 / (time.perf_counter() - start), count


def baseline(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def parser_only(path: Path) -> int:
    parser = make_parser("text", "bench")
    events = 0
    with open(path, "rb") as f:
        for line in f:
            events += len(parser.feed(line))
    return events + len(parser.finish())


def source_stage(path: Path) -> int:
    return sum(len(b.events) for b in read_batches(path, make_parser("text", "bench")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="size of each log in MB")
    ap.add_argument("--keep", type=Path, help="write the logs here instead of a temporary directory")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        where = args.keep or Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        logs = {"unclaimed": where / "unclaimed.log", "dense deepspeed": where / "dense.log"}
        write_unclaimed(logs["unclaimed"], args.mb)
        write_dense(logs["dense deepspeed"], args.mb)
        print(f"{'log':<16} {'MB':>6} {'for line in f':>14} {'parser feed':>12} {'read_batches':>13} "
              f"{'feed/base':>10} {'batches/base':>13} {'events':>9}")
        for name, path in logs.items():
            base, _ = _rate(path, baseline)
            feed, _ = _rate(path, parser_only)
            stage, events = _rate(path, source_stage)
            print(f"{name:<16} {path.stat().st_size / 1e6:>6.0f} {base:>11.0f} MB/s {feed:>7.0f} MB/s "
                  f"{stage:>8.0f} MB/s "
                  f"{feed / base:>10.3f} {stage / base:>13.3f} {events:>9}")


if __name__ == "__main__":
    main()
