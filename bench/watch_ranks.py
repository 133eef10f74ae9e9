"""Benchmark: ``zerodoctor watch`` beside the largest jobs — a pass's cost per event against the rank count.

Synthetic rank files shaped like the probe's (a ``run_start`` with its host, 8 ranks a node, then one
``step`` line a step), at two sizes in the same run: the baseline (512 ranks) and the large job (4,096).
For each size: ``watch --once`` takes in the backlog (``--backlog`` steps on every rank), then
``--new`` steps are appended to every rank and one more ``watch --once`` takes them in (the live pass:
what the daemon pays every time a job of that size writes a step). A pass costs what is new: the
per-event cost of the live pass should not grow with the rank count (goal ≤ 1.5× from 512 to 4,096,
and the 4,096-rank live pass under 10 s).

One rank's device is 40 % slower from ``--slow-from`` on (others wait for it in their collectives), and
with ``--node-slow`` the 8 ranks of one node are instead; the findings of the last pass say whether the
straggler (or its node) is named, and named alone.

With ``--keep-up S``, each size then runs the daemon itself: ``watch`` (not ``--once``) beside the job while
every rank writes one step each ``--every`` seconds for S seconds, as a job of that size does. The store's
event count is read every 0.2 s; a step's lag is the time from its write to the moment all of it is stored.
A watcher that keeps up has a lag that does not grow from the first steps to the last.

    python bench/watch_ranks.py [--sizes 512 4096] [--backlog 40] [--new 4] [--slow-from 3] [--node-slow]
                                [--keep-up 30 --every 1.5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PER_NODE = 8
START = ('{"v":1,"t":%.3f,"run":"%s","rank":%d,"kind":"run_start","world_size":%d,"local_rank":%d,'
         '"host":"node%04d","zero_stage":2,"precision":"bf16","params":7000000000,'
         '"config":{"train_micro_batch_size_per_gpu":1,"zero_optimization":{"stage":2}}}\n')
STEP = ('{"v":1,"t":%.3f,"run":"%s","rank":%d,"kind":"step","step":%d,"micro_batches":1,"samples":1,'
        '"loss":%.5f,"lr":0.0001,"overflow":false,"grad_norm":1.1,"step_time_s":%.4f,"fwd_s":0.1,"bwd_s":%.4f,'
        '"optim_s":0.05,"comm_s":%.4f,"mem_allocated_bytes":10000000000,"mem_reserved_bytes":12000000000,'
        '"mem_peak_bytes":11000000000,"alloc_retries":0}\n')
# A step of 0.5 s: 0.35 s on the device, 0.1 s in collectives, 0.05 s outside the engine. The slow ranks'
# device takes 40 % longer (0.49 s); every other rank waits those 0.14 s in its collectives.
DEVICE, COMM, OUTSIDE, EXTRA = 0.35, 0.1, 0.05, 0.14


def step_line(run: str, rank: int, step: int, slow: bool, turned: bool) -> str:
    """One probe-shaped step line of ``rank``; ``turned``: the slow ranks are slow by now."""
    device = DEVICE + (EXTRA if slow and turned else 0.0)
    comm = COMM + (EXTRA if turned and not slow else 0.0)
    bwd = device + comm - 0.15  # fwd 0.1 + optim 0.05 + bwd = device + comm: the collectives run inside
    return STEP % (1e9 + step * 0.6, run, rank, step, 2.5 - step * 1e-4, device + comm + OUTSIDE, bwd, comm)


def write(run_dir: Path, ranks: int, first: int, last: int, slow: set[int], slow_from: int) -> int:
    """Steps ``first..last`` of every rank (and the run_start before step 1); returns the lines written."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = 0
    for rank in range(ranks):
        with open(run_dir / f"rank-{rank}.jsonl", "a") as out:
            if first == 1:
                out.write(START % (1e9, run_dir.name, rank, ranks, rank % PER_NODE, rank // PER_NODE))
                lines += 1
            out.writelines(step_line(run_dir.name, rank, s, rank in slow, s >= slow_from)
                           for s in range(first, last + 1))
            lines += last - first + 1
    return lines


def once(runs: Path, db: Path) -> tuple[float, str]:
    """Wall seconds of one ``watch --once`` and what it printed."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "zerodoctor", "watch", "--once", "--db", str(db), str(runs)],
                         capture_output=True, text=True, check=True)
    return time.perf_counter() - started, out.stdout


def findings(db: Path) -> list[dict]:
    """The stored run's findings, as ``status --format json`` gives them."""
    out = subprocess.run([sys.executable, "-m", "zerodoctor", "status", "--format", "json", "--db", str(db)],
                         capture_output=True, text=True, check=True)
    return [f for run in json.loads(out.stdout)["runs"] for f in run["findings"]]


def measure(folder: Path, ranks: int, args: argparse.Namespace) -> dict:
    runs, db = folder / f"runs-{ranks}", folder / f"zd-{ranks}.db"
    slow = set(range(8, 8 + PER_NODE)) if args.node_slow else {ranks // 2 + 3}
    backlog = write(runs / "job", ranks, 1, args.backlog, slow, args.slow_from)
    backlog_s, _ = once(runs, db)
    new = write(runs / "job", ranks, args.backlog + 1, args.backlog + args.new, slow, args.slow_from)
    live_s, _ = once(runs, db)
    said = [f for f in findings(db) if f["category"] == "straggler"]
    named = "; ".join(f"{f['rule']} ranks {_short(f['ranks'])}" for f in said) or "none"
    return {"ranks": ranks, "backlog": backlog, "backlog_s": backlog_s, "new": new, "live_s": live_s,
            "slow": _short(sorted(slow)), "named": named, "alone": [sorted(slow)] == [f["ranks"] for f in said]}


def keep_up(folder: Path, ranks: int, args: argparse.Namespace) -> dict:
    """The daemon beside a job of ``ranks`` writing a step on every rank each ``args.every`` seconds: each
    step's lag (write → all of it stored), the first steps' against the last ones'."""
    runs, db = folder / f"runs-{ranks}", folder / f"zd-{ranks}.db"
    first = args.backlog + args.new + 1
    said = folder / f"watch-{ranks}.log"
    with said.open("w") as log:
        watch = subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", "--db", str(db), str(runs)],
                                 stdout=subprocess.DEVNULL, stderr=log)
    try:
        base = _started(said, db, 120.0)
        written: list[tuple[float, int]] = []  # (when a step was written, events it brings the store to)
        stored: list[tuple[float, int]] = []
        step, total, next_at, end = first, base, time.monotonic(), time.monotonic() + args.keep_up
        while time.monotonic() < end or _stored(db) < total:
            now = time.monotonic()
            if now >= next_at and now < end:
                write(runs / "job", ranks, step, step, set(), 10**9)
                total += ranks
                written.append((time.monotonic(), total))
                step, next_at = step + 1, next_at + args.every
            stored.append((time.monotonic(), _stored(db)))
            if now > end + 120:
                break  # fell too far behind: the lag table says by how much
            time.sleep(0.2)
        stored.append((time.monotonic(), _stored(db)))
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=120)
    lags = [next((t - at for t, n in stored if n >= count and t >= at), float("inf")) for at, count in written]
    third = max(1, len(lags) // 3)
    behind = total - max((n for t, n in stored if t <= end), default=base)
    return {"ranks": ranks, "steps": len(written), "events": len(written) * ranks, "behind": behind,
            "lag_first": sorted(lags[:third])[third // 2], "lag_last": sorted(lags[-third:])[third // 2],
            "lag_max": max(lags)}


def _stored(db: Path) -> int:
    """Events the store holds now (its files' counts), read beside the watcher that writes them."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT COALESCE(SUM(events), 0) FROM files").fetchone()[0])
    except sqlite3.Error:
        return 0


def _started(said: Path, db: Path, timeout_s: float) -> int:
    """Wait until the watcher tails the run's files (its "tailing" line) and its store has stopped growing
    (the first pass read what was there); the store's count then."""
    deadline = time.monotonic() + timeout_s
    while "tailing" not in said.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    count = -1
    while (now := _stored(db)) != count and time.monotonic() < deadline:
        count = now
        time.sleep(1.0)
    return count


def _short(ranks: list[int]) -> str:
    return re.sub(r"\s", "", json.dumps(ranks if len(ranks) <= 3 else [ranks[0], "…", ranks[-1]], ensure_ascii=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 4096], help="rank counts; the first is the baseline")
    ap.add_argument("--backlog", type=int, default=40, help="steps per rank taken in by the first pass")
    ap.add_argument("--new", type=int, default=4, help="steps per rank appended for the live pass")
    ap.add_argument("--slow-from", type=int, default=3, help="the step from which the slow ranks are slow")
    ap.add_argument("--node-slow", action="store_true", help="the 8 ranks of node 1 are slow, not one rank")
    ap.add_argument("--keep-up", type=float, default=0.0, help="seconds of the daemon beside a live job (0: skip)")
    ap.add_argument("--every", type=float, default=1.5, help="seconds between a live job's steps")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="zd-bench-ranks-"))
    try:
        rows = [measure(folder, n, args) for n in args.sizes]
        live = [keep_up(folder, n, args) for n in args.sizes] if args.keep_up else []
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    base = rows[0]
    print(f"\nzerodoctor watch --once, {args.backlog} steps backlog then {args.new} new on every rank, slow from step "
          f"{args.slow_from}, {os.cpu_count()} CPUs (ratio: against {base['ranks']} ranks, same run)\n")
    print(f"{'ranks':>6} {'backlog ev':>11} {'backlog s':>10} {'ms/ev':>6} {'new ev':>7} {'live s':>7} {'ms/ev':>6} "
          f"{'x base':>7} {'slow':>10}  named by the last pass")
    for r in rows:
        per = 1e3 * r["live_s"] / r["new"]
        print(f"{r['ranks']:>6,} {r['backlog']:>11,} {r['backlog_s']:>10.2f} "
              f"{1e3 * r['backlog_s'] / r['backlog']:>6.3f} "
              f"{r['new']:>7,} {r['live_s']:>7.2f} {per:>6.3f} {per / (1e3 * base['live_s'] / base['new']):>7.2f} "
              f"{r['slow']:>10}  {r['named']}{' (alone)' if r['alone'] else ''}")
    if live:
        print(f"\nzerodoctor watch (the daemon) beside the job, a step on every rank each {args.every} s for "
              f"{args.keep_up:.0f} s; lag: from a step's write to all of it stored (median of the first and last "
              f"third of the steps)\n")
        print(f"{'ranks':>6} {'steps':>6} {'events':>8} {'events/s':>9} {'lag first s':>12} {'lag last s':>11} "
              f"{'lag max s':>10} {'behind at end':>14}  keeps up")
        for r in live:
            print(f"{r['ranks']:>6,} {r['steps']:>6} {r['events']:>8,} {r['ranks'] / args.every:>9,.0f} "
                  f"{r['lag_first']:>12.2f} {r['lag_last']:>11.2f} {r['lag_max']:>10.2f} {r['behind']:>14,}  "
                  f"{'yes' if r['lag_last'] <= max(2 * r['lag_first'], args.every) else 'no: the lag grows'}")


if __name__ == "__main__":
    main()
