"""Soak: poisoned configs and run-directory renames mixed into live runs under one real ``zerodoctor watch``.

Issue 23's "done when": every healthy line stored once while other runs carry fp16 values DeepSpeed
refuses (and a step of -2^63), and live run directories are renamed under the watcher. Writers
append to RUNS healthy runs (4 ranks each, each line in two writes) for SECONDS; every RENAME_S one
live run directory is renamed (``mv runs/h3 runs/h3-renamed``, the writer keeps its open files);
then watch is stopped with SIGTERM, ``watch --once`` reads what is left, and the store is compared
with the lines on disk. Prints counts, no timings.

    python bench/soak_hostile.py [--runs 16] [--seconds 120] [--rename-s 5]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.watch.conftest import ENV, stored_steps  # noqa: E402
from tests.watch.test_watch_isolation import POISONS, POISON_STEPS, _write_run  # noqa: E402

WRITER = ROOT / "tests" / "watch" / "writer.py"


def written(runs: Path) -> list[tuple[str, int, int]]:
    out = []
    for path in sorted(runs.glob("*/rank-*.jsonl")):
        for line in path.read_text().splitlines(keepends=True):
            if line.endswith("\n"):
                e = json.loads(line)
                if e["kind"] == "step":
                    out.append((e["run"], e["rank"], e["step"]))
    return out


def _healthy(name: str) -> bool:
    """A live writer's run (its directory maybe renamed since: the run id is what it wrote)."""
    return re.fullmatch(r"h\d+", name) is not None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--rename-s", type=float, default=5.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="zd-soak-"))
    runs = tmp / "runs"
    runs.mkdir()
    for name, (fp16, _) in POISONS.items():
        _write_run(runs, name, fp16, list(range(1, POISON_STEPS + 1)))
    _write_run(runs, "step-int64-min", {}, [-2 ** 63, *range(1, POISON_STEPS)])
    lines_per_file = int(args.seconds * 20)
    writers = [subprocess.Popen([sys.executable, str(WRITER), str(runs / f"h{i}"), "4", str(lines_per_file),
                                 str(args.seconds)], env=ENV) for i in range(args.runs)]
    watch = subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", "-q", str(runs)], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while not all(len(list((runs / f"h{i}").glob("rank-*.jsonl"))) == 4 for i in range(args.runs)):
        time.sleep(0.1)  # every writer has opened its files: a rename from now on moves them under it
    rng = random.Random(23)
    renamed = 0
    started = time.monotonic()
    while any(w.poll() is None for w in writers):
        time.sleep(args.rename_s)
        live = [p for p in runs.iterdir() if p.is_dir() and _healthy(p.name)]
        if live and time.monotonic() - started < args.seconds:
            victim = rng.choice(live)
            victim.rename(victim.with_name(victim.name + "-renamed"))
            renamed += 1
    watch.send_signal(signal.SIGTERM)
    _, err = watch.communicate(timeout=120)
    final = subprocess.run([sys.executable, "-m", "zerodoctor", "watch", "--once", "-q", str(runs)], env=ENV,
                           capture_output=True, text=True, timeout=600)
    on_disk = [row for row in written(runs) if _healthy(row[0])]
    rows = [row for row in stored_steps(runs / "zerodoctor.db") if _healthy(row[0])]
    counts = Counter(rows)
    twice = sum(1 for n in counts.values() if n > 1)
    lost = len(set(on_disk) - set(counts))
    poisoned = Counter(r for r, _, _ in stored_steps(runs / "zerodoctor.db") if not _healthy(r))
    print(f"{args.runs} live runs x 4 ranks, {args.seconds:g} s, {renamed} renamed live, "
          f"{len(POISONS) + 1} poisoned runs beside them")
    print(f"watch exit on SIGTERM: {watch.returncode}; final --once exit: {final.returncode}; "
          f"'Traceback' in stderr: {'Traceback' in err + final.stderr}")
    print(f"healthy lines on disk {len(on_disk)}, stored {len(rows)}: {twice} stored twice, {lost} lost")
    print(f"poisoned runs' lines stored: {sum(poisoned.values())} of {(len(POISONS) + 1) * POISON_STEPS}")


if __name__ == "__main__":
    main()
