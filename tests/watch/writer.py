"""Test helper: a live rank's writes — append step lines to rank files, each line in two writes.

Usage: python writer.py RUN_DIR FILES LINES [SECONDS]
Writes LINES step lines to each of rank-0..FILES-1.jsonl, round-robin, spread over about
SECONDS, splitting every line in two flushed writes so a reader can catch it half written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.watch.conftest import step_line  # noqa: E402


def main(run_dir: Path, n_files: int, n_lines: int, seconds: float) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    outs = [open(run_dir / f"rank-{r}.jsonl", "a", buffering=1 << 16) for r in range(n_files)]
    started = time.monotonic()
    for step in range(1, n_lines + 1):
        for rank, out in enumerate(outs):
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
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
