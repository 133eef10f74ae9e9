"""``zerodoctor run`` around a real fp16 DeepSpeed run: what the probe writes, checked against DeepSpeed."""

from __future__ import annotations

import math
import re

import pytest

from tests.conftest import diagnose_json
from tests.probe.conftest import record_run
from zerodoctor.events import EVENT_ADAPTER

STEPS = 30
CONFIG = {
    "train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,  # grad-accum derived: 2
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 3000, "allgather_bucket_size": 3000},
    "fp16": {"enabled": True, "initial_scale_power": 16, "hysteresis": 1},
    "comet": {"enabled": False, "api_key": "comet-SECRET-0123"},  # DeepSpeed's own CometConfig field
}
HUB_TOKEN = "hf_SECRETtoken0123"
REDACTED_CONFIG = {**CONFIG, "comet": {"enabled": False, "api_key": "<redacted>"}}


@pytest.fixture(scope="module")
def fp16_run(tmp_path_factory):
    # A summed loss overflows fp16 at 2^16: the real DynamicLossScaler calibrates down, skipping steps.
    return record_run(tmp_path_factory.mktemp("runs"), "fp16", CONFIG, "--steps", str(STEPS), "--loss", "sum",
                      "--cpu-fp16-shim", "--hub_token", HUB_TOKEN)


def steps_of(run, rank):
    return [e for e in run.events(rank) if e["kind"] == "step"]


def test_training_finished_and_every_line_is_schema_v1(fp16_run):
    assert fp16_run.finished_training(), fp16_run.stderr.decode()[-2000:]
    for rank in (0, 1):
        lines = (fp16_run.run_dir / f"rank-{rank}.jsonl").read_bytes().splitlines()
        for line in lines:
            EVENT_ADAPTER.validate_json(line)
        kinds = [e["kind"] for e in fp16_run.events(rank)]
        assert kinds[0] == "run_start" and kinds[-1] == "run_end"


def test_both_ranks_write_the_same_consecutive_steps(fp16_run):
    numbers = [[s["step"] for s in steps_of(fp16_run, rank)] for rank in (0, 1)]
    assert numbers[0] == numbers[1] == list(range(1, STEPS + 1))
    flags = [[s["overflow"] for s in steps_of(fp16_run, rank)] for rank in (0, 1)]
    assert flags[0] == flags[1]  # overflow is agreed across ranks by DeepSpeed's all-reduce


def test_overflow_count_matches_deepspeeds_skipped_steps(fp16_run):
    done = re.search(r"done: (\d+) steps, (\d+) skipped", fp16_run.console())
    assert done, fp16_run.console()[-2000:]
    skipped = sum(s["overflow"] for s in steps_of(fp16_run, 0))
    assert skipped == int(done.group(2)) > 0


def test_loss_scale_is_the_scale_used_before_the_scaler_updates(fp16_run):
    steps = steps_of(fp16_run, 0)
    assert steps[0]["loss_scale"] == 2.0 ** 16
    for this, nxt in zip(steps, steps[1:]):
        # hysteresis 1: an overflow halves the scale for the next step; a clean step keeps it
        assert nxt["loss_scale"] == (this["loss_scale"] / 2 if this["overflow"] else this["loss_scale"])


def test_micro_batches_and_samples_are_counted_not_copied_from_config(fp16_run):
    start = fp16_run.events(0)[0]
    assert start["derived"]["gradient_accumulation_steps"] == 2
    assert start["config"] == REDACTED_CONFIG and "gradient_accumulation_steps" not in start["config"]
    for s in steps_of(fp16_run, 1):
        assert (s["micro_batches"], s["samples"]) == (2, 8)


def test_timings_and_collectives_are_measured(fp16_run):
    for s in steps_of(fp16_run, 0)[1:]:
        assert 0 < s["fwd_s"] + s["bwd_s"] + s["optim_s"] <= s["step_time_s"] * 1.05
        assert 0 <= s["comm_s"] <= s["step_time_s"] * 1.05
    applied = [s for s in steps_of(fp16_run, 0) if not s["overflow"]]
    assert all(math.isfinite(s["grad_norm"]) and s["grad_norm"] > 0 for s in applied)
    comm = [e for e in fp16_run.events(0) if e["kind"] == "comm"]
    assert comm and sum(e["count"] for e in comm) > STEPS and all(e["bytes"] > 0 for e in comm if e["count"])


