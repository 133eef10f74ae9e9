"""Cure rate: each fault a CPU run can reproduce, run for real under ``zerodoctor run --fix-and-resume``.

For every fault below, a 2-rank DeepSpeed job (gloo, ``samples/train.py``) is started under the wrapper with
its fix-and-resume policy, left to fail, be judged and be relaunched as the wrapper decides, and then read
back: the error findings of its first attempt, the fix each later attempt ran with, and whether the last
attempt trained to its last step without the first attempt's findings (cured). A fault the wrapper offers
no fix for says why: the wrapper's own outcome line, or that the job exited 0 (a first attempt that exits 0
is never judged), or that the bench stopped it after its time limit (a hang whose fix is manual).

It measures the tool's promise end to end, so it is slow (one to three minutes a fault on two idle cores)
and not part of the tests. Run it with ``DS_ACCELERATOR=cpu OMP_NUM_THREADS=1`` and a private
``TORCH_EXTENSIONS_DIR`` holding DeepSpeed's CPU ops already built (``tests/extensions.py``); ``--only``
picks faults, ``--keep DIR`` keeps their run directories to read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "samples" / "train.py"
RESUME = ("--config-arg", "--config", "--resume-arg", "--load-dir {dir} --load-tag {tag}")
TEARDOWN_ABORT = "terminate called without an active exception"

# fp32 with torch's own AdamW: no op build beyond the CPU accelerator's communication op
PLAIN = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
         "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
         "zero_optimization": {"stage": 1}}
FP16 = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
        "fp16": {"enabled": True, "initial_scale_power": 8, "hysteresis": 2, "min_loss_scale": 1}}
PINNED = {**PLAIN, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
SAVE = ("--save-every", "5", "--save-dir", "ckpt")


@dataclass(frozen=True)
class Fault:
    """One fault: the config and ``train.py`` switches that cause it, and the wrapper's policy for it."""

    name: str
    what: str
    config: dict
    steps: int
    train_args: tuple[str, ...] = ()
    policy: str = "unsafe-ok"
    options: tuple[str, ...] = ()
    stale_lock: bool = False  # a lock file left in the op's build directory, as a killed build leaves it
    limit_s: float = 420.0


FAULTS = (
    Fault("fp16-lr", "fp16 diverges while lr > 6e-4 (loss x1e9 from step 26)", FP16, 40,
          ("--width", "16", "--loss-mult", "1e9", "--loss-mult-from", "25", "--loss-mult-above-lr", "6e-4",
           "--cpu-fp16-shim", *SAVE)),
    Fault("loss-spike", "fp32 loss x1e4 from step 15 on (train.py has no one-batch switch)", PLAIN, 30,
          ("--width", "16", "--loss-mult", "1e4", "--loss-mult-from", "15", *SAVE)),
    Fault("batch-miscount", "train_batch_size 12 against 2 ranks x 4 x 1", {**PLAIN, "train_batch_size": 12}, 10,
          ("--width", "16", *SAVE), options=("--allow-restart-from-scratch",)),
    Fault("string-clipping", 'gradient_clipping: "auto" in a plain DeepSpeed config',
          {**PLAIN, "gradient_clipping": "auto"}, 10, ("--width", "16", *SAVE),
          options=("--allow-restart-from-scratch",)),
    Fault("pinned-host-oom", "rank 1 out of host memory at step 5 while offloaded states are pinned", PINNED, 8,
          ("--width", "16", "--crash", "host-memory", "--crash-at", "5", "--crash-while-pinned",
           "--save-every", "2", "--save-dir", "ckpt"), policy="safe"),
    Fault("straggler", "rank 1's loader 0.3 s slower per batch", PLAIN, 20,
          ("--width", "16", "--slow-data-rank", "1", "--slow-data-s", "0.3", *SAVE)),
    Fault("stale-build-lock", "a lock left in the communication op's build directory", PLAIN, 10,
          ("--width", "16", *SAVE), stale_lock=True, limit_s=150.0),
)


@dataclass
class Row:
    fault: Fault
    first: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    cured: str = ""
    attempts: int = 0
    wall_s: float = 0.0


