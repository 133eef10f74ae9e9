"""Test helper: a live rank's writes — append step lines to rank files, each line in two writes.

Usage: python writer.py RUN_DIR FILES LINES [SECONDS [FIRST_RANK]]
Writes LINES step lines to each of rank-F..F+FILES-1.jsonl (F = FIRST_RANK, default 0: another
node of the same job starts at its own first rank), round-robin, spread over about
SECONDS, splitting every line in two flushed writes so a reader can catch it half written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.watch.conftest import step_line


def main(run_dir: Path, n_files: int, n_lines: int, seconds: float, first_rank: int) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    ranks = range(first_rank, first_rank + n_files)
    # closed after the loop
    outs = [open(run_dir / f"rank-{r}.jsonl", "a", buffering=1 << 16) for r in ranks]  # noqa: SIM115
    started = time.monotonic()
    for step in range(1, n_lines + 1):
        for rank, out in zip(ranks, outs):
            line = step_line(run_dir.name, rank, step)
            cut = (step * 7 + rank) % len(line)
            out.write(line[:cut])
            out.flush()
            out.write(line[cut:])
            out.flush()
        ahead = started + seconds * step / n_lines - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    for out in outs:
        out.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    main(Path(args[0]), int(args[1]), int(args[2]), float(args[3]) if len(args) > 3 else 0.0,
         int(args[4]) if len(args) > 4 else 0)
