"""Benchmarks' live job: 64 rank files appended at a training-like pace, and a ``zerodoctor watch`` beside them.

Shared by ``bench/watch.py`` and ``bench/watch_long.py``; run as ``livejob.py --writer ...`` it is
one writer process.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

FILES = 64
WRITERS = 4
STEP = ('{"v":1,"t":%.3f,"run":"%s","rank":%d,"kind":"step","step":%d,"micro_batches":4,"samples":8,'
        '"loss":%.5f,"lr":0.0001,"loss_scale":65536.0,"overflow":false,"grad_norm":1.1,"step_time_s":0.5,'
        '"fwd_s":0.1,"bwd_s":0.2,"optim_s":0.05,"comm_s":0.15,"mem_allocated_bytes":10000000000,'
        '"mem_reserved_bytes":12000000000,"mem_peak_bytes":11000000000,"alloc_retries":0}\n')
NAN_STEP = '{"v":1,"t":%.3f,"run":"%s","rank":0,"kind":"step","step":%d,"loss":NaN,"samples":8}\n'


# -- writers (this file run with --writer) ---------------------------------------------

def writer(run_dir: Path, ranks: range, steps: int, steps_per_s: float, first_step: int) -> None:
    """Append ``steps`` step lines to each rank file; 0 steps/s means as fast as possible."""
    run_dir.mkdir(parents=True, exist_ok=True)
    outs = {r: open(run_dir / f"rank-{r}.jsonl", "a") for r in ranks}  # noqa: SIM115 - closed after the loop
    started = time.monotonic()
    chunk = 200 if steps_per_s == 0 else 1
    for base in range(first_step, first_step + steps, chunk):
        now = time.time()
        for rank, out in outs.items():
            out.write("".join(STEP % (now, run_dir.name, rank, s, 2.5 - s * 1e-6)
                              for s in range(base, min(base + chunk, first_step + steps))))
            out.flush()
        if steps_per_s:
            ahead = started + (base - first_step + 1) / steps_per_s - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    for out in outs.values():
        out.close()


def start_writers(run_dir: Path, steps: int, steps_per_s: float, first_step: int = 1) -> list[subprocess.Popen]:
    per = FILES // WRITERS
    return [subprocess.Popen([sys.executable, __file__, "--writer", str(run_dir), str(w * per), str(per), str(steps),
                              str(steps_per_s), str(first_step)]) for w in range(WRITERS)]


class Watch:
    """A ``zerodoctor watch`` subprocess whose stdout lines are time-stamped as they arrive."""

    def __init__(self, runs: Path, db: Path | None = None) -> None:
        store = ["--db", str(db)] if db else []  # default: runs/zerodoctor.db
        self.proc = subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", "-q", *store, str(runs)],
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.ps = psutil.Process(self.proc.pid)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.time(), line))

    def rss_mib(self) -> float:
        return self.ps.memory_info().rss / 2**20

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=60)


def wait_until(check, timeout: float, every: float = 0.05) -> float:  # noqa: ANN001 - a callable
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark: timed out after {timeout}s")
        time.sleep(every)
    return time.monotonic()



def latency(runs: Path, watch: Watch, probes: int, *, settle_s: float = 1.5, timeout: float = 30) -> list[float]:
    """Seconds from a NaN step appended to its finding printed, one probe run each, sorted."""
    for i in range(probes):
        (runs / f"probe-{i}").mkdir()
        with open(runs / f"probe-{i}" / "rank-0.jsonl", "a") as f:
            f.writelines(STEP % (time.time(), f"probe-{i}", 0, s, 2.0) for s in range(1, 11))
    time.sleep(settle_s)  # the probe runs are discovered and judged healthy
    written: dict[str, float] = {}
    for i in range(probes):
        name = f"probe-{i}"
        with open(runs / name / "rank-0.jsonl", "a") as f:
            written[name] = time.time()
            f.write(NAN_STEP % (written[name], name, 11))
        time.sleep(0.5)
    wait_until(lambda: sum("ZD204" in line for _, line in watch.lines) >= probes, timeout=timeout)
    printed = {}
    for t, line in watch.lines:
        for name in written:
            if f"run {name} " in line and name not in printed:
                printed[name] = t
    return sorted(printed[n] - written[n] for n in written)

if __name__ == "__main__" and sys.argv[1:2] == ["--writer"]:
    run_dir, first_rank, count, steps, pace, first = sys.argv[2:8]
    writer(Path(run_dir), range(int(first_rank), int(first_rank) + int(count)), int(steps), float(pace), int(first))
