"""Benchmark: how soon ``watch`` names a stalled rank, and whether a healthy run with long evaluations raises any hang.

Real 2-rank DeepSpeed runs on CPU (gloo) under ``zerodoctor run``, ``zerodoctor watch`` beside each:

* stall: rank 1 stops before its forward at step 8 for ``--stall-s`` seconds; time to detect is
  from the moment it left step 8 (its own heartbeat's ``since_t``) to the line ``watch`` prints
  naming it (ZD702), against the promise (60 s) and the run's median step measured in the same run;
* soak: every rank does ``--step-s`` of host work per step and evaluates for ``--eval-s`` every
  ``--eval-every-s``; false alarms are error-level hang findings (ZD702/703/705/706) ``watch`` prints.

    python bench/hang.py            # the issue's soak: 10 min, a 90 s evaluation every 3 min
    python bench/hang.py --quick    # 150 s soak, one 65 s evaluation; the stall test is the same
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 2, "reduce_bucket_size": 3000, "allgather_bucket_size": 3000}}
ERRORS = ("ZD702", "ZD703", "ZD705", "ZD706")


def watched_run(work: Path, name: str, *train_args: str) -> tuple[list[tuple[float, str]], Path]:
    """Run training under ``zerodoctor run`` with ``watch`` beside it; watch's lines, stamped, and the run dir."""
    runs = work / name
    runs.mkdir(parents=True)
    (work / f"{name}.json").write_text(json.dumps(CONFIG))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "COLUMNS": "300"}
    watch = subprocess.Popen([sys.executable, "-m", "zerodoctor", "watch", str(runs), "--db", str(work / f"{name}.db")],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    seen: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: seen.extend((time.time(), line) for line in watch.stdout), daemon=True)
    reader.start()
    train = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(runs), "--name", name, "--",
             sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
             str(ROOT / "samples" / "train.py"), "--config", str(work / f"{name}.json"), *train_args]
    subprocess.run(train, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    time.sleep(8)  # the recovery's finding, judged on the watch's timer
    watch.terminate()
    watch.wait(timeout=60)
    reader.join(timeout=5)
    return seen, runs / name


def events(run_dir: Path, rank: int, kind: str) -> list[dict]:
    lines = (run_dir / f"rank-{rank}.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def stall(work: Path, stall_s: float) -> dict:
    seen, run_dir = watched_run(work, "stall", "--steps", "14", "--loader", "--stall-rank", "1", "--stall-at", "8",
                                "--stall-s", str(stall_s))
    began = next(b["since_t"] for b in events(run_dir, 1, "heartbeat") if b["phase"] == "user" and b["last_step"] == 8)
    named = next((t for t, line in seen if "ZD702" in line and "rank 1" in line), None)
    step = statistics.median(e["step_time_s"] for e in events(run_dir, 0, "step")[1:])
    return {"began": began, "named": named, "ttd": None if named is None else named - began, "step": step,
            "recovered": any("ZD706" in line for _, line in seen)}


def soak(work: Path, minutes: float, eval_s: float, eval_every_s: float, step_s: float) -> dict:
    steps = int(minutes * 60 / step_s)
    seen, run_dir = watched_run(work, "soak", "--steps", str(steps), "--host-work-s", str(step_s),
                                "--eval-every", str(int(eval_every_s / step_s)), "--eval-s", str(eval_s))
    beats = events(run_dir, 0, "heartbeat")
    evals = {b["since_t"] for b in beats if b["phase"] == "eval"}
    evaluating = {b["since_t"]: b["t"] - b["since_t"] for b in beats if b["phase"] == "eval"}
    steps = events(run_dir, 0, "step")
    return {"false_alarms": [line for _, line in seen if any(code in line for code in ERRORS)],
            "busy_named": sum("ZD704" in line for _, line in seen), "evaluations": len(evals),
            "longest_eval": max(evaluating.values(), default=0.0), "last_step": steps[-1]["step"],
            "wall": steps[-1]["t"] - steps[0]["t"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="150 s soak with one 65 s evaluation (for a shared machine)")
    p.add_argument("--stall-s", type=float, default=70.0, help="how long rank 1 stalls")
    args = p.parse_args()
    # the soak's steps take `minutes` of host work; its evaluations come on top
    minutes, eval_s, every = (2.5, 65.0, 75.0) if args.quick else (10.0, 90.0, 180.0)
    with tempfile.TemporaryDirectory(prefix="zerodoctor-bench-hang-") as tmp:
        s = stall(Path(tmp), args.stall_s)
        k = soak(Path(tmp), minutes, eval_s, every, step_s=0.1)
    print(f"{'stall':<34} {'value':>10} {'ratio to the promise (60 s)':>28} {'in median steps':>16}")
    if s["ttd"] is None:
        print(f"{'time to detect':<34} {'missed':>10}")
    else:
        print(f"{'time to detect (s)':<34} {s['ttd']:>10.1f} {s['ttd'] / 60:>28.2f} {s['ttd'] / s['step']:>16.0f}")
    print(f"{'median step of the run (s)':<34} {s['step']:>10.4f}")
    print(f"{'recovery named (ZD706)':<34} {str(s['recovered']):>10}")
    print(f"\nsoak ({'quick: ' if args.quick else ''}{minutes:g} min of steps, a {eval_s:g} s evaluation after "
          f"every {every:g} s of them)")
    print(f"{'wall time, first to last step (s)':<34} {k['wall']:>10.0f}")
    print(f"{'evaluations run':<34} {k['evaluations']:>10}")
    print(f"{'longest evaluation seen (s)':<34} {k['longest_eval']:>10.0f}")
    print(f"{'false alarms (error-level hangs)':<34} {len(k['false_alarms']):>10}")
    print(f"{'busy named (ZD704, info, once)':<34} {k['busy_named']:>10}")
    print(f"{'steps completed':<34} {k['last_step']:>10}")
    for line in k["false_alarms"]:
        print("  " + line)


if __name__ == "__main__":
    main()
