"""Fix and resume, the parts that need no training run: the relaunched command, the policy, the checkpoint choice.
(The loop itself is tested on real 2-rank DeepSpeed runs in tests/probe/test_fix_and_resume.py.)"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from zerodoctor import events
from zerodoctor.resume.checkpoints import Saved, first_faulty_step, newest_before, saved_in
from zerodoctor.resume.policy import Policy, fix_key
from zerodoctor.resume.relaunch import RelaunchError, config_argument, relaunch_argv, trainer_arguments
from zerodoctor.rulebook.finding import Finding, Fix

CKPT = Saved(step=20, dir="out", tag="global_step20", path="out/global_step20")


@pytest.mark.parametrize("argv, expected", [
    (["deepspeed", "train.py", "--deepspeed", "ds.json", "--lr", "1"],
     ["deepspeed", "train.py", "--deepspeed", "new.json", "--lr", "1"]),
    (["torchrun", "train.py", "--deepspeed_config=ds.json"], ["torchrun", "train.py", "--deepspeed_config=new.json"]),
])
def test_the_patched_config_goes_where_the_original_was(argv: list[str], expected: list[str]) -> None:
    assert relaunch_argv(argv, None, "new.json", None, None) == expected


def test_config_arg_names_the_flag_and_nothing_else_is_taken_for_it() -> None:
    argv = ["python", "train.py", "--deepspeed", "other.json", "--config", "ds.json"]
    assert config_argument(argv, "--config") == (5, "", "ds.json")
    with pytest.raises(RelaunchError, match="--config-arg"):
        config_argument(["python", "train.py", "ds.json"])


def test_deepspeeds_own_switch_is_no_config_path() -> None:
    argv = ["python", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"]
    assert relaunch_argv(argv, None, "new.json", None, None) == [*argv[:-1], "new.json"]


HF_AUTO = {"train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}


@pytest.mark.parametrize("argv, expected", [
    (["t.py", "--deepspeed", "ds.json", "--learning_rate", "1e-3", "--fp16"],
     ["t.py", "--deepspeed", "new.json", "--learning_rate", "0.0005", "--fp16", "False", "--bf16", "True"]),
    (["t.py", "--deepspeed=ds.json", "--learning_rate=1e-3", "--fp16", "true", "--bf16", "--x", "1"],
     ["t.py", "--deepspeed=new.json", "--learning_rate", "0.0005", "--fp16", "False", "--bf16", "True", "--x", "1"]),
])
def test_a_trainers_arguments_say_what_the_patch_changed(argv: list[str], expected: list[str]) -> None:
    after = {**HF_AUTO, "optimizer": {"type": "AdamW", "params": {"lr": 5e-4}},
             "fp16": {"enabled": False}, "bf16": {"enabled": True}}
    assert relaunch_argv(argv, None, "new.json", None, None, (HF_AUTO, after)) == expected
    # DeepSpeed's own scripts are left as they were: the same patch through --deepspeed_config adds nothing
    assert relaunch_argv(["t.py", "--deepspeed_config", "ds.json"], None, "new.json", None, None, (HF_AUTO, after)) == \
        ["t.py", "--deepspeed_config", "new.json"]


def test_values_the_trainer_fills_from_one_argument_must_change_together() -> None:
    after = {"optimizer": {"params": {"lr": 5e-4}}, "scheduler": {"params": {"warmup_max_lr": 1e-3}}}
    with pytest.raises(RelaunchError, match="warmup_max_lr"):
        trainer_arguments({"optimizer": {"params": {"lr": 1e-3}}, "scheduler": {"params": {"warmup_max_lr": 1e-3}}},
                          after)
    both = {"optimizer": {"params": {"lr": 5e-4}}, "scheduler": {"params": {"warmup_max_lr": 5e-4}}}
    assert trainer_arguments(after, both) == {"--learning_rate": "0.0005"}


def test_the_resume_template_is_split_and_filled() -> None:
    argv = relaunch_argv(["python", "t.py", "--deepspeed", "ds.json"], None, "new.json",
                         "--load '{dir}' --tag={tag} --at {step}", CKPT)
    assert argv[-5:] == ["--load", "out", "--tag=global_step20", "--at", "20"]
    with pytest.raises(RelaunchError, match="--resume-arg"):
        relaunch_argv(["python", "t.py", "--deepspeed", "ds.json"], None, "new.json", None, CKPT)
    with pytest.raises(RelaunchError, match="{ckpt}"):
        relaunch_argv(["python", "t.py", "--deepspeed", "ds.json"], None, "new.json", "--from {checkpoint}", CKPT)


def finding(rule: str, *fixes: Fix, severity: str = "error") -> Finding:
    return Finding(rule=rule, name="n", category="memory", severity=severity, message="m", run="r", fixes=list(fixes))


UNSAFE = Fix("Lower the learning rate to 5e-4", "unsafe", config_patch={"optimizer": {"params": {"lr": 5e-4}}})
SAFE = Fix("Shrink buckets", "safe", config_patch={"zero_optimization": {"reduce_bucket_size": 1}})
ALLOC = Fix("expandable segments", "safe", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
DEBUG_ONLY = Fix("Rerun with CUDA_LAUNCH_BLOCKING=1", "safe", env={"CUDA_LAUNCH_BLOCKING": "1"})
ACTION_ONLY = Fix("Fix your data", "safe", action="look at the batch")


def test_the_policy_takes_remedies_it_was_given_consent_for() -> None:
    f = finding("ZD401", UNSAFE, SAFE, ALLOC, DEBUG_ONLY, ACTION_ONLY)
    assert Policy("safe").remedies(f) == [SAFE, ALLOC]  # a debugging aid or a to-do is no remedy
    assert Policy("unsafe-ok").remedies(f) == [UNSAFE, SAFE, ALLOC]


def test_on_limits_the_rules_and_only_errors_count() -> None:
    policy = Policy("safe", ("ZD4", "ZD201"))
    assert policy.covers(finding("ZD401")) and policy.covers(finding("ZD201"))
    assert not policy.covers(finding("ZD203")) and not policy.covers(finding("ZD401", severity="warning"))


def test_a_fix_is_the_same_fix_whatever_numbers_its_title_quotes() -> None:
    again = Fix("Lower the learning rate to 2.5e-4", "unsafe", config_patch={"optimizer": {"params": {"lr": 2.5e-4}}})
    assert fix_key("ZD201", UNSAFE) == fix_key("ZD201", again) == "ZD201: optimizer.params.lr"
    assert fix_key("ZD401", ALLOC) != fix_key("ZD401", SAFE)


def test_the_checkpoint_is_the_newest_saved_before_the_fault_and_still_there(tmp_path) -> None:
    run = tmp_path / "attempt-1"
    run.mkdir()
    lines = []
    for step in (5, 10, 15, 20):
        if step != 10:  # deleted since (a rotation keeping the last N)
            (tmp_path / "ckpt" / f"global_step{step}").mkdir(parents=True)
        lines.append(events.new("checkpoint", t=1.0, run="r", rank=0, op="save", step=step, dir="ckpt",
                                tag=f"global_step{step}", path=f"ckpt/global_step{step}"))
    lines.append(events.new("checkpoint", t=2.0, run="r", rank=0, op="load", step=5, dir="ckpt", tag="global_step5",
                            path="ckpt/global_step5"))
    (run / "rank-0.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    saved = saved_in(run)
    assert sorted(s.step for s in saved) == [5, 10, 15, 20]  # loads are no saves
    assert newest_before(saved, 16, tmp_path).step == 15
    assert newest_before(saved, 15, tmp_path).step == 5  # step 15 holds the fault's first step: not before it
    assert newest_before(saved, 5, tmp_path) is None
    assert newest_before(saved, None, tmp_path).step == 20


@pytest.mark.parametrize("argv, expected", [
    (["run", "--fix-and-resume", "--on", "ZD2", "--", "python", "t.py"],
     ["run", "--fix-and-resume=safe", "--on", "ZD2", "--", "python", "t.py"]),
    (["run", "--fix-and-resume", "unsafe-ok", "--", "x"], ["run", "--fix-and-resume=unsafe-ok", "--", "x"]),
    (["run", "--fix-and-resume=unsafe-ok", "--", "x"], ["run", "--fix-and-resume=unsafe-ok", "--", "x"]),
    (["run", "--", "python", "t.py", "--fix-and-resume"], ["run", "--", "python", "t.py", "--fix-and-resume"]),
])
def test_fix_and_resume_takes_its_policy_or_none(argv: list[str], expected: list[str]) -> None:
    from zerodoctor.cli import _optional_values

    assert _optional_values(argv) == expected


def test_a_fix_and_resume_run_directory_reads_as_its_attempts(tmp_path) -> None:
    """``diagnose runs/<id>`` and ``watch runs/`` read every attempt; each is a run of its own, ``<id>.attempt-K``."""
    from zerodoctor.sources.batches import run_files, run_id_for

    job = tmp_path / "job"
    for number, name in ((1, "rank-0.jsonl"), (2, "console.log"), (10, "console.log")):
        (job / f"attempt-{number}").mkdir(parents=True)
        (job / f"attempt-{number}" / name).write_text("")
    (job / "resume.json").write_text("{}")
    files = run_files(job)
    assert [p.relative_to(job).as_posix() for p, _ in files] == [
        "attempt-1/rank-0.jsonl", "attempt-2/console.log", "attempt-10/console.log"]
    assert run_id_for(job / "attempt-2" / "console.log") == "job.attempt-2"
    assert run_id_for(tmp_path / "plain" / "console.log") == "plain"


def test_when_fix_and_resume_itself_fails_the_jobs_own_status_stands(tmp_path) -> None:
    """A real MemoryError (ZD406, a safe config fix: its config offloads the optimizer, pinned) from a command that
    passes no DeepSpeed config on its command line: the relaunch cannot be built, which is said in one line, and
    ``run`` exits with the job's own status. The job prints its config as DeepSpeed's engine does
    (runtime/config.py ``DeepSpeedConfig.print``: ``"{}:".format(name)``, then ``"  json = {}"`` of json.dumps with
    indent 4), so the run shows which offload sections the patch may touch."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "offload_optimizer": {
        "device": "cpu", "pin_memory": True}}}
    script = (f"import json; print('DeepSpeedEngine configuration:'); "
              f"print('  json = ' + json.dumps({config!r}, sort_keys=True, indent=4, separators=(',', ':'))); "
              "bytearray(1 << 62)")
    done = subprocess.run([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp_path), "--name", "j",
                           "--fix-and-resume", "--", sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1, done.stderr
    assert "MemoryError" in done.stderr  # the job's own output passed through
    trail = json.loads((tmp_path / "j" / "resume.json").read_text())
    assert [f["rule"] for f in trail["attempts"][0]["findings"]] == ["ZD406"]
    # the patch unpins the one offload section the config has: no offload_param block for a ZeRO-2 run
    assert trail["attempts"][0]["findings"][0]["fixes"][0]["config_patch"] == {
        "zero_optimization": {"offload_optimizer": {"pin_memory": False}}}
    assert trail["outcome"].startswith("fix-and-resume failed: RelaunchError: the command passes no config")
    assert "exiting with the job's own status 1" in done.stderr


def test_a_patch_deepspeed_refuses_is_never_launched(tmp_path) -> None:
    from zerodoctor.resume.loop import Options, _choose

    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 4,
                                                  "gradient_accumulation_steps": 1}))
    refused = Fix("Halve the micro-batch", "safe", config_patch={"train_micro_batch_size_per_gpu": 0})
    accepted = Fix("Shrink buckets", "safe", config_patch={"zero_optimization": {"reduce_bucket_size": 1000}})
    trail = {"cwd": str(tmp_path), "kept": [], "tried": []}
    fix, after, before, verdict = _choose(finding("ZD402", refused, accepted), trail, Options(Policy("safe")),
                                          ["python", "t.py", "--deepspeed", "ds.json"], tmp_path)
    assert fix is accepted and after["zero_optimization"] == {"reduce_bucket_size": 1000}
    assert verdict.startswith("DeepSpeed") and "accepts" in verdict
    assert trail["tried"] == ["ZD402: train_micro_batch_size_per_gpu", "ZD402: zero_optimization.reduce_bucket_size"]


