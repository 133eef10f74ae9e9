"""``zerodoctor run --fix-and-resume``: real 2-rank DeepSpeed runs on CPU (gloo) that fail, are diagnosed and are
relaunched from a checkpoint with a fix, or are not, as the policy says.

The fp16 fault is ``samples/train.py --loss-mult 1e9 --loss-mult-from 25 --loss-mult-above-lr 6e-4``: from step 26
on, while the engine's lr is above 6e-4, the gradients overflow fp16 at every scale, as a too-high lr's divergence
does, but deterministically: the loss leaves its range at step 26 (ZD200), the scaler halves to min_loss_scale 1 and
DeepSpeed aborts (ZD201). It overflowed at every scale from 256 down, so ZD201 offers no fixed loss scale. A lower lr
*in effect* cures it, which only happens if the probe puts the patched lr back after ``load_checkpoint`` restored the
checkpoint's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.probe.conftest import TRAIN, run_env

FP16 = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 1},
        "fp16": {"enabled": True, "initial_scale_power": 8, "hysteresis": 2, "min_loss_scale": 1}}
LR_FAULT = ("--steps", "40", "--width", "16", "--loss-mult", "1e9", "--loss-mult-from", "25",
            "--loss-mult-above-lr", "6e-4", "--save-every", "5", "--save-dir", "ckpt", "--cpu-fp16-shim")
RESUME = ("--config-arg", "--config", "--resume-arg", "--load-dir {dir} --load-tag {tag}")
# fp32, the optimizer offloaded to the host (pinned: DeepSpeed 0.19's default) with torch's AdamW (no cpu_adam build):
# ZD406's fix turns pinning off in the config's own offload section, so the host-memory faults below have one to try
PINNED = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
          "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}
TIMEOUT_S = 600


def fix_and_resume(tmp: Path, policy: str, config: dict, *train_args: str, options: tuple = RESUME,
                   name: str = "job") -> subprocess.CompletedProcess:
    (tmp / "ds.json").write_text(json.dumps(config, indent=2))
    command = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp / "runs"), "--name", name,
               f"--fix-and-resume={policy}", *options, "--",
               sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(TRAIN), "--config", "ds.json", *train_args]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp,
                          env={**run_env(), "PYTHONPATH": str(ROOT)})


def events(attempt: Path, kind: str, rank: int = 0) -> list[dict]:
    lines = (attempt / f"rank-{rank}.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def trail(tmp: Path, name: str = "job") -> dict:
    return json.loads((tmp / "runs" / name / "resume.json").read_text())


def test_an_lr_collapse_is_resumed_with_a_lower_lr_in_effect_under_unsafe_ok(tmp_path) -> None:
    done = fix_and_resume(tmp_path, "unsafe-ok", FP16, *LR_FAULT)
    assert done.returncode == 0, done.stderr[-3000:]
    audit = trail(tmp_path)
    first, second = audit["attempts"]
    assert first["exit_code"] != 0 and sorted(f["rule"] for f in first["findings"]) == ["ZD200", "ZD201"]
    # ZD200 has no config fix; ZD201 offers no fixed loss scale (the run overflowed at every scale from 256 down, so
    # one would only skip every step, ZD203): its lower lr, from the checkpoint before the first overflow (step 26)
    assert second["fix"]["config_patch"] == {"optimizer": {"params": {"lr": 5e-4}}}
    assert second["resumed_from"]["tag"] == "global_step25"
    assert audit["outcome"].startswith("fixed") and audit["exit_code"] == 0
    patched = Path(second["config"])
    assert patched.parent == tmp_path and json.loads(patched.read_text())["optimizer"]["params"]["lr"] == 5e-4
    assert json.loads((tmp_path / "ds.json").read_text()) == FP16  # the original is never written over
    attempt = tmp_path / "runs" / "job" / "attempt-2"
    for rank in (0, 1):
        load, = [e for e in events(attempt, "checkpoint", rank) if e["op"] == "load"]
        assert load["step"] == 25 and load["reapplied"] == ["lr"]
        check, = events(attempt, "fix_check", rank)
        assert check["in_effect"] and check["observed"]["lr"] == 5e-4
        steps = events(attempt, "step", rank)
        assert [s["step"] for s in steps] == list(range(26, 41))  # continues from the checkpoint, not 0
        assert not any(s["overflow"] for s in steps) and {s["lr"] for s in steps} == {5e-4}
    assert "+      \"lr\": 0.0005" in (attempt / "fix.diff").read_text()
    # diagnose reads the run directory as its attempts, each judged on its own
    report = subprocess.run([sys.executable, "-m", "zerodoctor", "diagnose", "--format", "json", "--fail-on", "never",
                             str(tmp_path / "runs" / "job")], capture_output=True, text=True, timeout=180, cwd=ROOT)
    errors = {(f["run"], f["rule"]) for f in json.loads(report.stdout)["findings"] if f["severity"] == "error"}
    assert errors == {("job.attempt-1", "ZD200"), ("job.attempt-1", "ZD201")}
    # compare sets the failed attempt beside the fixed one, the config difference where the fix acts
    compared = subprocess.run([sys.executable, "-m", "zerodoctor", "compare", "--format", "json",
                               str(tmp_path / "runs" / "job" / "attempt-1"), str(attempt)],
                              capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert "optimizer.params.lr" in compared.stdout and "ZD201" in compared.stdout, compared.stderr


def test_no_safe_fix_means_no_restart_and_the_jobs_exit_code(tmp_path) -> None:
    done = fix_and_resume(tmp_path, "safe", FP16, *LR_FAULT)
    plain = json.loads((tmp_path / "runs" / "job" / "attempt-1" / "meta.json").read_text())["exit_code"]
    assert done.returncode == plain != 0
    audit = trail(tmp_path)
    assert len(audit["attempts"]) == 1 and audit["outcome"].startswith("no safe fix for ZD200, ZD201")
    assert not (tmp_path / "runs" / "job" / "attempt-2").exists()


def test_a_fault_a_safe_fix_cures_is_resumed_under_safe_and_trains_to_the_end(tmp_path) -> None:
    """ZeRO-2 with the optimizer offloaded to the CPU, its states pinned: rank 1 runs out of host memory at step 5
    while they are pinned (``--crash-while-pinned``, as a host that cannot lock that much). ZD406's safe fix
    unpins them; under ``safe`` the run is relaunched from the checkpoint of step 4 and trains to step 8."""
    config = {**FP16, "fp16": {"enabled": False},
              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
    done = fix_and_resume(tmp_path, "safe", config, "--steps", "8", "--width", "16", "--crash", "host-memory",
                          "--crash-at", "5", "--crash-while-pinned", "--save-every", "2", "--save-dir", "ckpt")
    audit = trail(tmp_path)
    first, second = audit["attempts"]
    assert [f["rule"] for f in first["findings"]] == ["ZD406"]
    assert second["fix"]["safety"] == "safe" and second["resumed_from"]["step"] == 4
    # only the section the run has: no offload_param block added to a ZeRO-2 config (ZD602 would flag it)
    assert second["fix"]["config_patch"] == {"zero_optimization": {"offload_optimizer": {"pin_memory": False}}}
    assert json.loads(Path(second["config"]).read_text())["zero_optimization"]["offload_optimizer"] == {
        "device": "cpu", "pin_memory": False}
    assert audit["outcome"].startswith("fixed: ZD406 did not recur") and done.returncode == 0, done.stderr[-3000:]
    attempt = tmp_path / "runs" / "job" / "attempt-2"
    for rank in (0, 1):
        assert [s["step"] for s in events(attempt, "step", rank)] == [5, 6, 7, 8]  # from the checkpoint, to the end


def test_a_fix_that_does_not_help_is_not_applied_twice_and_no_fix_left_stops(tmp_path) -> None:
    """Rank 1 runs out of host memory at step 5 whatever the config says (ZD406): its safe fix is tried once from
    the checkpoint of step 4, the same fault comes back, and the run stops with the job's exit code."""
    config = PINNED
    done = fix_and_resume(tmp_path, "safe", config, "--steps", "8", "--width", "16", "--crash", "host-memory",
                          "--crash-at", "5", "--save-every", "2", "--save-dir", "ckpt")
    audit = trail(tmp_path)
    first, second = audit["attempts"]
    assert [f["rule"] for f in first["findings"]] == ["ZD406"]
    assert second["fix"]["safety"] == "safe" and second["resumed_from"]["step"] == 4
    assert [f["rule"] for f in second["findings"]] == ["ZD406"]
    assert audit["outcome"] == "no fix left for ZD406 host-memory-allocation-failed"
    assert done.returncode == second["exit_code"] != 0