def _descendants(pid: int) -> list[int]:
    """The wrapper's process tree (torchrun starts each rank in a session of its own, so walk parents)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, grown = {pid}, True
    while grown:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree |= more
        grown = bool(more)
    return sorted(tree)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the wrapper (it forwards it to the job and restarts nothing), SIGKILL to the tree 60 s on."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        for pid in reversed(_descendants(proc.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=60)


def _diagnose(attempt: Path) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                           str(attempt)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    try:
        return json.loads(done.stdout)["findings"]
    except (ValueError, KeyError):
        return []


def _errors(findings: list[dict]) -> list[str]:
    return sorted({f["rule"] for f in findings if f.get("severity") == "error"})


def _named(findings: list[dict]) -> list[str]:
    """The errors, then the warnings marked as such: what a person reading the first attempt is told."""
    warnings = sorted({f["rule"] for f in findings if f.get("severity") == "warning"})
    return _errors(findings) + [f"{rule} (warning)" for rule in warnings]


def _last_step(attempt: Path) -> int:
    steps = [0]
    rank0 = attempt / "rank-0.jsonl"
    if rank0.exists():
        for line in rank0.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("kind") == "step":
                steps.append(int(event.get("step") or 0))
    return max(steps)


def run_fault(fault: Fault, work: Path) -> Row:
    """Run one fault under the wrapper in ``work`` and read its outcome back."""
    work.mkdir(parents=True)
    (work / "ds.json").write_text(json.dumps(fault.config, indent=2))
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    if fault.stale_lock:
        ext = work / "ext"
        shutil.copytree(os.environ["TORCH_EXTENSIONS_DIR"], ext)
        (ext / "deepspeed_shm_comm" / "lock").touch()
        env["TORCH_EXTENSIONS_DIR"] = str(ext)
    command = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(work / "runs"), "--name", "job",
               f"--fix-and-resume={fault.policy}", *RESUME, *fault.options, "--",
               sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(TRAIN), "--config", "ds.json", "--steps", str(fault.steps), *fault.train_args]
    started = time.monotonic()
    with open(work / "wrapper.log", "wb") as log:
        proc = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=fault.limit_s)
            stopped = False
        except subprocess.TimeoutExpired:
            _stop(proc)
            stopped = True
    row = Row(fault, wall_s=time.monotonic() - started)
    job = work / "runs" / "job"
    trail_path = job / "resume.json"
    trail = json.loads(trail_path.read_text()) if trail_path.exists() else {"attempts": []}
    attempts = sorted(job.glob("attempt-*"), key=lambda p: int(p.name.split("-")[1]))
    row.attempts = len(attempts)
    recorded = trail["attempts"]
    first = recorded[0]["findings"] if recorded and recorded[0].get("findings") else (
        _diagnose(attempts[0]) if attempts else [])
    row.first = _named(first)
    row.fixes = [f"{a['fix']['rule']}: {a['fix']['title']} ({a['fix']['safety']})"
                 for a in recorded[1:] if a.get("fix")]
    if not row.fixes:
        judged = _diagnose(attempts[0]) if attempts else []
        row.first = row.first or _named(judged)
        if stopped:
            why = f"still running after {fault.limit_s:.0f} s, stopped by the bench"
        elif proc.returncode == 0 and len(recorded) <= 1:
            why = "the job exited 0, and a first attempt that exits 0 is never judged"
        else:
            why = trail.get("outcome") or f"exit {proc.returncode}, no resume.json"
        advice = [f["rule"] for f in judged if f.get("severity") in ("error", "warning") and not any(
            x.get("config_patch") or x.get("env") for x in f.get("fixes", []))]
        if advice:
            why += f"; the fixes of {', '.join(sorted(set(advice)))} are advice, no config or environment to apply"
        row.cured = f"no fix offered: {why}"
        return row
    last = attempts[-1]
    finished = _last_step(last) >= fault.steps
    again = set(_errors(_diagnose(last))) & set(_errors(first))
    row.cured = "cured" if finished and not again else (
        f"not cured: {'again ' + ', '.join(sorted(again)) if again else 'stopped at step %d' % _last_step(last)}"
        f" ({trail.get('outcome', '')})")
    return row


def table(rows: list[Row]) -> str:
    head = ("fault", "first attempt's findings", "fix taken", "result", "attempts", "wall")
    body = [(r.fault.name, ", ".join(r.first) or "none", "; ".join(r.fixes) or "-", r.cured, str(r.attempts),
             f"{r.wall_s:.0f} s") for r in rows]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    cured = sum(r.cured == "cured" for r in rows)
    offered = sum(bool(r.fixes) for r in rows)
    lines.append(f"\n{cured} of {offered} faults with a fix cured; {len(rows) - offered} with no fix offered.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=[f.name for f in FAULTS], help="these faults only")
    ap.add_argument("--keep", type=Path, help="keep the runs in this directory (default: a temporary one)")
    args = ap.parse_args()
    if "TORCH_EXTENSIONS_DIR" not in os.environ:
        sys.exit("set TORCH_EXTENSIONS_DIR to a private directory holding DeepSpeed's CPU ops")
    base = args.keep or Path(tempfile.mkdtemp(prefix="cure-rate-"))
    rows = []
    for fault in FAULTS:
        if args.only and fault.name not in args.only:
            continue
        print(f"{fault.name}: {fault.what} ...", file=sys.stderr, flush=True)
        rows.append(run_fault(fault, base / fault.name))
        print(table(rows[-1:]).splitlines()[2], file=sys.stderr, flush=True)
    print(table(rows))
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
