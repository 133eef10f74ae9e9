"""Benchmark: ``watch --metrics`` — the exporter's CPU per scrape with 64 ranks, and whether scrapes slow a look.

One process holds a real ``Watcher`` (SQLite store, WAL) over a run of 64 rank files shaped like the probe's
(``livejob.STEP``: loss, loss scale, step time and its phases, memory), with ``LiveMetrics`` served by
``prometheus_client`` on loopback. Scrapes come from another process (its CPU is not the exporter's).

1. publish: building the series on the watcher's thread after a look (``Watcher.publish``), after new steps and idle.
2. scrape: the watch process's CPU (every thread: the server's included) per ``/metrics`` served, idle between looks.
3. looks: ``--rounds`` looks, each over ``--steps`` new steps per rank, first without scrapes (the baseline,
   measured in the same run), then with another process scraping once a second (15 times Prometheus's default),
   then back to back (the worst case). The ratio is what the scrapes cost ingest: CPU shared, never a wait; the
   scrape latencies measured during the back-to-back looks show a scrape is answered while a look runs.

    python bench/metrics_scrape.py [--rounds 6] [--steps 300] [--scrapes 200]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from livejob import FILES, STEP

SCRAPER = r"""
import os, sys, time, urllib.request
url, mode_file, out = sys.argv[1], sys.argv[2], sys.argv[3]
lat = []  # (mode, seconds)
while True:
    mode = open(mode_file).read().strip()
    if mode == "stop":
        break
    if mode == "off":
        time.sleep(0.01)
        continue
    t = time.perf_counter()
    urllib.request.urlopen(url, timeout=30).read()
    lat.append((mode, time.perf_counter() - t))
    time.sleep(max(0.0, float(mode) - lat[-1][1]))
