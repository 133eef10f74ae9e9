"""The text dialects on fixtures written from DeepSpeed's, PyTorch's, HF's and Megatron's message templates.

Each fixture names the source file its lines come from. The parser is driven through
``read_batches`` as ``diagnose`` drives it; the numbers checked are ones the parser has to
compute (step numbering, unit conversion, reserved = allocated + unallocated), never echoes.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.pipeline import rules_from
from zerodoctor.sources.batches import make_parser, read_batches
from tests.conftest import parsed

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
RULES = rules_from()
GIB, MIB = 1 << 30, 1 << 20


def parse(name: str) -> list[dict]:
    batches = list(read_batches(LOGS / name, make_parser("text", "t")))
    assert not [r for b in batches for r in b.rejected]
    return parsed(batches)


def kind(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["kind"] == name]


def codes(name: str) -> set[str]:
    return {f.rule for f in diagnose([LOGS / name], rules=RULES).findings}


@pytest.mark.parametrize(("name", "expected", "absent"), [
    ("deepspeed_loss_scaler_calibration.log", {"ZD202"}, {"ZD201"}),
    ("deepspeed_fused_optimizer_zero0.log", {"ZD202"}, {"ZD201"}),
    ("deepspeed_collapse_min_scale_wrapped.log", {"ZD201"}, {"ZD202"}),
    ("deepspeed_loss_scaler_static_timers.log", {"ZD203"}, set()),
    ("deepspeed_stage3_timers_comms_logger.log", {"ZD301"}, set()),
    ("deepspeed_batch_assertion_rich_box.log", {"ZD101"}, set()),
    ("deepspeed_batch_assertion_pre2022.log", {"ZD101"}, set()),
    ("torch_oom_1x_runtimeerror.log", {"ZD402"}, {"ZD401"}),  # 61 MiB stranded: 0.8 % of the GPU, capacity
    ("torch_oom_2_4_fragmentation_wrapped.log", {"ZD401"}, {"ZD402"}),
    ("torch_oom_2_4_capacity_glued_ranks.log", {"ZD402"}, {"ZD401"}),
    ("nccl_watchdog_old.log", {"ZD701"}, set()),
    ("nccl_watchdog_new.log", {"ZD701"}, set()),
    ("hf_trainer_nan_loss.log", {"ZD204"}, set()),
    ("hf_deepspeed_config_mismatch.log", {"ZD106"}, {"ZD690"}),
    ("accelerate_grad_accum_update.log", {"ZD104"}, set()),
    ("deepspeed_batch_nonpositive.log", {"ZD105"}, {"ZD101"}),
    ("megatron_training_log.log", {"ZD202", "ZD204"}, {"ZD201"}),
])
def test_each_format_reaches_its_rules(name: str, expected: set[str], absent: set[str]) -> None:
    found = codes(name)
    assert expected <= found, found
    assert not (absent & found), found


def test_overflow_steps_are_numbered_and_gaps_filled_from_skipped() -> None:
    steps = kind(parse("deepspeed_loss_scaler_calibration.log"), "step")
    assert [s["step"] for s in steps] == list(range(1, 101))
    assert sum(bool(s.get("overflow")) for s in steps) == 3
    # the attempted scale is the one used for that step: 65536 twice (hysteresis), then 32768
    assert [s["loss_scale"] for s in steps if "loss_scale" in s] == [65536.0, 65536.0, 32768.0]
    assert steps[-1]["lr"] == pytest.approx(1e-4)


def test_fused_optimizer_counts_each_overflow_once() -> None:
    steps = kind(parse("deepspeed_fused_optimizer_zero0.log"), "step")
    assert [(s["step"], s["loss_scale"]) for s in steps] == [(1, 65536.0), (2, 32768.0), (3, 16384.0)]


def test_min_scale_exception_is_found_once_per_rank_through_wraps() -> None:
    events = parse("deepspeed_collapse_min_scale_wrapped.log")
    raised = kind(events, "exception")
    assert sorted(e["rank"] for e in raised) == [0, 1]
    assert all("loss scale already at minimum" in e["message"] for e in raised)
    assert [s["loss_scale"] for s in kind(events, "step")] == [16, 16, 8, 4, 2]


def test_batch_assertion_gives_the_numbers_and_world_size() -> None:
    logs = [e for e in parse("deepspeed_batch_assertion_rich_box.log") if e.get("what") == "batch_assertion"]
    assert sorted(e["rank"] for e in logs) == [0, 1]
    assert logs[0]["data"] == {"train_batch_size": 128, "train_micro_batch_size_per_gpu": 4,
                               "gradient_accumulation_steps": 8, "world_size": 2}
    nonpositive = [e for e in parse("deepspeed_batch_nonpositive.log") if e.get("what") == "batch_nonpositive"]
    assert nonpositive[0]["data"] == {"gradient_accumulation_steps": 0}


def test_timers_progress_throughput_and_memory_lines() -> None:
    events = parse("deepspeed_progress_throughput_memory.log")
    step = kind(events, "step")
    assert len(step) == 10 and step[-1]["step"] == 10
    last = step[-1]
    got = (last["fwd_s"], last["bwd_s"], last["comm_s"], last["optim_s"])
    assert got == pytest.approx((0.031, 0.062, 0.022, 0.009))
    assert last["step_time_s"] == pytest.approx(0.102)
    assert last["mem_peak_bytes"] == int(30.25 * GIB) and last["alloc_retries"] == 3
    assert sum(bool(s["overflow"]) for s in step) == 2  # skipped=2 spread into the unseen steps
    usage = [e for e in events if e.get("what") == "memory_usage"][0]["data"]
    assert usage["reserved_bytes"] == 33 * GIB


def test_static_scaler_steps_closed_by_timers() -> None:
    steps = kind(parse("deepspeed_loss_scaler_static_timers.log"), "step")
    assert len(steps) == 20 and sum(s["overflow"] is True for s in steps) == 15
    assert steps[0]["comm_s"] == pytest.approx(0.005)


def test_config_dump_and_comms_table() -> None:
    events = parse("deepspeed_stage3_timers_comms_logger.log")
    start = kind(events, "run_start")[0]
    assert (start["zero_stage"], start["precision"], start["world_size"]) == (3, "bf16", 2)
    assert start["config"]["comms_logger"] == {"enabled": True}
    comms = kind(events, "comm")
    assert [(c["op"], c["count"]) for c in comms] == [
        ("all_gather_into_tensor", 500), ("all_gather_into_tensor", 100), ("reduce_scatter_tensor", 100)]
    assert comms[0]["bytes"] == 2 * MIB * 500 and comms[0]["total_s"] == pytest.approx(0.9)


@pytest.mark.parametrize(("name", "expected"), [
    ("torch_oom_1x_runtimeerror.log", (0, 20 * MIB, int(7.93 * GIB), int(6.95 * GIB), int(7.01 * GIB))),
    ("torch_oom_2_0_cuda_oom_error.log", (3, 512 * MIB, int(39.59 * GIB), int(30.10 * GIB), int(38.90 * GIB))),
    ("torch_oom_2_1_capacty.log", (0, 2 * GIB, int(79.15 * GIB), int(70.12 * GIB), int(70.12 * GIB) + int(5.66 * GIB))),
    ("torch_oom_2_4_fragmentation_wrapped.log", (0, 2 * GIB, int(79.10 * GIB), int(61.21 * GIB),
                                                  int(61.21 * GIB) + int(16.12 * GIB))),
    ("torch_oom_units_no_gpu_index.log", (None, 512, int(7.93 * GIB), int(7.90 * GIB), int(7.91 * GIB))),
])
def test_oom_every_generation(name: str, expected: tuple) -> None:
    (oom,) = kind(parse(name), "oom")
    got = tuple(oom.get(k)
                for k in ("device", "requested_bytes", "capacity_bytes", "allocated_bytes", "reserved_bytes"))
    assert got == pytest.approx(expected, abs=2)


def test_oom_glued_ranks_are_split() -> None:
    ooms = kind(parse("torch_oom_2_4_capacity_glued_ranks.log"), "oom")
    assert [(o["rank"], o["device"]) for o in ooms] == [(0, 0), (1, 1)]
    assert ooms[0]["reserved_bytes"] - ooms[0]["allocated_bytes"] == 204 * MIB


def test_elastic_summary_exit_codes_and_signals() -> None:
    ends = kind(parse("torch_elastic_failure_summary.log"), "run_end")
    assert sorted((e["rank"], e["exit_code"], e.get("signal")) for e in ends) == [(0, 1, None), (1, -6, 6)]


def test_nccl_timeouts_once_per_rank_and_seq() -> None:
    logs = [e for e in parse("nccl_watchdog_new.log") if e.get("what") == "collective_timeout"]
    assert len(logs) == 1 and logs[0]["data"]["op"] == "_ALLGATHER_BASE" and logs[0]["data"]["timeout_s"] == 600
    report = diagnose([LOGS / "nccl_watchdog_old.log"], rules=RULES)
    (finding,) = [f for f in report.findings if f.rule == "ZD701"]
    assert finding.ranks == [0, 1, 2, 3] and finding.evidence["hang.suspect_ranks"] == [3]


# Open MPI's mpirun --tag-output as its sources format the tag, for job 1's rank 3 (the files are named where
# zerodoctor/sources/text.py reads it): ORTE's (1.x-4.x) and PMIx's (5.x) default, tag-detailed and rank forms.
MPI_TAGS = {"orte": "[1,3]<stderr>:", "pmix": "[1,3]<stdout>: ", "pmix_tag_detailed": "[1,3][node-07:41822]<stdout>: ",
            "pmix_rank": "[3]<stdout>: "}


@pytest.mark.parametrize("tag", list(MPI_TAGS.values()), ids=list(MPI_TAGS))
def test_an_mpirun_tag_before_each_line_is_the_lines_rank(tmp_path: Path, tag: str) -> None:
    plain = kind(parse("hf_trainer_nan_loss.log"), "step")
    lines = (LOGS / "hf_trainer_nan_loss.log").read_text().split("\n")
    (tmp_path / "console.log").write_text("\n".join(tag + line if line else line for line in lines))
    tagged = kind(parsed(list(read_batches(tmp_path / "console.log", make_parser("text", "t")))), "step")
    assert [s["rank"] for s in tagged] == [3] * len(plain) and len(plain) == 8
    assert [repr({**s, "rank": 0}) for s in tagged] == [repr(s) for s in plain]


def test_hf_header_and_log_dicts() -> None:
    events = parse("hf_trainer_nan_loss.log")
    (header,) = [e for e in events if e.get("what") == "trainer_batch"]
    assert header["data"]["world_size"] == 2 and header["data"]["params"] == 124_439_808
    steps = kind(events, "step")
    assert [s["step"] for s in steps] == list(range(2, 17, 2))  # from the glued tqdm bar
    assert math.isnan(steps[-1]["loss"])


def test_megatron_intervals_expand_to_iterations() -> None:
    steps = kind(parse("megatron_training_log.log"), "step")
    assert [s["step"] for s in steps] == list(range(1, 101))
    assert [s["step"] for s in steps if s["overflow"]] == [1, 2, 3, 4]
    assert steps[9]["loss_scale"] == 4096.0 and steps[9]["step_time_s"] == pytest.approx(1.2345)


def test_findings_from_text_say_how_strong_their_evidence_is() -> None:
    report = diagnose([LOGS / "torch_oom_2_4_fragmentation_wrapped.log"], rules=RULES)
    (oom,) = [f for f in report.findings if f.rule == "ZD401"]
    assert oom.to_json()["evidence_strength"] == "text: a single OOM message"
    hints = {u.rule: u.to_json().get("hint", "") for u in report.unevaluated}
    assert '"log_level": "info"' in hints["ZD201"] and "wall_clock_breakdown" in hints["ZD301"]


def test_run_directory_without_rank_files_falls_back_to_console_log(tmp_path: Path) -> None:
    run = tmp_path / "job-17"
    run.mkdir()
    (run / "console.log").write_bytes((LOGS / "nccl_watchdog_old.log").read_bytes())
    report = diagnose([run], rules=RULES)
    assert report.inputs[0].format == "text"
    assert {f.run for f in report.findings} == {"job-17"}