def _processes() -> dict[int, tuple[str, int, int]]:
    """pid → (state, parent pid, session id) of every process."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(stat.parent.name)] = (fields[0], int(fields[1]), int(fields[3]))
    return table


def _kill_session(sid: int) -> None:
    """SIGKILL the wrapper and everything under it, as a node failure or an OOM kill would; return once none runs.

    torchrun starts each rank in a session of its own, so the ranks are found as descendants, before any dies
    (an orphan's parent becomes init)."""
    import os
    import signal
    import time

    table = _processes()
    doomed = {pid for pid, (_, _, session) in table.items() if session == sid}
    while grown := {pid for pid, (_, parent, _) in table.items() if parent in doomed} - doomed:
        doomed |= grown
    deadline = time.monotonic() + 60
    while alive := [pid for pid, (state, _, _) in _processes().items() if pid in doomed and state not in "ZX"]:
        assert time.monotonic() < deadline, f"still running: {alive}"
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def test_a_wrapper_killed_mid_restart_is_picked_up_with_append(tmp_path) -> None:
    """SIGKILL the wrapper and its job while attempt 2 runs; ``--append`` relaunches attempt 2 as it was decided.
    (Had the ranks survived, ``--append`` would refuse: tests/test_resume_parts.py.)"""
    import time

    config = PINNED
    train = ("--steps", "8", "--width", "16", "--crash", "host-memory", "--crash-at", "5", "--save-every", "2",
             "--save-dir", "ckpt", "--host-work-s", "3")  # each step 3 s longer: the window the kill lands in
    (tmp_path / "ds.json").write_text(json.dumps(config))
    command = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp_path / "runs"), "--name", "job",
               "--fix-and-resume", *RESUME, "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", str(TRAIN), "--config", "ds.json", *train]
    env = {**run_env(), "PYTHONPATH": str(ROOT)}
    wrapper = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = tmp_path / "runs" / "job" / "attempt-2" / "rank-0.jsonl"
    deadline = time.monotonic() + TIMEOUT_S
    while not (second.exists() and b'"op":"load"' in second.read_bytes()):  # attempt 2 resumed and is training
        assert wrapper.poll() is None and time.monotonic() < deadline, "attempt 2 never resumed"
        time.sleep(0.05)
    _kill_session(wrapper.pid)
    wrapper.wait(timeout=60)
    interrupted = trail(tmp_path)
    assert len(interrupted["attempts"]) == 2 and "exit_code" not in interrupted["attempts"][1]
    done = subprocess.run([*command[:4], "--append", *command[4:]], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=tmp_path, env=env)
    audit = trail(tmp_path)
    assert "picking up attempt 2" in done.stderr
    assert len(audit["attempts"]) == 2 and audit["attempts"][1]["resumed_from"]["step"] == 4
    assert audit["outcome"] == "no fix left for ZD406 host-memory-allocation-failed"
    assert done.returncode == audit["attempts"][1]["exit_code"] != 0
    attempt = tmp_path / "runs" / "job" / "attempt-2"
    assert sorted(p.name for p in attempt.glob("rank-*.interrupted")) == ["rank-0.interrupted", "rank-1.interrupted"]
    assert [s["step"] for s in events(attempt, "step")] == [5]  # the relaunch's own steps, not the killed start's


