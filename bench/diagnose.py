"""Benchmark: ``zerodoctor diagnose`` end to end on large event logs, against the orjson floor.

Builds logs of N step events (8 ranks, memory and comm fields on every step, a run_start per
rank), then for each size: the time to merely parse the lines with orjson (the floor nothing
can beat); the time DuckDB takes for the numbers a power user would compute instead
(``read_json`` of the file, the steps merged across ranks as the signals merge them, per-rank
sums), in this process and as a fresh ``python -c`` process, start-up included (the yardstick
``diagnose`` is held to, being timed the same way); and the wall time and peak RSS of ``zerodoctor diagnose --format
json`` in a fresh process, and again with ``--jobs 1`` (no read-ahead processes: the in-process reader alone). Prints a
table; targets: ≥ 300k events/s, ≤ 1.5× DuckDB's whole process, peak RSS at 10M ≤ 1.2× at 1M.

With ``--pg URL`` (a PostgreSQL database the role may create schemas in), a second table: ``diagnose --db``
into a lasting SQLite file and into a fresh schema of that database, the same file, one after the other;
target: PostgreSQL's events/s ≥ 0.5× SQLite's.

``floor x duckdb proc`` is orjson's parse of each line against DuckDB's whole process: a reader that
decodes every line in Python cannot go below it.

    python bench/diagnose.py [--sizes 100000 1000000] [--keep DIR] [--pg URL]    # DuckDB: pip install duckdb
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from urllib.parse import quote

import orjson

RANKS = 8


def write_log(path: Path, events: int) -> None:
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
              "fp16": {"enabled": True, "loss_scale": 0}, "zero_optimization": {"stage": 3}}
    with path.open("w") as f:
        for r in range(RANKS):
            f.write(json.dumps({"v": 1, "t": 0.0, "run": "bench", "rank": r, "kind": "run_start",
                                "world_size": RANKS, "zero_stage": 3, "precision": "fp16", "config": config,
                                "params": 30_000_000}) + "\n")
        for i in range(1, events // RANKS + 1):
            overflow = i % 997 == 0
            for r in range(RANKS):
                f.write(json.dumps({
                    "v": 1, "t": i * 0.5, "run": "bench", "rank": r, "kind": "step", "step": i,
                    "micro_batches": 4, "samples": 8, "loss": 2.5 - i * 1e-6, "lr": 1e-4,
                    "loss_scale": 65536.0, "overflow": overflow, "grad_norm": 1.1 + r * 1e-3,
                    "step_time_s": 0.5, "fwd_s": 0.1, "bwd_s": 0.2, "optim_s": 0.05, "comm_s": 0.15 + (i % 7) * 0.01,
                    "mem_allocated_bytes": 10_000_000_000 + i, "mem_reserved_bytes": 12_000_000_000,
                    "mem_peak_bytes": 11_000_000_000, "alloc_retries": 0, "inactive_split_bytes": 1_000_000,
                }) + "\n")


def orjson_floor(path: Path) -> float:
    start = time.perf_counter()
    with path.open("rb") as f:
        for line in f:
            orjson.loads(line)
    return time.perf_counter() - start


DUCKDB_QUERY = """
WITH e AS (SELECT * FROM read_json(?, format = 'newline_delimited', union_by_name = true)
           WHERE kind = 'step'),
merged AS (SELECT step, max(overflow::INT) AS overflow, min(loss_scale) AS loss_scale, max(lr) AS lr,
                  max(micro_batches) AS micro_batches, max(step_time_s) AS step_time_s, avg(fwd_s) AS fwd_s,
                  avg(bwd_s) AS bwd_s, avg(optim_s) AS optim_s, avg(comm_s) AS comm_s,
                  max(alloc_retries) AS alloc_retries
           FROM e GROUP BY step),
ranks AS (SELECT rank, count(*) AS steps, sum(samples) AS samples, sum(micro_batches) AS micro_batches
          FROM e GROUP BY rank)