open(out, "w").write("\n".join(f"{m} {s}" for m, s in lat))
"""


def append_steps(run_dir: Path, first: int, count: int) -> int:
    now = time.time()
    for rank in range(FILES):
        with open(run_dir / f"rank-{rank}.jsonl", "a") as f:
            f.write("".join(STEP % (now, run_dir.name, rank, s, 2.5 - s * 1e-6) for s in range(first, first + count)))
    return FILES * count


def set_mode(mode_file: Path, mode: str) -> None:
    """Written whole (a new file renamed over the old): the scraper never reads a half-written mode."""
    tmp = mode_file.with_suffix(".tmp")
    tmp.write_text(mode)
    os.replace(tmp, mode_file)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def scrape_once(url: str) -> int:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as resp:
        return len(resp.read())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="looks timed with and without scrapes, each")
    ap.add_argument("--steps", type=int, default=300, help="new steps per rank before each look")
    ap.add_argument("--scrapes", type=int, default=200, help="scrapes timed for the CPU per scrape")
    args = ap.parse_args()

    from zerodoctor.pipeline import rules_from
    from zerodoctor.store.db import open_engine
    from zerodoctor.watch.daemon import Watcher
    from zerodoctor.watch.metrics import LiveMetrics, serve

    folder = Path(tempfile.mkdtemp(prefix="zd-bench-metrics-"))
    run_dir = folder / "runs" / "bench-64"
    run_dir.mkdir(parents=True)
    engine = open_engine(folder / "runs" / "zerodoctor.db")
    watcher = Watcher(engine, [folder / "runs"], rules_from(), lambda *said: None, metrics=LiveMetrics())
    server = serve(watcher.metrics, "127.0.0.1", 0)
    url = "http://%s:%d/metrics" % server.address
    step = 1
    try:
        step += args.steps
        append_steps(run_dir, 1, args.steps)
        watcher.look()  # the files found, the run's view made: every later look costs what is new

        publishes, idle = [], []  # after a step of every rank (the series built again), and with nothing new
        for _ in range(20):
            append_steps(run_dir, step, 1)
            step += 1
            watcher.ingest()
            for kept in (publishes, idle):
                started = time.perf_counter()
                watcher.publish(force=True)
                kept.append(time.perf_counter() - started)
        size = scrape_once(url)
        series = sum(1 for line in open_metrics(url) if line and not line.startswith("#"))

        cpu_before, wall_before = cpu_s(), time.perf_counter()
        scraper_cpu = run_scraper(url, folder, count=args.scrapes)
        per_scrape_cpu = (cpu_s() - cpu_before) / args.scrapes
        per_scrape_wall = (time.perf_counter() - wall_before) / args.scrapes

        # Rounds interleave the three modes (no scrape, one a second, back to back), so a machine that gets
        # busier, or a run whose looks grow, weighs on each mode alike.
        mode_file, out = folder / "mode", folder / "lat"
        set_mode(mode_file, "off")
        scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, url, str(mode_file), str(out)])
        looks: dict[str, list[float]] = {"off": [], "1.0": [], "0": []}
        for _ in range(args.rounds):
            for mode in looks:
                append_steps(run_dir, step, args.steps)
                step += args.steps
                set_mode(mode_file, mode)
                time.sleep(0.3)
                started = time.perf_counter()
                watcher.look()
                looks[mode].append(time.perf_counter() - started)
                set_mode(mode_file, "off")
        set_mode(mode_file, "stop")
        scraper.wait(timeout=60)
        lat = sorted(float(s) for m, s in (line.split() for line in out.read_text().splitlines()) if m == "0")
    finally:
        server.close()
        watcher.close()
        engine.dispose()
        shutil.rmtree(folder, ignore_errors=True)

    events = FILES * args.steps
    q, p, b = (statistics.median(looks[mode]) for mode in ("off", "1.0", "0"))
    print(f"\nzerodoctor watch --metrics, {FILES} ranks, {os.cpu_count()} CPUs, {series} series, "
          f"{size:,} bytes per scrape (scraper process: {scraper_cpu:.2f} s CPU)\n")
    print(f"{'measure':<62} {'value':>12} {'baseline':>12} {'ratio':>7}")
    print(f"{'publish after a step of every rank, ms, median of 20':<62} {statistics.median(publishes) * 1e3:>12.2f}")
    print(f"{'publish with nothing new, ms':<62} {statistics.median(idle) * 1e3:>12.2f}")
    print(f"{'scrape: watch CPU per scrape, ms (' + str(args.scrapes) + ' scrapes)':<62} "
          f"{per_scrape_cpu * 1e3:>12.2f}")
    print(f"{'scrape: wall per scrape, ms':<62} {per_scrape_wall * 1e3:>12.2f}")
    look = f"look over {events} new steps, s (median of {args.rounds})"
    print(f"{look + ', a scrape a second':<62} {p:>12.3f} {q:>12.3f} {p / q:>7.2f}   (baseline: no scrape)")
    print(f"{'  ingest events/s':<62} {events / p:>12,.0f} {events / q:>12,.0f} {q / p:>7.2f}")
    print(f"{look + ', scraped back to back':<62} {b:>12.3f} {q:>12.3f} {b / q:>7.2f}")
    print(f"{'  ingest events/s':<62} {events / b:>12,.0f} {events / q:>12,.0f} {q / b:>7.2f}")
    print(f"{'scrapes answered during those looks':<62} {len(lat):>12}")
    print(f"{'  scrape latency p50 / max, ms':<62} {statistics.median(lat) * 1e3:>12.1f} {lat[-1] * 1e3:>12.1f}"
          f"   (a look takes {b * 1e3:.0f} ms: a scrape waiting for one would take that long)")


def open_metrics(url: str) -> list[str]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read().decode().splitlines()


def run_scraper(url: str, folder: Path, *, count: int) -> float:
    """``count`` scrapes back to back from another process; returns that process's CPU seconds."""
    code = f"import urllib.request\nfor _ in range({count}): urllib.request.urlopen({url!r}, timeout=30).read()\n"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=folder)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


if __name__ == "__main__":
    main()