HF_SCRIPT = Path(__file__).with_name("hf_resume_script.py")


def hf_fix_and_resume(tmp: Path, policy: str, config: dict, *script_args: str) -> subprocess.CompletedProcess:
    """``zerodoctor run --fix-and-resume=POLICY`` over a 2-rank Trainer script, its config passed by ``--deepspeed``
    and resumed by the Trainer's own ``--resume_from_checkpoint``; the run is ``tmp/runs/hf``."""
    pytest.importorskip("transformers")
    (tmp / "ds.json").write_text(json.dumps(config, indent=2))
    command = [sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp / "runs"), "--name", "hf",
               f"--fix-and-resume={policy}", "--resume-arg", "--resume_from_checkpoint {dir}", "--",
               sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(HF_SCRIPT),
               "--deepspeed", "ds.json", "--output_dir", "out", "--per_device_train_batch_size", "4",
               "--report_to", "none", *script_args]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp,
                          env={**run_env(), "PYTHONPATH": str(ROOT)})


def test_a_hugging_face_trainer_run_is_relaunched_with_deepspeed_and_resume_from_checkpoint(tmp_path) -> None:
    """The same loop for a Trainer script: the patched config goes to ``--deepspeed``, the checkpoint is Trainer's
    ``checkpoint-N`` (saved through DeepSpeed's ``save_checkpoint``, so the probe saw it) and the resume argument
    is Trainer's own."""
    done = hf_fix_and_resume(tmp_path, "safe", {
        "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "torch_adam": True}}},
        "--max_steps", "8", "--save_steps", "2", "--crash_at", "5")
    audit = trail(tmp_path, "hf")
    first, second = audit["attempts"]
    assert [f["rule"] for f in first["findings"]] == ["ZD406"]
    argv = second["argv"]
    assert argv[argv.index("--deepspeed") + 1] == second["config"] == str(tmp_path / "ds.hf.attempt-2.json")
    assert argv[-2:] == ["--resume_from_checkpoint", "out/checkpoint-4"]
    attempt = tmp_path / "runs" / "hf" / "attempt-2"
    load, = [e for e in events(attempt, "checkpoint") if e["op"] == "load"]
    assert load["dir"] == "out/checkpoint-4" and load["step"] == 4
    assert [s["step"] for s in events(attempt, "step")] == [5]  # Trainer resumed at step 5, then the fault again
    assert audit["outcome"] == "no fix left for ZD406 host-memory-allocation-failed"
    assert done.returncode == second["exit_code"] != 0


def test_a_trainer_fp16_collapse_is_resumed_with_the_lower_lr_in_effect_in_its_own_scheduler(tmp_path) -> None:
    """Case (a) for a Trainer script: fp16 through the shim, the Trainer's default linear decay from
    ``--learning_rate 1e-3`` over 40 steps, and from step 26 on, while the lr is above 3e-4, gradients that overflow
    fp16 at every scale (``--loss_mult``): the loss diverges (ZD200) and DeepSpeed's scaler collapses (ZD201), with
    no fixed loss scale to offer (it overflowed at every scale); ZD201's lower lr (half the configured base lr, 5e-4:
    every step's lr halved, 1.875e-4 at step 26) is relaunched from ``out/checkpoint-25``.

    The Trainer's scheduler (a LambdaLR DeepSpeed builds from the Trainer's callable: the config has no
    ``scheduler``) is restored by ``load_checkpoint`` with the old base lr, ``base_lrs == [1e-3]``: a real run
    without the probe re-basing it stepped 26 at the patched lr and was then set back to 1e-3 x 14/40 = 3.5e-4 by
    the scheduler ("fix not in effect"). With it, attempt 2 runs the schedule a fresh ``--learning_rate 5e-4``
    run would, from step 26 to 40, no step skipped. (Half the last lr as the new base, 1.875e-4, would have had the
    schedule step 26 at 7e-5, a fifth of the last lr.)"""
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1},
              "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
              "fp16": {"enabled": "auto", "initial_scale_power": 8, "hysteresis": 2, "min_loss_scale": 1}}
    done = hf_fix_and_resume(tmp_path, "unsafe-ok", config, "--max_steps", "40", "--save_steps", "5",
                             "--learning_rate", "1e-3", "--fp16", "--cpu_fp16_shim", "--loss_mult", "1e9",
                             "--loss_mult_from", "25", "--loss_mult_above_lr", "3e-4")
    assert done.returncode == 0, done.stderr[-3000:]
    audit = trail(tmp_path, "hf")
    first, second = audit["attempts"]
    assert sorted(f["rule"] for f in first["findings"]) == ["ZD200", "ZD201"]
    assert second["fix"]["config_patch"] == {"optimizer": {"params": {"lr": 5e-4}}}
    assert second["resumed_from"]["dir"] == "out/checkpoint-25" and second["resumed_from"]["step"] == 25
    argv = second["argv"]
    assert argv[argv.index("--learning_rate") + 1] == "0.0005"  # the Trainer's argument says it too
    assert argv[-2:] == ["--resume_from_checkpoint", "out/checkpoint-25"]
    assert audit["outcome"].startswith("fixed") and audit["exit_code"] == 0
    attempt = tmp_path / "runs" / "hf" / "attempt-2"
    for rank in (0, 1):
        load, = [e for e in events(attempt, "checkpoint", rank) if e["op"] == "load"]
        assert load["step"] == 25 and "lr" in load["reapplied"]
        check, = events(attempt, "fix_check", rank)
        assert check["in_effect"] and check["observed"]["base_lr"] == 5e-4
        steps = events(attempt, "step", rank)
        assert [s["step"] for s in steps] == list(range(26, 41))  # continues from the checkpoint, not 0
        assert not any(s["overflow"] for s in steps)
        # the Trainer's linear decay, as from a fresh --learning_rate 5e-4: step s at 5e-4 x (41 - s) / 40, half the
        # lr of the run before at every step (1.875e-4 at step 26)
        assert [s["lr"] for s in steps] == pytest.approx([5e-4 * (41 - s) / 40 for s in range(26, 41)])


