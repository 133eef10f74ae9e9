"""``fix``: patches applied by safety, validated by DeepSpeed at the run's world size, written only where asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.config.conftest import ISSUE_CONFIG
from zerodoctor.config.static import judge_config
from zerodoctor.fixes.apply import FixError, apply_fixes, summary_lines, write_config


def _findings(config: dict, rules, world_size: int):
    return judge_config(config, rules, name="t", world_size=world_size)[0]


def test_safe_fixes_round_trip_through_deepspeed_and_check(rules) -> None:
    result = apply_fixes(ISSUE_CONFIG, _findings(ISSUE_CONFIG, rules, 4), world_size=4)
    assert {rule for rule, _ in result.applied} == {"ZD601", "ZD602", "ZD603"}
    assert all(fix.safety == "safe" for _, fix in result.applied)
    assert result.verdict.accepted, result.verdict.error
    assert result.after["optimizer"]["params"]["lr"] == 1e-4
    assert list(result.after) == [k for k in ISSUE_CONFIG if k != "activation_checkpointing"]  # order kept
    assert not {"ZD601", "ZD602", "ZD603"} & {f.rule for f in _findings(result.after, rules, 4)}


def test_unsafe_fixes_wait_for_unsafe(rules) -> None:
    findings = _findings(ISSUE_CONFIG, rules, 2)
    safe = apply_fixes(ISSUE_CONFIG, findings, world_size=2)
    assert ("ZD101", "its config fixes are unsafe (pass --unsafe)") in safe.skipped
    assert not safe.verdict.accepted and "128 != 4 * 8 * 2" in safe.verdict.error
    unsafe = apply_fixes(ISSUE_CONFIG, findings, unsafe=True, world_size=2)
    assert unsafe.after["gradient_accumulation_steps"] == 16 and unsafe.verdict.accepted


def test_a_config_deepspeed_rejects_is_not_written(tmp_path: Path, issue_config: Path, rules) -> None:
    result = apply_fixes(ISSUE_CONFIG, _findings(ISSUE_CONFIG, rules, 2), world_size=2)
    out = tmp_path / "fixed.json"
    with pytest.raises(FixError, match="rejects the patched config at world size 2"):
        write_config(result, out, source=issue_config, in_place=False)
    assert not out.exists()


def test_the_input_is_overwritten_only_in_place(issue_config: Path, rules) -> None:
    result = apply_fixes(ISSUE_CONFIG, _findings(ISSUE_CONFIG, rules, 4), world_size=4)
    with pytest.raises(FixError, match="--in-place"):
        write_config(result, issue_config, source=issue_config, in_place=False)
    assert json.loads(issue_config.read_text()) == ISSUE_CONFIG
    write_config(result, issue_config, source=issue_config, in_place=True)
    assert json.loads(issue_config.read_text()) == result.after


def test_patches_touching_the_same_key_are_not_merged(rules) -> None:
    findings = _findings(ISSUE_CONFIG, rules, 4)
    result = apply_fixes(ISSUE_CONFIG, findings, unsafe=True)
    assert ("ZD607", "changes scheduler.params.warmup_min_lr, already changed by ZD601") in result.skipped


def test_fix_from_a_run_validates_at_the_runs_world_size(tmp_path: Path, issue_config: Path) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    for rank in (0, 1):
        (run / f"rank-{rank}.jsonl").write_text(json.dumps(
            {"v": 1, "t": 1.0, "run": "r1", "rank": rank, "kind": "run_start", "world_size": 2,
             "config": ISSUE_CONFIG}) + "\n")
    out = tmp_path / "fixed.json"
    refused = run_cli("fix", str(issue_config), "--from", str(run), "-o", str(out), timeout=120)
    assert refused.returncode == 1 and not out.exists(), refused.stdout + refused.stderr
    assert "rejects the patched config at world size 2" in refused.stderr
    done = run_cli("fix", str(issue_config), "--from", str(run), "-o", str(out), "--unsafe", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '+  "gradient_accumulation_steps": 16,' in done.stdout  # the diff, as printed
    fixed = json.loads(out.read_text())
    assert fixed["gradient_accumulation_steps"] == 16 and "offload_param" not in fixed["zero_optimization"]
    assert json.loads(issue_config.read_text()) == ISSUE_CONFIG


def test_check_cli_on_the_issue_config(issue_config: Path) -> None:
    proc = run_cli("check", str(issue_config), "--world-size", "2", "--params", "7.5e9", "--gpu-mem", "80GB")
    assert proc.returncode == 1, proc.stderr
    for code in ("ZD101", "ZD601", "ZD602", "ZD603"):
        assert code in proc.stdout
    assert "DeepSpeed 0.19" in proc.stdout and "rejects the config at world size 2" in proc.stdout
    # stage 1 with the optimizer offloaded moves its gradients over PCIe once a step, stage 2 once a micro-step (8):
    # the simplest offload that fits is also the fastest
    assert ("Recommended: ZeRO stage 1, offload optimizer, the fastest option that fits (30.00 GB of 80 GB, "
            "26.00 GB to spare; 31.87 s a step, assumed)") in proc.stdout
    data = json.loads(run_cli("check", str(issue_config), "--world-size", "2", "--params", "7.5e9", "--gpu-mem",
                              "80GB", "--no-deepspeed", "--format", "json").stdout)
    assert (data["recommendation"]["stage"], data["recommendation"]["offload"]) == (1, "optimizer")
    assert data["recommendation"]["within_error_of"] is None
    # at 4 ranks and 20e9 parameters stage 3 + optimizer offload is predicted 5.4% faster than stage 2 + offload,
    # inside the model's held-out error on stage 3 / stage 2: the simpler stage 2 stands, and the faster is named
    wider = run_cli("check", str(issue_config), "--world-size", "4", "--params", "20e9", "--gpu-mem", "80GB",
                    "--no-deepspeed")
    assert ("Recommended: ZeRO stage 2, offload optimizer, the simpler option that fits (40.00 GB of 80 GB, "
            "16.00 GB to spare; 91.80 s a step, assumed): stage 2 and stage 3 are within the model's error (19%; "
            "86.78 s a step); stage 2 is simpler. It puts 480 GB in each node's host memory (not checked: give "
            "--host-mem)") in wider.stdout
    bad = run_cli("check", str(issue_config), "--gpu-mem", "lots", "--no-deepspeed")
    assert bad.returncode == 2 and bad.stderr.startswith("zerodoctor: error: --gpu-mem 'lots'")


def test_check_no_deepspeed_says_skipped_and_prints_only_evidence_it_has(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train_batch_size": 8, "fp16": {"enabled": True, "min_loss_scale": 0.5},
                                "bf16": {"enabled": True}}))
    proc = run_cli("check", str(path), "--no-deepspeed", "--fix", "--unsafe")
    assert proc.returncode == 1, proc.stderr
    assert "not installed" not in proc.stdout  # it is installed; it was skipped
    assert "config parser: skipped (--no-deepspeed)" in proc.stdout
    assert "not validated: skipped (--no-deepspeed)" in proc.stdout  # the --fix summary
    lines = proc.stdout.splitlines()
    assert "  evidence: fp16.min_loss_scale as written: 0.5" in lines  # ZD605's number, in words
    assert "  evidence:" not in [line.rstrip() for line in lines]  # ZD604 is gated by flags only
    assert f"2 errors in {path}" in proc.stdout


def test_fix_says_what_it_leaves_to_do_and_never_applied_when_nothing_was_written(tmp_path: Path) -> None:
    """The sample's main remedy is PYTORCH_CUDA_ALLOC_CONF, which no config holds: it is listed, not dropped;
    without -o nothing is 'applied'; a config that already has the patch is told so."""
    sample = ROOT / "samples/fragmentation-oom"
    dry = run_cli("fix", str(sample / "ds_config.json"), "--from", str(sample))
    assert dry.returncode == 0, dry.stderr
    assert "to do by hand ZD401 (safe), not a config setting: Let the allocator grow segments instead of " \
           "splitting them: export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in dry.stdout
    assert "applied" not in dry.stdout and "would apply ZD401 (safe): Shrink" in dry.stdout
    out = tmp_path / "fixed.json"
    done = run_cli("fix", str(sample / "ds_config.json"), "--from", str(sample), "-o", str(out))
    assert "applied ZD401 (safe): Shrink" in done.stdout and out.exists()
    again = run_cli("fix", str(out), "--from", str(sample), "-o", str(tmp_path / "again.json"))
    assert again.stdout.splitlines()[:2] == [
        "nothing to change in the config",
        "already in the config ZD401: Shrink ZeRO's reduce/allgather buckets from 500M to 125M elements"]
    assert not (tmp_path / "again.json").exists()


def test_a_findings_other_config_fixes_are_named_as_alternatives(rules) -> None:
    result = apply_fixes(ISSUE_CONFIG, _findings(ISSUE_CONFIG, rules, 2), unsafe=True, world_size=2)
    taken = dict(result.applied)["ZD101"]
    others = [fix.title for rule, fix in result.alternatives if rule == "ZD101"]
    assert others and taken.title not in others
    assert any(line.startswith("not applied ZD101 (unsafe), an alternative") for line in summary_lines(result))
