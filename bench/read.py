"""Benchmark: the source stage on events JSONL (``read_batches``), against floors measured in the same run.

Three logs of 8 ranks: step lines only (as ``bench/diagnose.py`` writes them), steps with a
``comm`` line every 300 lines (the worst case for decoding slices of lines at once: nearly
every slice holds one other line), and steps with a ``comm`` line for every two steps of each
rank (a probe's real mix: per-op totals each second). For each: reading and splitting the
file in chunks (the floor of any reader), ``orjson.loads`` of each line, msgspec decoding each
line into a ``StepRecord`` (what ``read_batches`` makes, without its offsets, line numbers,
quarantine and the schema's judgement of other kinds), the parser fed a line at a time (the
way ``read_batches`` read until it took blocks, less its offsets and bookkeeping), and
``read_batches`` itself. Best of ``--repeat`` wall times, taken in turn. Target: ≤ 1.6 s for 1M step lines through
``read_batches``.

    python bench/read.py [--events 1000000] [--repeat 3] [--log FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import orjson

from zerodoctor.events import StepRecord
from zerodoctor.sources.batches import make_parser, read_batches

sys.path.insert(0, str(Path(__file__).parent))
from diagnose import RANKS, write_log

CHUNK = 1 << 20


def write_mixed(path: Path, events: int, every: int) -> None:
    """``write_log``'s steps with a ``comm`` line after every ``every``-th line."""
    steps = path.with_suffix(".steps")
    write_log(steps, events)
    with steps.open("rb") as src, path.open("wb") as out:
        for i, line in enumerate(src, 1):
            out.write(line)
            if i % every == 0:
                out.write(orjson.dumps({"v": 1, "t": i * 0.1, "run": "bench", "rank": i % RANKS, "kind": "comm",
                                        "op": "all_reduce", "step": i // RANKS, "count": 12, "bytes": 1 << 27,
                                        "total_s": 0.05, "interval_s": 1.0}) + b"\n")
    steps.unlink()


def _chunked_lines(path: Path):  # noqa: ANN202 - yields lists of lines
    with path.open("rb") as f:
        pending = b""
        while data := f.read(CHUNK):
            lines = data.split(b"\n")
            lines[0] = pending + lines[0]
            pending = lines.pop()
            yield lines


def read_split(path: Path) -> int:
    return sum(len(lines) for lines in _chunked_lines(path))


def orjson_each(path: Path) -> int:
    loads = orjson.loads
    return sum(len([loads(line) for line in lines]) for lines in _chunked_lines(path))


def msgspec_each(path: Path) -> int:
    decode, made = msgspec.json.Decoder(StepRecord).decode, 0
    for lines in _chunked_lines(path):
        records = []
        for line in lines:
            try:
                records.append(decode(line))
            except msgspec.DecodeError:
                pass  # another kind: not judged here
        made += len(records)
    return made


def line_at_a_time(path: Path) -> int:
    """A line at a time, msgspec first and the schema for what it refuses, as ``read_batches`` read
    before blocks; what it makes kept 20,000 lines at a time as a batch keeps it."""
    parser, decode, made, kept = make_parser("jsonl"), msgspec.json.Decoder(StepRecord).decode, 0, []
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            try:
                kept.append(decode(line))
            except msgspec.DecodeError:
                kept += parser.feed(line)
            if number % 20_000 == 0:
                made, kept = made + len(kept), []
    return made + len(kept)


def source_stage(path: Path) -> int:
    return sum(len(b.steps) + len(b.events) for b in read_batches(path, make_parser("jsonl")))


def best_of(runs: tuple, path: Path, repeat: int) -> list[float]:
    """The best wall time of each run over ``repeat`` rounds, taken in turn so that a busy machine
    weighs on all of them alike."""
    times = [[] for _ in runs]
    for _ in range(repeat):
        for run, spent in zip(runs, times):
            start = time.perf_counter()
            run(path)
            spent.append(time.perf_counter() - start)
    return [min(spent) for spent in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000,
                    help="step events in the step-only log (the mixed: a quarter)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--log", type=Path, help="read this events JSONL instead of writing the three logs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        if args.log:
            logs = {args.log.name: args.log}
        else:
            logs = {"steps": Path(scratch) / "steps.jsonl", "comm every 300": Path(scratch) / "rare.jsonl",
                    "comm every 3": Path(scratch) / "mixed.jsonl"}
            write_log(logs["steps"], args.events)
            write_mixed(logs["comm every 300"], args.events // 4, 300)
            write_mixed(logs["comm every 3"], args.events // 4, 3)
        print(f"{'log':<16} {'lines':>8} {'MiB':>6} {'read+split':>11} {'orjson':>7} {'msgspec':>8} {'per line':>9} "
              f"{'read_batches':>13} {'events/s':>9} {'x split':>8} {'x msgspec':>10} {'x per line':>11}")
        for name, path in logs.items():
            lines = read_split(path)
            events = source_stage(path)
            split, orj, msg, per_line, stage = best_of(
                (read_split, orjson_each, msgspec_each, line_at_a_time, source_stage), path, args.repeat)
            print(f"{name:<16} {lines:>8} {path.stat().st_size / 2**20:>6.0f} {split:>10.2f}s {orj:>6.2f}s "
                  f"{msg:>7.2f}s {per_line:>8.2f}s {stage:>12.2f}s {events / stage:>9.0f} {stage / split:>8.2f} "
                  f"{stage / msg:>10.2f} {stage / per_line:>11.2f}")


if __name__ == "__main__":
    main()