def test_a_fix_a_scheduler_overrides_is_stopped_as_not_in_effect(tmp_path) -> None:
    """With DeepSpeed's WarmupLR the lr comes from warmup_max_lr on every step: ZD201's lower optimizer lr is put
    back after the load, but the scheduler's first step raises it again. The probe sees it on the first resumed
    step and stops the attempt instead of spending it on the fault."""
    config = {**FP16, "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-3, "warmup_max_lr": 1e-3,
                                                                   "warmup_num_steps": 1}}}
    done = fix_and_resume(tmp_path, "unsafe-ok", config, *LR_FAULT)
    audit = trail(tmp_path)
    last = audit["attempts"][-1]
    assert last["fix"]["config_patch"] == {"optimizer": {"params": {"lr": 5e-4}}}
    assert audit["outcome"].startswith("fix not in effect")
    assert done.returncode == last["exit_code"] != 0
    attempt = tmp_path / "runs" / "job" / f"attempt-{last['attempt']}"
    check, = events(attempt, "fix_check")
    assert not check["in_effect"] and check["expected"] == {"lr": 5e-4} and check["observed"]["lr"] == 1e-3
    assert [s["step"] for s in events(attempt, "step")] == [26]  # stopped after the first resumed step


def test_a_fault_that_never_ends_the_job_is_stopped_live_and_relaunched(tmp_path) -> None:
    """A static loss scale of 65536 with a summed loss: every step overflows and is skipped, and the run would
    exit 0 having trained on nothing (ZD203). The live judgement stops it while it runs; it is relaunched from
    scratch (no checkpoint precedes step 1, and the user allowed it) with dynamic loss scaling, which trains."""
    config = {**FP16, "fp16": {"enabled": True, "loss_scale": 65536}}
    done = fix_and_resume(tmp_path, "unsafe-ok", config, "--steps", "60", "--width", "16", "--loss", "sum",
                          "--host-work-s", "0.5", "--cpu-fp16-shim",
                          options=("--config-arg", "--config", "--allow-restart-from-scratch"))
    assert done.returncode == 0, done.stderr[-3000:]
    audit = trail(tmp_path)
    first, second = audit["attempts"]
    assert first["stopped_live"]["rule"] == "ZD203" and first["exit_code"] != 0
    assert len(events(tmp_path / "runs" / "job" / "attempt-1", "step")) < 60  # stopped before its end
    assert second["fix"]["config_patch"] == {"fp16": {"loss_scale": 0}} and second["resumed_from"] is None
    steps = events(tmp_path / "runs" / "job" / "attempt-2", "step")
    assert [s["step"] for s in steps] == list(range(1, 61)) and sum(s["overflow"] for s in steps) < 30
    assert audit["outcome"].startswith("fixed")
    assert not list((tmp_path / "runs" / "job").glob("attempt-*/.live-judgement.db*"))


