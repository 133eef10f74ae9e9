"""A hang named from the console alone, for real: a 2-rank DeepSpeed run (steps logged at INFO with their
clock time) where rank 1 stops before its forward at step 3 and, like a loader waiting for a shard, logs a
warning every 2 s, while rank 0 waits in the all-reduce. The user stops the job (SIGTERM, as Slurm's scancel
does) and pastes the console: the steps stopped while the log went on, so it is a stall (ZD714), at step 3."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.probe.conftest import run_command, run_env
from zerodoctor.sources.text import clock

CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "log_level": "info",
          "steps_per_print": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 1}}
WINDOW_S = 20  # ZERODOCTOR_HANG_WITHIN_S for the diagnosis: the test waits a window and a little more
STALL_SEEN_S = WINDOW_S + 6


def _went_on_for(console: Path) -> float:
    """Seconds between the console's last step line and its last stamped line after it (0 if none)."""
    last_step = last = None
    for line in console.read_text(errors="replace").splitlines() if console.exists() else []:
        t = clock(line.split("]:", 1)[-1].lstrip())
        if t is None:
            continue
        if "step=" in line:
            last_step = t
        last = t
    return last - last_step if last_step is not None and last is not None else 0.0


def test_a_stall_while_the_log_goes_on_is_named_from_the_console(tmp_path) -> None:
    command = run_command(tmp_path, "stall", CONFIG, "--steps", "8", "--stall-rank", "1", "--stall-at", "3",
                          "--stall-s", "600", "--stall-say-every", "2")
    job = subprocess.Popen(command, cwd=ROOT, env=run_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    console = tmp_path / "stall" / "console.log"
    try:
        deadline = time.monotonic() + 400
        while _went_on_for(console) < STALL_SEEN_S and job.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        assert _went_on_for(console) >= STALL_SEEN_S, console.read_text(errors="replace")[-3000:]
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(120)
    pasted = tmp_path / "pasted.log"
    pasted.write_bytes(console.read_bytes())
    proc = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                           str(pasted)], capture_output=True, text=True, timeout=180, cwd=ROOT,
                          env=run_env({"ZERODOCTOR_HANG_WITHIN_S": str(WINDOW_S)}))
    assert proc.returncode == 0, proc.stderr
    found = {f["rule"]: f for f in json.loads(proc.stdout)["findings"]}
    assert "ZD714" in found, (sorted(found), pasted.read_text(errors="replace")[-3000:])
    assert found["ZD714"]["steps"] == [3, 3]
    assert found["ZD714"]["evidence"]["hang.log_stalled_s"] >= STALL_SEEN_S - 1
