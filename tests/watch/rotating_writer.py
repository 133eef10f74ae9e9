"""Test helper: a rank that rotates its file the way logrotate does (rename, then a new file), while it writes.

Usage: python rotating_writer.py FILE FIRST LINES EVERY SECONDS
Appends step lines FIRST..LINES (run "rot", rank 0) to FILE over about SECONDS, and every EVERY lines renames
FILE.N → FILE.N+1 … FILE → FILE.1 and goes on in a new FILE. No generation is deleted: every line
written stays on disk, so a reader's store can be checked against all of them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.watch.conftest import step_line


def rotate(path: Path) -> None:
    generations = sorted((int(p.name.rsplit(".", 1)[1]) for p in path.parent.glob(path.name + ".*")), reverse=True)
    for n in generations:
        path.with_name(f"{path.name}.{n}").rename(path.with_name(f"{path.name}.{n + 1}"))
    path.rename(path.with_name(f"{path.name}.1"))


def main(path: Path, first: int, lines: int, every: int, seconds: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    out = open(path, "a")  # noqa: SIM115 - closed and reopened at each rotation
    for step in range(first, lines + 1):
        out.write(step_line("rot", 0, step))
        out.flush()
        if step % every == 0 and step < lines:
            out.close()
            rotate(path)
            out = open(path, "a")  # noqa: SIM115 - the new file after the rotation
        ahead = started + seconds * step / lines - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    out.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
