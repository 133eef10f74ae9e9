"""``check``: the issue's config at 2 and 4 ranks, typos, "auto" values, and what DeepSpeed itself rejects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerodoctor.config.static import ConfigError, check, judge_config, load_config
from tests.config.conftest import ISSUE_CONFIG
from tests.conftest import ROOT, run_cli

DEFECTS = {"ZD101", "ZD601", "ZD602", "ZD603"}  # batch arithmetic, string numbers, offload_param, checkpointing


def _rules_fired(config: dict, rules, world_size: int = 2, **facts) -> dict:
    found, _ = judge_config(config, rules, name="t", world_size=world_size, **facts)
    return {f.rule: f for f in found}


def test_issue_config_at_two_ranks_shows_every_defect_and_deepspeed_agrees(issue_config: Path, rules) -> None:
    report = check(issue_config, rules, world_size=2)
    fired = {f.rule: f for f in report.findings}
    assert set(fired) >= DEFECTS
    assert "128" in fired["ZD101"].message and "multiply to 64" in fired["ZD101"].message
    assert list(fired["ZD601"].evidence["config.string_numbers"]) == [
        "optimizer.params.lr", "optimizer.params.eps", "optimizer.params.weight_decay",
        "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr"]
    assert report.deepspeed is not None and not report.deepspeed.accepted
    assert "128 != 4 * 8 * 2" in report.deepspeed.error


def test_issue_config_at_four_ranks_has_no_batch_finding(issue_config: Path, rules) -> None:
    report = check(issue_config, rules, world_size=4)
    assert not [f for f in report.findings if f.category == "batch_size"]
    assert DEFECTS - {"ZD101"} <= {f.rule for f in report.findings}
    assert report.deepspeed.accepted  # DeepSpeed passes it: the string numbers only crash later, in the optimizer
    assert report.deepspeed.derived["gradient_accumulation_steps"] == 8


def test_only_static_rules_are_asked(issue_config: Path, rules) -> None:
    report = check(issue_config, rules, world_size=2)
    judged = {f.rule for f in report.findings} | {u.rule for u in report.unevaluated}
    static = {r.code for r in rules if r.spec.static}
    assert judged <= static and "ZD201" not in judged


def test_typos_get_a_did_you_mean_and_a_rename(rules) -> None:
    config = {"train_batch_size": 8, "zero_optimisation": {"stage": 3}, "gradient_clip": 1.0,
              "optimizer": {"type": "Adam", "parms": {"lr": 1e-4}}}
    finding = _rules_fired(config, rules)["ZD610"]
    assert "rename zero_optimisation → zero_optimization" in finding.message
    assert "optimizer.parms → optimizer.params" in finding.message
    assert finding.fixes[0].config_patch == {"zero_optimisation": None, "zero_optimization": {"stage": 3},
                                             "gradient_clip": None, "gradient_clipping": 1.0,
                                             "optimizer": {"parms": None, "params": {"lr": 1e-4}}}
    assert "ZD610" not in _rules_fired({"train_batch_size": 8, "zero_optimization": {"stage": 3}}, rules)


def test_typo_inside_a_section_deepspeed_validates_is_named_by_deepspeed(tmp_path: Path, rules) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_sise": 5e7}}))
    verdict = check(path, rules, world_size=1).deepspeed
    assert not verdict.accepted
    assert "zero_optimization.reduce_bucket_sise" in verdict.error
    assert "did you mean 'reduce_bucket_size'" in verdict.error


def test_auto_values_name_both_fillers_and_their_world_sizes(tmp_path: Path, rules) -> None:
    config = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
              "gradient_accumulation_steps": "auto", "sequence_parallel_size": 2}
    finding = _rules_fired(config, rules, world_size=8)["ZD611"]
    assert "× 8 ranks" in finding.message
    assert "× 4 data-parallel ranks, world / sequence_parallel_size 2" in finding.message
    path = tmp_path / "auto.json"
    path.write_text(json.dumps(config))
    assert not check(path, rules, world_size=8).deepspeed.accepted  # as the message says: not without a filler


@pytest.mark.parametrize(("train", "fires"), [(100, True), (128, False)])
def test_explicit_batch_with_auto_parts_must_divide(train: int, fires: bool, rules) -> None:
    config = {"train_batch_size": train, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 2}
    assert ("ZD612" in _rules_fired(config, rules, world_size=8)) is fires


@pytest.mark.parametrize("world_size", [1, 4])
def test_a_micro_batch_of_zero_with_auto_parts_is_judged_not_divided_by(world_size: int, rules) -> None:
    config = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 0, "gradient_accumulation_steps": "auto"}
    fired = _rules_fired(config, rules, world_size=world_size)  # was a ZeroDivisionError
    assert "ZD611" in fired and "ZD612" not in fired


def test_what_deepspeed_rejects_is_found_before_it(tmp_path: Path, rules) -> None:
    config = {"train_batch_size": 8, "fp16": {"enabled": True, "min_loss_scale": 0.5}, "bf16": {"enabled": True}}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    report = check(path, rules)
    assert {"ZD604", "ZD605"} <= {f.rule for f in report.findings}
    assert not report.deepspeed.accepted
    for alone in ({"fp16": {"enabled": True, "min_loss_scale": 0.5}},
                  {"fp16": {"enabled": True}, "bf16": {"enabled": True}}):
        path.write_text(json.dumps({"train_batch_size": 8, **alone}))
        assert not check(path, rules).deepspeed.accepted, alone


def test_bucket_sizes_are_judged_against_the_model(rules) -> None:
    # DeepSpeed's default 5e8-element buckets, not written by the user: never judged.
    defaults = {"train_batch_size": 8, "zero_optimization": {"stage": 2}}
    assert not {"ZD609", "ZD622"} & set(_rules_fired(defaults, rules, params=125_000_000, gpu_mem=16 * 10**9))
    written = {"train_batch_size": 8, "bf16": {"enabled": True},
               "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e8}}
    # (5e8 - 1.25e8) × 2 bytes × 2 buffers = 1.5 GB, 9.4% of 16 GB: sized to the model, never below it.
    large = _rules_fired(written, rules, params=125_000_000, gpu_mem=16 * 10**9)["ZD609"]
    assert large.fixes[0].config_patch == {"zero_optimization": {"reduce_bucket_size": 130_000_000}}
    assert large.evidence["config.bucket_waste_bytes"] == 1_500_000_000
    # Without the device's memory the bytes weigh nothing: no finding; on an 80 GB device 1.9%: none.
    assert "ZD609" not in _rules_fired(written, rules, params=125_000_000)
    assert "ZD609" not in _rules_fired(written, rules, params=125_000_000, gpu_mem=80 * 10**9)
    tiny = {"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": 10_000}}
    small = _rules_fired(tiny, rules, params=7_000_000_000)["ZD622"]
    assert small.fixes[0].config_patch == {"zero_optimization": {"reduce_bucket_size": 70_000_000}}
    assert "ZD622" not in _rules_fired(tiny, rules, params=50_000_000)


@pytest.mark.parametrize(("text", "where"), [
    ('{"train_batch_size": 8,\n "fp16": {"enabled": true,,}}', ":2:27: not valid JSON"),
    ('{"train_batch_size": 8, "train_batch_size": 16}', "duplicate key 'train_batch_size'"),
    ("[1, 2]", ":1:1: a DeepSpeed config must be a JSON object"),
    # neither JSON nor the hjson DeepSpeed falls back to
    ('{"train_batch_size": 8,\n "fp16": {"enabled": true}', ":2:27: not valid JSON, nor the hjson DeepSpeed reads"),
    ('{"train_batch_size": 8, // a comment\n "train_batch_size": 16}', "duplicate key 'train_batch_size'"),
])
def test_a_bad_config_is_one_clear_error(tmp_path: Path, text: str, where: str) -> None:
    """Named with its file, line and column; `check` says it in one line and exits 2."""
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=str(path)) as exc:
        load_config(path)
    assert where in str(exc.value)
    shown = run_cli("check", "--no-deepspeed", str(path))
    assert shown.returncode == 2 and len(shown.stderr.strip().splitlines()) == 1, shown.stderr


def test_config_keys_cover_what_deepspeed_reads() -> None:
    """The typo check's vocabulary must know every top-level key the installed DeepSpeed reads."""
    from deepspeed.runtime.config import DeepSpeedConfig

    from zerodoctor.signals.config import TOP_LEVEL_KEYS

    read: set[str] = set()

    class Recording(dict):
        def get(self, key, default=None):
            read.add(key)
            return super().get(key, default)

        def __contains__(self, key) -> bool:
            read.add(key)
            return super().__contains__(key)

    DeepSpeedConfig(Recording(train_batch_size=8))
    assert len(read) > 40 and read <= TOP_LEVEL_KEYS, read - TOP_LEVEL_KEYS
    assert set(ISSUE_CONFIG) <= TOP_LEVEL_KEYS


