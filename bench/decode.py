"""Benchmark: decoding events JSONL per kind, against orjson's parse of the same lines in the same run.

The log is ``bench/read.py``'s probe mix (8 ranks, a ``comm`` line every third line) with a
``heartbeat`` line every 30th (a probe's every 5 s, at a step a rank every ~0.6 s). Per kind, µs per
line of: ``orjson.loads`` (the floor: parsing, no types checked), the JSONL source as it decodes
that kind (``feed_lines`` over blocks: msgspec's tagged union of every kind), and the source
before that union (a decoder of steps alone; every other kind refused by it, then pydantic), each the
best of ``--repeat`` short rounds taken in turn, CPU time of this process (a busy machine weighs on
wall time, less on CPU time). ``all, mixed`` is the log's first lines as they come. Then the whole log
once through ``read_batches``.

    python bench/decode.py [--events 200000] [--repeat 40]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import msgspec
import orjson

from zerodoctor.events import EVENT_ADAPTER, StepRecord
from zerodoctor.sources.batches import make_parser, read_batches
from zerodoctor.sources.jsonl import JsonlParser

sys.path.insert(0, str(Path(__file__).parent))
from read import RANKS, write_mixed

BLOCK = 2000  # lines per feed_lines call, as read_batches hands them over
SAMPLE = 6000  # lines of each kind decoded per round: short rounds, many of them, find the machine's quiet moments
HEARTBEAT_EVERY = 30


def write_log(path: Path, events: int) -> None:
    """``write_mixed``'s log (a comm line every third) with a heartbeat after every 30th line."""
    mixed = path.with_suffix(".mixed")
    write_mixed(mixed, events, 3)
    with mixed.open("rb") as src, path.open("wb") as out:
        for i, line in enumerate(src, 1):
            out.write(line)
            if i % HEARTBEAT_EVERY == 0:
                out.write(orjson.dumps({"v": 1, "t": i * 0.1, "run": "bench", "rank": i % RANKS, "kind": "heartbeat",
                                        "phase": "collective", "since_t": i * 0.1 - 0.02, "outer": "backward",
                                        "op": "all_reduce", "group": "0", "seq": i, "last_step": i // RANKS,
                                        "rss_bytes": 3 << 30}) + b"\n")
    mixed.unlink()


def by_kind(path: Path) -> dict[str, list[bytes]]:
    lines: dict[str, list[bytes]] = defaultdict(list)
    for line in path.read_bytes().splitlines():
        lines[orjson.loads(line)["kind"]].append(line)
    return lines


def cpu_best(runs: dict[str, tuple], repeat: int) -> dict[str, float]:
    """Per name, µs a line of ``fn(lines)``: the best of ``repeat`` rounds, every run once a round, in turn, so
    that a busy machine weighs on all alike; CPU time of this process."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeat):
        for name, (fn, lines) in runs.items():
            gc.collect()
            gc.disable()  # as timeit does: no collection the run before left due lands in this one
            start = time.process_time()
            fn(lines)
            spent = time.process_time() - start
            gc.enable()
            best[name] = min(best[name], spent / len(lines) * 1e6)
    return best


def orjson_each(lines: list[bytes]) -> None:
    loads = orjson.loads
    for line in lines:
        loads(line)


def source_now(lines: list[bytes]) -> None:
    """What the JSONL source does with these lines: ``feed_lines`` over blocks, ``feed`` what it refused."""
    parser = JsonlParser()
    for i in range(0, len(lines), BLOCK):
        _, others = parser.feed_lines(lines[i:i + BLOCK])
        for j, event in others:
            if event is None:
                parser.feed(lines[i + j])


_STEP = msgspec.json.Decoder(StepRecord).decode
_SCHEMA = EVENT_ADAPTER.validator.validate_json


def source_before(lines: list[bytes]) -> None:
    """The source before the tagged union: a decoder of steps alone over blocks, pydantic for every line it
    refused (every other kind: a refusal, then pydantic)."""
    for i in range(0, len(lines), BLOCK):
        steps: list = []
        left: list[int] = []
        decoding = map(_STEP, lines[i:i + BLOCK])
        while True:
            try:
                steps.extend(decoding)
                break
            except msgspec.DecodeError:
                left.append(len(steps) + len(left))
        for j in left:
            _SCHEMA(lines[i + j])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000, help="step events written before comm/heartbeat lines")
    ap.add_argument("--repeat", type=int, default=40, help="rounds")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "mixed.jsonl"
        write_log(path, args.events)
        kinds = by_kind(path)
        kinds["all, mixed"] = path.read_bytes().splitlines()[:SAMPLE * 3]
        runs = {(kind, fn.__name__): (fn, lines[:SAMPLE]) for kind, lines in kinds.items()
                for fn in (orjson_each, source_now, source_before)}
        best = cpu_best({f"{k} {f}": run for (k, f), run in runs.items()}, args.repeat)
        print(f"{'kind':<10} {'lines':>8} {'orjson µs':>10} {'zerodoctor µs':>14} {'x orjson':>9} "
              f"{'before µs':>10} {'x orjson':>9} {'before/now':>11}   (µs a line, CPU time, best of {args.repeat})")
        for kind, lines in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            floor, now, before = (best[f"{kind} {fn.__name__}"] for fn in (orjson_each, source_now, source_before))
            print(f"{kind:<10} {min(len(lines), SAMPLE):>8} {floor:>10.2f} {now:>14.2f} {now / floor:>9.2f} "
                  f"{before:>10.2f} {before / floor:>9.2f} {before / now:>11.2f}")
        start = time.process_time()
        lines = sum(b.step_count() + len(b.events) for b in read_batches(path, make_parser("jsonl")))
        whole = (time.process_time() - start) / lines * 1e6
        print(f"\nwhole log through read_batches, once: {lines} lines, {whole:.2f} µs a line")


if __name__ == "__main__":
    main()