def test_run_start_facts_and_env_allow_list(fp16_run):
    start = fp16_run.events(1)[0]
    assert (start["rank"], start["world_size"], start["zero_stage"], start["precision"]) == (1, 2, 2, "fp16")
    assert start["params"] == 3 * (64 * 64 + 64)
    assert start["env"]["DS_ACCELERATOR"] == "cpu" and "PATH" not in start["env"]


def test_diagnose_names_the_calibration_overflows(fp16_run):
    found = {f["rule"] for f in diagnose_json(fp16_run.run_dir)["findings"]}
    assert "ZD202" in found and "ZD201" not in found


def test_a_run_whose_scaler_only_calibrated_is_judged_healthy(fp16_run):
    # ZeRO-2, fp16, grad-accum 2: start-up calibration is the scaler working, an info at most.
    for path, extra in ((fp16_run.run_dir, ()), (fp16_run.run_dir / "console.log", ("--input-format", "text"))):
        findings = diagnose_json(path, extra=extra)["findings"]
        assert [f["rule"] for f in findings if f["severity"] in ("warning", "error")] == [], path


def test_run_dir_has_meta_console_and_config_copy(fp16_run):
    import json

    meta = json.loads((fp16_run.run_dir / "meta.json").read_text())
    assert meta["exit_code"] == fp16_run.returncode
    assert json.loads((fp16_run.run_dir / "ds_config.json").read_text()) == REDACTED_CONFIG
    assert "done: 30 steps" in fp16_run.console()
    console = fp16_run.console()  # stdout and stderr interleave in the log, line by line
    assert all(line in console for line in fp16_run.stdout.decode().splitlines())


def test_a_probe_that_raises_does_not_stop_training(tmp_path, root):
    shim = root / "tests" / "shims" / "broken_probe"
    run = record_run(tmp_path, "broken", {**CONFIG, "fp16": {"enabled": False}}, "--steps", "6",
                     env={"PYTHONPATH": str(shim)})
    assert run.finished_training(), run.stderr.decode()[-2000:]
    assert "done: 6 steps" in run.console()
    assert run.stderr.decode().count("probe disabled") == 2  # once per rank, not once per step
    for rank in (0, 1):
        errors = [e for e in run.events(rank) if e["kind"] == "log" and e.get("what") == "probe_error"]
        assert len(errors) == 1 and "injected probe failure" in errors[0]["message"]
        assert not [e for e in run.events(rank) if e["kind"] == "step"]


def test_secret_flag_values_and_config_keys_are_redacted_in_every_file(fp16_run):
    written = {p.relative_to(fp16_run.run_dir): p.read_bytes() for p in fp16_run.run_dir.rglob("*") if p.is_file()}
    assert {"meta.json", "ds_config.json", "rank-0.jsonl", "rank-1.jsonl"} <= {str(p) for p in written}
    for name, data in written.items():
        if str(name) != "console.log":  # the command's own output, as it printed it
            assert b"SECRET" not in data, name
    start = fp16_run.events(0)[0]
    assert start["argv"][start["argv"].index("--hub_token") + 1] == "<redacted>"
    assert start["config"]["comet"]["api_key"] == "<redacted>"
    assert start["config"]["fp16"] == CONFIG["fp16"]  # what diagnosis reads is untouched


def test_run_dir_is_0700_and_its_files_0600(fp16_run):
    assert fp16_run.run_dir.stat().st_mode & 0o777 == 0o700
    modes = {str(p.relative_to(fp16_run.run_dir)): p.stat().st_mode & 0o777 for p in fp16_run.run_dir.rglob("*")}
    assert modes.pop(".probe") == 0o700
    assert modes and set(modes.values()) == {0o600}, modes