def test_a_correct_two_gpu_config_is_checked_at_the_world_size_its_batch_implies() -> None:
    """16 = 4 x 2 x 2: at the old default of 1 rank this real sample config raised a batch error it does not have."""
    config = ROOT / "samples/healthy-zero2/ds_config.json"
    proc = run_cli("check", str(config))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ZD101" not in proc.stdout and "accepts the config at world size 2" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith(f"no findings in {config} at world size 2 (train_batch_size /")


def test_deepspeeds_rejection_is_counted_in_the_summary(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4}))
    proc = run_cli("check", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == (f"no findings in {path} at world size 1 (not given, and the batch values "
                                            "do not fix it: pass --world-size N), and DeepSpeed rejects it")


def test_the_plan_prices_every_option_in_memory_and_time_and_marks_each_figure(tmp_path: Path) -> None:
    """The issue's command: a 7B model on 8 GPUs of 80 GiB; nothing measured, so every step time is assumed."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": 2}}))
    args = ("check", str(path), "--world-size", "8", "--params", "7e9", "--gpu-mem", "80GiB", "--no-deepspeed")
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Model states per GPU and step time"))
    assert lines[header + 1].split() == ["stage", "offload", "ZeRO", "paper", "fits", "step", "time"]
    rows = lines[header + 2:header + 10]
    assert [r.split()[:2] for r in rows] == [["0", "none"], ["1", "none"], ["1", "optimizer"], ["2", "none"],
                                             ["2", "optimizer"], ["3", "none"], ["3", "optimizer"],
                                             ["3", "optimizer+param"]]
    assert all(" s assumed" in r for r in rows), rows
    assert "CPU Adam 7.00 s" in rows[4] and "layer fetch" in rows[5]
    assert "6 × parameters × 8,192 tokens per GPU (assumed)" in proc.stdout
    pick = next(line for line in lines if line.startswith("Recommended:"))
    assert pick.startswith("Recommended: ZeRO stage 1, offload none, the fastest option that fits (38.50 GB of 86 GB, ")
    assert pick.endswith(" GB to spare; 2.87 s a step, assumed)")

    data = json.loads(run_cli(*args, "--format", "json").stdout)
    paper = [r for r in data["memory_plan"] if r["source"] == "zero-paper"]
    assert len(paper) == 8 and all(r["step_time_mark"] == "assumed" and r["memory_mark"] == "nominal" for r in paper)
    offload = next(r for r in paper if (r["stage"], r["offload"]) == (2, "optimizer"))
    assert offload["parts"]["optimizer"] == {"seconds": pytest.approx(7.0), "mark": "assumed"}
    assert offload["step_time_s"] == pytest.approx(sum(p["seconds"] for p in offload["parts"].values()))
    assert (data["recommendation"]["stage"], data["recommendation"]["offload"]) == (1, "none")
    assert data["recommendation"]["margin_bytes"] == int(0.7 * 80 * 2**30) - 38_500_000_000
    assert data["recommendation"]["within_error_of"] is None  # stage 1 is the fastest as well as the simplest
    assert data["step_time_inputs"]["utilisation"] == {"value": 0.4, "mark": "assumed", "source": ""}
    assert data["calibrated_from"] is None


def test_check_from_a_run_calibrates_the_step_times(tmp_path: Path) -> None:
    """A real 2-rank ZeRO-3 run with both offloads (samples/offload-zero3): its forward + backward, CPU Adam's
    rate and its collectives' bandwidth are measured; the layer fetch stays assumed."""
    sample = ROOT / "samples/offload-zero3"
    proc = run_cli("check", str(sample / "ds_config.json"), "--from", str(sample), "--no-deepspeed", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["calibrated_from"] == "offload-zero3"
    assert data["params"] == 29_374_464  # --params from the run (its run_start)
    inputs = data["step_time_inputs"]
    assert {k: inputs[k]["mark"] for k in ("compute_s", "cpu_adam_params_per_s", "intra_node_bytes_per_s",
                                           "layer_fetch_s")} == {
        "compute_s": "measured", "cpu_adam_params_per_s": "measured", "intra_node_bytes_per_s": "measured",
        "layer_fetch_s": "assumed"}
    stage2 = next(r for r in data["memory_plan"] if (r["stage"], r["offload"]) == (2, "none"))
    assert stage2["step_time_mark"] == "measured"  # compute and collectives measured, nothing else in it
    assert "(measured, from offload-zero3)" in run_cli("check", str(sample / "ds_config.json"), "--from", str(sample),
                                                       "--no-deepspeed").stdout


def test_check_from_a_log_without_step_times_is_one_line_exit_2() -> None:
    sample = ROOT / "samples/offload-zero3"
    proc = run_cli("check", str(sample / "ds_config.json"), "--from", str(sample / "console.log"), "--no-deepspeed")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"zerodoctor: error: {sample / 'console.log'}: no step times to calibrate from")
    assert len(proc.stderr.splitlines()) == 1
    bad = run_cli("check", str(sample / "ds_config.json"), "--params", "1e9", "--gpu", "B200", "--no-deepspeed")
    assert bad.returncode == 2 and bad.stderr.startswith("zerodoctor: error: --gpu 'B200': expected one of V100")


def test_the_pick_on_the_offload_sample_rests_on_more_than_the_models_error() -> None:
    """samples/offload-zero3 at 8 ranks, 7B, 80 GiB: stage 3 was picked for being 3% faster than stage 1 and 2
    with a 2 ms fetch nobody sourced; at the fitted 4 ms it is slower, and stage 1 is the fastest and simplest."""
    proc = run_cli("check", str(ROOT / "samples/offload-zero3/ds_config.json"), "--world-size", "8", "--params", "7e9",
                   "--gpu-mem", "80GiB", "--no-deepspeed")
    pick = next(line for line in proc.stdout.splitlines() if line.startswith("Recommended:"))
    assert pick.startswith("Recommended: ZeRO stage 1, offload none, the fastest option that fits"), pick


def test_an_offloading_pick_names_the_host_memory_it_needs(tmp_path: Path) -> None:
    """A trillion parameters on one node of 8 × 24 GB: only offloading everything gets the GPU under budget, and
    that puts 18 TB on the host. Without --host-mem the pick says so and that it was not checked; with a 1 TB host
    nothing fits, and the way out names the host."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": 3}}))
    args = ("check", str(path), "--world-size", "8", "--params", "1e12", "--gpu-mem", "24GB", "--no-deepspeed")
    pick = next(line for line in run_cli(*args).stdout.splitlines() if line.startswith("Recommended:"))
    assert pick.startswith("Recommended: ZeRO stage 3, offload optimizer+param"), pick
    assert pick.endswith(". It puts 27000 GB in each node's host memory (not checked: give --host-mem)"), pick
    known = run_cli(*args, "--host-mem", "1TB")
    assert "No ZeRO option fits: add GPUs, nodes with more host memory, offload to NVMe" in known.stdout
    assert "host/node" in known.stdout and "against --host-mem 1000 GB" in known.stdout
    data = json.loads(run_cli(*args, "--host-mem", "1TB", "--format", "json").stdout)
    assert data["host_mem_bytes"] == 10**12 and data["recommendation"] is None
    both = next(r for r in data["memory_plan"] if (r["stage"], r["offload"], r["source"]) == (3, "optimizer+param",
                                                                                               "zero-paper"))
    assert (both["host_bytes_per_node"], both["host_fits"], both["fits"]) == (18 * 10**12, False, False)