def test_a_trainers_auto_config_is_judged_as_deepspeed_was_given_it(tmp_path) -> None:
    """DeepSpeed's parser cannot read "auto"; the attempt's run_start holds the config the Trainer filled in, and
    that, patched, is what DeepSpeed judges. A patch the Trainer could not be told (two values of one argument
    disagreeing) is not launched: the next fix is."""
    from zerodoctor.resume.loop import Options, _choose

    user = {**HF_AUTO, "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto"}}}
    (tmp_path / "ds.json").write_text(json.dumps(user))
    given = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "train_batch_size": 8,
             "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
             "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 1e-3}}}
    start = events.new("run_start", t=1.0, run="r", rank=0, world_size=2, config=given)
    first = tmp_path / "run" / "attempt-1"
    first.mkdir(parents=True)
    (first / "rank-0.jsonl").write_text(json.dumps(start) + "\n")
    split = Fix("Lower the lr alone", "unsafe", config_patch={"scheduler": {"params": {"warmup_max_lr": 1e-4}},
                                                              "optimizer": {"params": {"lr": 5e-4}}})
    trail = {"cwd": str(tmp_path), "kept": [], "tried": []}
    # judged after attempt 2, which ran a trial fix (a micro-batch DeepSpeed refuses) that the next fix does not keep
    second = first.parent / "attempt-2"
    second.mkdir()
    trial = events.new("run_start", t=2.0, run="r", rank=0, world_size=2,
                       config={**given, "train_micro_batch_size_per_gpu": 0})
    (second / "rank-0.jsonl").write_text(json.dumps(trial) + "\n")
    fix, after, before, verdict = _choose(finding("ZD201", split, UNSAFE), trail, Options(Policy("unsafe-ok")),
                                          ["python", "t.py", "--deepspeed", "ds.json"], second)
    assert fix is UNSAFE and "accepts" in verdict
    assert before == user and after["train_micro_batch_size_per_gpu"] == "auto"  # the user's file keeps its "auto"


