"""Benchmark: ``zerodoctor watch`` beside a days-long job — judgement cost and memory against history length.

A 64-rank job at one step per second is fast-forwarded through ``--days`` of history (the
real path: rank files appended, then read by ``watch --once`` into one store). At each
checkpoint (4k steps, 1 hour, 32k, 1 day, 3 days, as far as ``--days`` goes):
- ``judge``: one judgement of the run in a fresh process (load the run's view, signals,
  rules), what the daemon pays per pass once its state is warm;
- ``--once +10``: ``zerodoctor watch --once`` taking in 10 new steps of all 64 ranks, a whole
  process (the issue's own measure: 1.17 s at 4k steps and 2.56 s at 32k before this design);
- with ``--baseline DIR`` (a checkout of an older zerodoctor), the same ``--once +10`` by it.
The baseline of the ratio column is the first checkpoint of the same run: flat means ≈ 1.
Then live at the last size: 64 ranks × 1 step/s continue, a NaN step is appended to a probe
run every half second while the big run keeps arriving; latency = append → ZD204 printed;
watch's RSS at the start and end of the soak.

    python bench/watch.py --long [--days 3] [--soak 60] [--baseline /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from livejob import FILES, STEP, Watch, latency, start_writers

RUN = "job"
CHECKPOINTS = (4_000, 3_600 * 1, 32_000, 86_400, 3 * 86_400)
JUDGE = """
import sys, time
from zerodoctor.pipeline import Pipeline, rules_from
from zerodoctor.store.db import open_engine
engine = open_engine(sys.argv[1])
pipeline = Pipeline(engine, rules_from())
started = time.perf_counter()
pipeline.judge(sys.argv[2])
warm = time.perf_counter()
pipeline.judge(sys.argv[2])
print(warm - started, time.perf_counter() - warm)
"""


def append_steps(run_dir: Path, first: int, last: int) -> None:
    """Steps ``first..last`` of every rank, at one step per second of job time."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for rank in range(FILES):
        with open(run_dir / f"rank-{rank}.jsonl", "a") as out:
            out.writelines(STEP % (1e9 + s, run_dir.name, rank, s, 2.5 - s * 1e-7) for s in range(first, last + 1))


def once(runs: Path, db: Path, tree: Path | None = None) -> float:
    """Wall seconds of one ``watch --once`` (by ``tree``'s code when given)."""
    paths = [tree, *sorted((tree / "plugins").glob("*/"))] if tree else []  # its plugins too: they import it
    env = {**os.environ, **({"PYTHONPATH": os.pathsep.join(map(str, paths))} if tree else {})}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "zerodoctor", "watch", "--once", "-q", "--db", str(db), str(runs)],
                   env=env, cwd=tree or Path.cwd(), check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def judge_costs(db: Path) -> tuple[float, float]:
    """(first judgement in a fresh process, the next one) in seconds."""
    out = subprocess.run([sys.executable, "-c", JUDGE, str(db), RUN], capture_output=True, text=True, check=True)
    cold, warm = map(float, out.stdout.split())
    return cold, warm


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=3.0, help="history to fast-forward through, in days of 1 step/s")
    ap.add_argument("--soak", type=float, default=60.0, help="seconds of the live phase")
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--baseline", type=Path, help="a checkout of an older zerodoctor to time --once by, too")
    ap.add_argument("--keep", type=Path, help="work here (and keep it) instead of a temporary folder")
    args = ap.parse_args(argv)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="zd-bench-long-"))
    runs, db = folder / "runs", folder / "zd.db"
    runs.mkdir(parents=True, exist_ok=True)
    last_step = int(args.days * 86_400)
    checkpoints = sorted({c for c in CHECKPOINTS if c <= last_step} | {last_step})
    rows, done = [], 0
    for point in checkpoints:
        append_steps(runs / RUN, done + 1, point)
        started = time.perf_counter()
        once(runs, db)
        ingest_s = time.perf_counter() - started
        done = point
        cold, warm = judge_costs(db)
        append_steps(runs / RUN, done + 1, done + 10)
        done += 10
        plus10 = once(runs, db)
        old = None
        if args.baseline:
            append_steps(runs / RUN, done + 1, done + 10)
            done += 10
            old = once(runs, db, args.baseline)
        rows.append((point, (point - (rows[-1][0] if rows else 0)) * FILES / ingest_s, cold, warm, plus10, old))
        print(f"  {point} steps stored: judge {warm:.3f} s warm, --once +10 {plus10:.2f} s", flush=True)

    watch = Watch(runs, db)  # the store holding the history, not a fresh one
    writers = []
    try:
        time.sleep(5)
        writers = start_writers(runs / RUN, int(args.soak + 60), 1.0, first_step=done + 1)
        time.sleep(5)
        rss_start = watch.rss_mib()
        soak_start = time.monotonic()
        latencies = latency(runs, watch, args.probes, settle_s=3, timeout=120)
        time.sleep(max(0.0, args.soak - (time.monotonic() - soak_start)))
        rss_end = watch.rss_mib()
    finally:
        for w in writers:
            w.kill()
        watch.stop()

    base = rows[0]
    print(f"\nzerodoctor watch beside a {FILES}-rank job at 1 step/s, {os.cpu_count()} CPUs\n")
    print(f"{'steps stored':>12} {'rank-steps':>11} {'ingest ev/s':>12} {'judge cold s':>13} {'judge s':>8} "
          f"{'x first':>8} {'--once +10 s':>13} {'x first':>8} {'baseline --once s':>18}")
    for point, rate, cold, warm, plus10, old in rows:
        print(f"{point:>12,} {point * FILES:>11,} {rate:>12,.0f} {cold:>13.3f} {warm:>8.3f} {warm / base[3]:>8.2f} "
              f"{plus10:>13.2f} {plus10 / base[4]:>8.2f} {f'{old:.2f}' if old is not None else '-':>18}")
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
    print(f"\nlive at {done:,} steps × {FILES} ranks: finding latency p50 {statistics.median(latencies):.3f} s, "
          f"p95 {p95:.3f} s (target ≤ 1 s), max {latencies[-1]:.3f} s over {len(latencies)} probes")
    print(f"watch RSS {rss_start:.1f} MiB at the start of the soak, {rss_end:.1f} MiB after "
          f"{args.soak:.0f} s ({rss_end / rss_start:.2f}x)")


if __name__ == "__main__":
    main(sys.argv[1:])
