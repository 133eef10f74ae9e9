"""Benchmark: a run's HTML page costs the same to write at 1 hour, 1 day and 3 days, and stays small.

A 64-rank run at one step per second is stored through the pipeline (``Pipeline.store``, views
kept up to date as ``watch`` keeps them; every step field, an overflow every 997 steps plus a
burst, one straggler rank), and at each checkpoint (1 hour, 1 day, 3 days of steps, as far as
``--days`` goes) a page is written as ``watch --html`` writes it: the run's plot series from its
view (``Pipeline.series``, ``signals/plots.py``) and ``to_html``. Baselines, taken in the same run:
one plain read of the run's step chunks at that checkpoint (what a page read from the store would
at least cost), and the first checkpoint's page (flat means a ratio near 1). The page must stay
under 5 MB.

    python bench/report_page.py [--days 3] [--ranks 64]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zerodoctor.pipeline import Pipeline, rules_from
from zerodoctor.report.html import to_html
from zerodoctor.report.model import Report
from zerodoctor.sources.batches import Batch
from zerodoctor.store import steps
from zerodoctor.store.db import open_engine

LIMIT = 5_000_000
RUN = "bench"
CONFIG = {"fp16": {"enabled": True, "min_loss_scale": 1}, "zero_optimization": {"stage": 3}}
CHECKPOINTS = (3_600, 86_400, 3 * 86_400)
ROWS_PER_BATCH = 50_000


def grow(pipeline: Pipeline, tail, first: int, last: int, ranks: int, scale: list[float]) -> None:  # noqa: ANN001
    """Store steps ``first..last`` of every rank, a batch and a commit at a time, as a tail would."""
    rng = random.Random(first)
    burst = range(60_000, 60_040)
    rows: list[dict] = []
    for n in range(first, last + 1):
        overflow = n % 997 == 0 or n in burst
        scale[0] = max(scale[0] / 2, 1.0) if overflow else min(scale[0] * 2 if n % 1000 == 0 else scale[0], 65536.0)
        for r in range(ranks):
            rows.append({"v": 1, "t": 1e9 + n, "run": RUN, "rank": r, "kind": "step", "step": n, "micro_batches": 4,
                         "samples": 8, "loss": 3.0 * (1 + n) ** -0.1 + rng.random() * 0.05, "lr": 1e-4,
                         "loss_scale": scale[0], "overflow": overflow, "grad_norm": 1 + rng.random(),
                         "step_time_s": 0.5, "fwd_s": 0.15 if r == 17 else 0.1, "bwd_s": 0.2, "optim_s": 0.05,
                         "comm_s": 0.05 if r == 17 else 0.15 + rng.random() * 0.01,
                         "mem_allocated_bytes": 40_000_000_000 + n, "mem_reserved_bytes": 60_000_000_000})
        if len(rows) >= ROWS_PER_BATCH or n == last:
            with pipeline.engine.begin() as conn:
                pipeline.store(conn, tail, Batch.of(rows, end=n, last_line=n), raw=bytes)
                pipeline.commit(conn)
            pipeline.fold(pipeline.stored())
            rows = []


def page(pipeline: Pipeline) -> str:
    return to_html(Report(configs={RUN: CONFIG}, series={RUN: pipeline.series(RUN)}))


def timed(what, repeat: int = 3) -> float:  # noqa: ANN001 - a callable
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        what()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def scan(pipeline: Pipeline) -> None:
    with pipeline.engine.connect() as conn:
        rows = steps.rows_of(conn, pipeline.ingestor.run_id(conn, RUN))
        float(rows.values["loss"].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--keep", type=Path, help="write the last page here")
    args = parser.parse_args()
    last_step = int(args.days * 86_400)
    checkpoints = sorted({c for c in CHECKPOINTS if c <= last_step} | {last_step})
    print(f"{'steps':>8} {'ranks':>6} {'page write ms':>14} {'x first':>8} {'chunk read ms':>14} "
          f"{'page/read':>10} {'page bytes':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_engine(Path(tmp) / "bench.db")
        source = Path(tmp) / "rank-0.jsonl"
        source.write_text("")
        pipeline = Pipeline(engine, rules_from())
        with engine.begin() as conn:
            tail = pipeline.tail(conn, source, "jsonl")
        first_ms, done, scale, text = None, 0, [65536.0], ""
        for checkpoint in checkpoints:
            grow(pipeline, tail, done + 1, checkpoint, args.ranks, scale)
            done = checkpoint
            write_s = timed(lambda: page(pipeline))
            read_s = timed(lambda: scan(pipeline), repeat=1)
            text = page(pipeline)
            first_ms = first_ms or write_s * 1e3
            print(f"{checkpoint:>8,} {args.ranks:>6} {write_s * 1e3:>14.1f} {write_s * 1e3 / first_ms:>8.2f} "
                  f"{read_s * 1e3:>14.0f} {write_s / read_s:>10.4f} {len(text.encode()):>11,}")
        tail.close()
        engine.dispose()
    if args.keep:
        args.keep.write_text(text)
    size = len(text.encode())
    print(f"page under {LIMIT:,} bytes: {'yes' if size < LIMIT else 'NO'}")
    sys.exit(0 if size < LIMIT else 1)


if __name__ == "__main__":
    main()