def test_a_signal_sent_to_the_wrapper_ends_the_run_without_a_restart(tmp_path) -> None:
    """The job printed a real MemoryError (ZD406 has a safe fix) and is still running when the user's SIGTERM
    arrives: forwarded to the job, whose status (143) is the exit status, and nothing is relaunched."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    script = ("import time, traceback\ntry:\n    bytearray(1 << 62)\nexcept MemoryError:\n    traceback.print_exc()\n"
              "time.sleep(120)\n")
    wrapper = subprocess.Popen([sys.executable, "-m", "zerodoctor", "run", "--runs-dir", str(tmp_path), "--name", "j",
                                "--fix-and-resume", "--", sys.executable, "-c", script, "--deepspeed", "ds.json"],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    console = tmp_path / "j" / "attempt-1" / "console.log"
    deadline = time.monotonic() + 120
    while not (console.exists() and "MemoryError" in console.read_text()):
        assert wrapper.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    wrapper.send_signal(signal.SIGTERM)
    _, stderr = wrapper.communicate(timeout=120)
    assert wrapper.returncode == 128 + signal.SIGTERM, stderr
    trail = json.loads((tmp_path / "j" / "resume.json").read_text())
    assert len(trail["attempts"]) == 1 and trail["outcome"] == "stopped by signal 15 sent to the wrapper: not restarted"


def test_append_refuses_to_relaunch_an_attempt_whose_ranks_still_run(tmp_path) -> None:
    """A wrapper killed alone leaves its job running; picking up would start a second copy beside it."""
    import os
    import socket
    import subprocess
    import sys

    from zerodoctor.resume.loop import Options, _pick_up
    from zerodoctor.launch.wrapper import RunError

    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a rank of the killed job
    try:
        attempt = tmp_path / "attempt-1"
        attempt.mkdir()
        start = events.new("run_start", t=1.0, run="j.attempt-1", rank=0, pid=rank.pid, host=socket.gethostname(),
                           world_size=2)
        (attempt / "rank-0.jsonl").write_text(json.dumps(start) + "\n")
        trail = {"attempts": [{"attempt": 1}], "kept": [], "trial": None, "tried": [], "cwd": str(tmp_path)}
        with pytest.raises(RunError, match=f"attempt 1 still runs \\(rank pid {rank.pid}"):
            _pick_up(tmp_path, trail, ["python", "t.py"], Options(Policy("safe")))
        rank.kill()
        rank.wait()
        assert _pick_up(tmp_path, trail, ["python", "t.py"], Options(Policy("safe"))).argv == ["python", "t.py"]
        assert (attempt / "rank-0.interrupted").exists() and os.path.exists(attempt)
    finally:
        rank.kill()


def test_the_fault_begins_at_the_first_step_any_error_finding_of_the_judgement_names() -> None:
    """An fp16 collapse that never calibrated names no step (ZD201, its steps ``[None, 26]``); the loss it turned
    non-finite names step 17 (ZD204): the fault began at 17, not at "step 1". A warning's steps (calibration
    overflows from step 1) are no fault's; with no error naming a step, the step is unknown."""
    collapse = replace(finding("ZD201"), steps=[None, 26])
    nonfinite = replace(finding("ZD204"), steps=[17, 26])
    calibration = replace(finding("ZD202", severity="warning"), steps=[1, 8])
    assert first_faulty_step([collapse, nonfinite, calibration]) == 17
    assert first_faulty_step([collapse, calibration, finding("ZD613")]) is None
    assert first_faulty_step([replace(finding("ZD203"), steps=[20, 40]), nonfinite]) == 17
