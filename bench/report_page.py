"""Benchmark: the HTML report of a long, wide run stays small, and reading its series stays cheap.

Stores a run of STEPS optimizer steps × RANKS ranks through the real ingest path (SQLite file,
every step field, an overflow every 997 steps plus a burst, one straggler rank, an OOM on every
rank at the end), then measures against baselines taken in the same run:

- the page ``diagnose --format html`` would write (``report.html.to_html`` on the real series),
  against the same per-step data at full resolution as compact JSON (what a page without
  downsampling would have to carry);
- ``store.series.read_series`` (bucketing the rank-merged steps), against one plain read of the
  run's step chunks (every row decoded, loss summed).

The page must stay under 5 MB. ``python bench/report_page.py [--steps 100000 --ranks 64]``
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zerodoctor.report.html import to_html  # noqa: E402
from zerodoctor.report.model import Report  # noqa: E402
from zerodoctor.sources.batches import Batch  # noqa: E402
from zerodoctor.store import files as stored_files  # noqa: E402
from zerodoctor.store.db import open_engine  # noqa: E402
from zerodoctor.store.ingest import Ingestor  # noqa: E402
from zerodoctor.store import steps  # noqa: E402
from zerodoctor.store.series import COLUMNS, read_series  # noqa: E402

LIMIT = 5_000_000
CONFIG = {"fp16": {"enabled": True, "min_loss_scale": 1}, "zero_optimization": {"stage": 3}}


def fill(engine, n_steps: int, ranks: int) -> int:  # noqa: ANN001 - SQLAlchemy Engine
    rng = random.Random(0)
    ingestor = Ingestor()
    src = Path(tempfile.mkdtemp()) / "rank-0.jsonl"
    src.write_text("")
    burst = set(range(n_steps * 3 // 4, n_steps * 3 // 4 + 40))
    with engine.begin() as conn:
        file_id = stored_files.register(conn, src, "jsonl")["id"]
    batch: list[dict] = []
    scale = 65536.0
    for n in range(1, n_steps + 1):
        overflow = n % 997 == 0 or n in burst
        scale = max(scale / 2, 1.0) if overflow else scale
        for r in range(ranks):
            straggler = r == 17
            batch.append({"v": 1, "t": 1000.0 + n, "run": "bench", "rank": r, "kind": "step", "step": n,
                          "micro_batches": 4, "samples": 8, "loss": 3.0 * (1 + n) ** -0.1 + rng.random() * 0.05,
                          "lr": 1e-4, "loss_scale": scale, "overflow": overflow, "grad_norm": 1 + rng.random(),
                          "step_time_s": 0.5, "fwd_s": 0.1 * (1.5 if straggler else 1), "bwd_s": 0.2,
                          "optim_s": 0.05, "comm_s": 0.05 if straggler else 0.15 + rng.random() * 0.01,
                          "mem_allocated_bytes": 40_000_000_000 + n * 10_000, "mem_reserved_bytes": 60_000_000_000,
                          "mem_peak_bytes": 50_000_000_000 + rng.randrange(10**9)})
        if len(batch) >= 50_000 or n == n_steps:
            with engine.begin() as conn:
                ingestor.add(conn, file_id, Batch.of(batch, end=n, last_line=n))
            batch = []
    ooms = [{"v": 1, "t": 2000.0 + n_steps, "run": "bench", "rank": r, "kind": "oom", "step": n_steps + 1,
             "requested_bytes": 2 << 30, "reserved_bytes": 60_000_000_000} for r in range(ranks)]
    with engine.begin() as conn:
        ingestor.add(conn, file_id, Batch.of(ooms, end=n_steps + 1, last_line=n_steps + 1))
        return ingestor.run_id(conn, "bench")


def full_resolution_json(engine, run_id: int) -> int:  # noqa: ANN001
    """Bytes of every merged step's columns as compact JSON: the page's baseline."""
    with engine.connect() as conn:
        rows = [row for block in steps.merged_steps(conn, run_id, {c: "max" for c in COLUMNS})
                for row in zip(*block.columns.values())]
    return len(json.dumps(rows, separators=(",", ":")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--keep", type=Path, help="write the page here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_engine(Path(tmp) / "bench.db")
        started = time.perf_counter()
        run_id = fill(engine, args.steps, args.ranks)
        print(f"stored {args.steps} steps x {args.ranks} ranks in {time.perf_counter() - started:.1f} s")

        started = time.perf_counter()
        with engine.connect() as conn:
            rows = steps.rows_of(conn, run_id)
            loss_sum = float(rows.values["loss"].sum())
        scan_s = time.perf_counter() - started
        started = time.perf_counter()
        with engine.connect() as conn:
            series = read_series(conn, run_id)
        series_s = time.perf_counter() - started

        report = Report(configs={"bench": CONFIG}, series={"bench": series})
        started = time.perf_counter()
        page = to_html(report)
        page_s = time.perf_counter() - started
        baseline = full_resolution_json(engine, run_id)
        engine.dispose()
    if args.keep:
        args.keep.write_text(page)
    size = len(page.encode())
    print(f"{'what':<44}{'value':>14}{'baseline':>14}{'ratio':>8}")
    print(f"{'page bytes (vs full-resolution JSON)':<44}{size:>14,}{baseline:>14,}{size / baseline:>8.3f}")
    print(f"{'read_series s (vs one read of the chunks)':<44}{series_s:>14.2f}{scan_s:>14.2f}{series_s / scan_s:>8.2f}")
    print(f"{'to_html s':<44}{page_s:>14.3f}")
    print(f"buckets {len(series.lo)}, overflows kept {len(series.overflows)}, OOMs kept {len(series.ooms)}; "
          f"the plain read: {rows.n} rows, loss sum {loss_sum:.1f}")
    print(f"page under {LIMIT:,} bytes: {'yes' if size < LIMIT else 'NO'}")
    sys.exit(0 if size < LIMIT else 1)


if __name__ == "__main__":
    main()
