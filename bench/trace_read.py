"""Benchmark: reading a torch.profiler Chrome trace, zerodoctor's streaming source against loading it whole.

Three readers of the same file, each in a fresh process so that its peak resident memory is its own:
``json.load`` (the standard library, what most scripts do), ``orjson.loads`` of the whole bytes (the
fastest whole-file parser at hand) and zerodoctor's ``chrome-trace`` source (``read_batches``: the
incremental reader plus the per-step figures). Prints MB/s, the ratio to ``json.load`` and the peak RSS
of each. ``--record STEPS`` first records a real trace: ``bench/trace_job.py``, a 2-rank gloo ZeRO-3 run
on CPU profiled with shapes and stacks (about 20 MB a step), as people's large traces are.

    python bench/trace_read.py TRACE
    python bench/trace_read.py --record 30 TRACE     # writes TRACE first (~600 MB)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READERS = ("json.load", "orjson", "zerodoctor")


def read_once(reader: str, path: Path) -> None:
    """In this process: read ``path`` with ``reader``, print seconds and peak RSS as one JSON line."""
    import resource

    start = time.perf_counter()
    if reader == "json.load":
        with open(path, "rb") as f:
            count = len(json.load(f)["traceEvents"])
    elif reader == "orjson":
        import orjson

        count = len(orjson.loads(path.read_bytes())["traceEvents"])
    else:
        from zerodoctor.sources.batches import make_parser, read_batches

        parser = make_parser("chrome-trace", run_id="bench", path=path)
        batches = list(read_batches(path, parser))
        count = parser.reader.events
        assert not any(b.rejected for b in batches), [str(r) for b in batches for r in b.rejected]
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps({"reader": reader, "s": seconds, "peak_rss": peak, "events": count}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", type=Path)
    p.add_argument("--record", type=int, metavar="STEPS", help="record a real trace of this many steps first")
    p.add_argument("--one", choices=READERS, help=argparse.SUPPRESS)  # the child process's job
    args = p.parse_args()
    if args.one:
        read_once(args.one, args.trace)
        return
    if args.record:
        env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        str(ROOT / "bench" / "trace_job.py"), str(args.trace), str(args.record)],
                       check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mb = args.trace.stat().st_size / 1e6
    rows = {}
    for reader in READERS:
        done = subprocess.run([sys.executable, __file__, str(args.trace), "--one", reader], capture_output=True,
                              text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if done.returncode:
            print(f"{reader}: failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        rows[reader] = json.loads(done.stdout.strip().splitlines()[-1])
    base = rows.get("json.load")
    print(f"{args.trace.name}: {mb:.0f} MB, {next(iter(rows.values()))['events']:,} events")
    for reader, row in rows.items():
        ratio = f"  {base['s'] / row['s']:.2f}x json.load's speed" if base else ""
        print(f"  {reader:<10} {mb / row['s']:7.1f} MB/s  peak RSS {row['peak_rss'] / 1e6:7.0f} MB{ratio}")


if __name__ == "__main__":
    main()