def test_a_divergence_is_resumed_from_the_checkpoint_before_the_first_step_any_finding_names(tmp_path) -> None:
    """The loss diverges from step 17 (``--loss-mult 1e39 --loss-mult-from 16``: from then on the loss is past
    fp32's range, inf, and every step's gradients overflow), with checkpoints every 5 steps. ZD201 names no step of
    its own (the scaler never calibrated: nothing overflowed before), ZD204 names step 17, where the loss went
    non-finite: the relaunch loads the checkpoint of step 15. Before: the step-less ZD201 made the fault "step 1",
    and the run stopped with "no checkpoint saved before step 1; not restarted from scratch" beside checkpoints
    of steps 5 to 25."""
    done = fix_and_resume(tmp_path, "unsafe-ok", FP16, "--steps", "40", "--width", "16", "--loss-mult", "1e39",
                          "--loss-mult-from", "16", "--save-every", "5", "--save-dir", "ckpt", "--cpu-fp16-shim",
                          options=(*RESUME, "--max-restarts", "1"))
    assert "no checkpoint saved before" not in done.stderr, done.stderr[-3000:]
    first, second = trail(tmp_path)["attempts"]
    named = {f["rule"]: f["steps"] for f in first["findings"]}
    assert "ZD201" in named and named["ZD204"][0] == 17, first["findings"]
    assert second["resumed_from"]["step"] == 15 and second["resumed_from"]["tag"] == "global_step15"
    for rank in (0, 1):
        load, = [e for e in events(tmp_path / "runs" / "job" / "attempt-2", "checkpoint", rank) if e["op"] == "load"]
        assert load["step"] == 15
        assert events(tmp_path / "runs" / "job" / "attempt-2", "step", rank)[0]["step"] == 16