SELECT (SELECT count(*) FROM merged), (SELECT sum(overflow) FROM merged), (SELECT count(*) FROM ranks)
"""


def duckdb_time(path: Path) -> tuple[float, float] | None:
    """Seconds DuckDB needs for the same merged steps and per-rank sums: in this process, and as a fresh
    ``python -c`` process (import and start-up included, as ``diagnose`` is timed); None without duckdb."""
    try:
        import duckdb
    except ImportError:
        return None
    start = time.perf_counter()
    with duckdb.connect() as conn:
        conn.execute(DUCKDB_QUERY, [str(path)]).fetchall()
    inside = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import duckdb, sys; duckdb.connect().execute(sys.argv[1], [sys.argv[2]])"
                    ".fetchall()", DUCKDB_QUERY, str(path)], check=True)
    return inside, time.perf_counter() - start


# The child reports its own image's high-water mark (VmHWM): ru_maxrss, even the child's own,
# keeps the pre-exec image's (this process, DuckDB's memory included) across exec. Its read-ahead
# workers (forked from it, so their pages shared with it count in theirs too) report the largest.
_MEASURED = """
import atexit, resource, runpy, sys
def hwm():
    own = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM"))
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, own, file=sys.stderr)
atexit.register(hwm)
sys.argv = ["zerodoctor", *sys.argv[1:]]
runpy.run_module("zerodoctor", run_name="__main__")
"""


def run_diagnose(path: Path, *extra: str) -> tuple[float, float, float, int]:
    """(wall seconds, peak RSS MiB, a worker's peak RSS MiB, findings) of a fresh ``zerodoctor diagnose`` process."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _MEASURED, "diagnose", "--format", "json", "--fail-on", "never",
                           *extra, str(path)], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    findings = len(json.loads(proc.stdout)["findings"])
    workers, own = proc.stderr.split()[-2:]
    return wall, int(own) / 1024, int(workers) / 1024, findings


def into_stores(path: Path, pg_url: str, folder: Path) -> tuple[float, float]:
    """Wall seconds of ``diagnose --db`` into a new SQLite file, then into a new schema of ``pg_url``:
    the lasting stores ``watch`` keeps, where the scratch store of a plain ``diagnose`` skips fsync."""
    from sqlalchemy import create_engine

    sqlite_file = folder / f"{path.stem}.db"
    sqlite_file.unlink(missing_ok=True)
    sqlite = run_diagnose(path, "--db", str(sqlite_file))[0]
    sqlite_file.unlink()
    schema = f"zd_bench_{secrets.token_hex(4)}"
    admin = create_engine(pg_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        url = f"{pg_url}{'&' if '?' in pg_url else '?'}options={quote(f'-csearch_path={schema}')}"
        pg = run_diagnose(path, "--db", url)[0]
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()
    return sqlite, pg


def _cell(value: float | None, width: int) -> str:
    return f"{value:>{width}.2f}" if value else f"{'n/a':>{width}}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--keep", type=Path, help="write the logs here instead of a temporary folder")
    ap.add_argument("--pg", metavar="URL", help="also time diagnose --db into this PostgreSQL database and SQLite")
    ap.add_argument("--no-jobs-1", action="store_true", help="skip the --jobs 1 run (half the time at 8M events)")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="zd-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows, stores = [], []
    for size in sorted(args.sizes):
        path = folder / f"events-{size}.jsonl"
        if not path.exists():
            write_log(path, size)
        lines = size // RANKS * RANKS + RANKS
        floor = orjson_floor(path)
        duck = duckdb_time(path)
        wall, rss, worker, findings = run_diagnose(path)
        alone, same = (wall, findings) if args.no_jobs_1 else run_diagnose(path, "--jobs", "1")[::3]
        assert same == findings, "the read-ahead changed the findings"
        rows.append((lines, path.stat().st_size / 2**20, floor, duck, wall, rss, worker, findings, alone))
        if args.pg:
            stores.append((lines, *into_stores(path, args.pg, folder)))
        if not args.keep:
            os.remove(path)
    print(f"{'events':>9} {'MiB':>7} {'orjson s':>9} {'duckdb s':>9} {'duckdb proc s':>14} {'diagnose s':>11} "
          f"{'events/s':>10} {'x floor':>8} {'x duckdb proc':>14} {'floor x duckdb proc':>20} {'peak RSS MiB':>13} "
          f"{'worker MiB':>11} {'findings':>9} {'-j 1 s':>7} {'x -j 1':>7}")
    for lines, mib, floor, duck, wall, rss, worker, findings, alone in rows:
        inside, proc = duck if duck else (None, None)
        print(f"{lines:>9} {mib:>7.1f} {floor:>9.2f} {_cell(inside, 9)} {_cell(proc, 14)} {wall:>11.2f} "
              f"{lines / wall:>10.0f} {wall / floor:>8.1f} {_cell(proc and wall / proc, 14)} "
              f"{_cell(proc and floor / proc, 20)} {rss:>13.0f} {worker:>11.0f} {findings:>9} {alone:>7.2f} "
              f"{wall / alone:>7.2f}")
    if stores:
        print(f"\n{'events':>9} {'sqlite --db s':>14} {'events/s':>10} {'postgresql --db s':>18} {'events/s':>10} "
              f"{'pg x sqlite':>12}")
        for lines, sqlite, pg in stores:
            print(f"{lines:>9} {sqlite:>14.2f} {lines / sqlite:>10.0f} {pg:>18.2f} {lines / pg:>10.0f} "
                  f"{sqlite / pg:>12.2f}")


if __name__ == "__main__":
    main()
