"""The text dialects on lines people pasted into public issues (``tests/corpus``): the numbers the parser
has to work out — a step from a tqdm bar, a message rich or a terminal wrapped, a kill signal."""

from __future__ import annotations

from pathlib import Path

from zerodoctor.pipeline.diagnose import diagnose
from zerodoctor.pipeline import Pipeline, rules_from
from zerodoctor.store.db import open_engine
from zerodoctor.sources.batches import make_parser, read_batches
from zerodoctor.messages.oom import oom_numbers
from tests.conftest import parsed

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
RULES = rules_from()


def events(path: Path) -> list[dict]:
    batches = list(read_batches(path, make_parser("text", "t")))
    assert not [r for b in batches for r in b.rejected]
    return parsed(batches)


def test_an_overflow_glued_to_a_tqdm_bar_is_the_step_after_the_bar_and_the_dynamic_scaler(tmp_path: Path) -> None:
    # One line of CarperAI/trlx#342: the bar says 1044 steps are done, the scaler reduces 128 -> 64.
    line = (CORPUS / "trlx-342-two-late-overflows" / "console.log").read_text().splitlines()[1]
    log = tmp_path / "console.log"
    log.write_text(line + "\n")
    found = events(log)
    steps = [e for e in found if e["kind"] == "step"]
    assert [(s["step"], s["overflow"], s["loss_scale"]) for s in steps] == [(1045, True, 128.0)]
    assert any(e.get("what") == "dynamic_loss_scaler" for e in found)
    report = diagnose([log], rules=RULES)
    # One overflow of a dynamic scaler is the scaler working: no static-scale finding, no error.
    assert "ZD203" not in {f.rule for f in report.findings}
    assert not [f for f in report.findings if f.severity == "error"]


def test_a_batch_assertion_wrapped_by_rich_across_three_lines_is_read_whole() -> None:
    found = events(CORPUS / "starcoder-77-batch-assertion-rich-wrapped" / "console.log")
    batch = [e["data"] for e in found if e.get("what") == "batch_assertion"]
    assert batch == [{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                      "gradient_accumulation_steps": 8, "world_size": 1}]


def test_a_watchdog_message_wrapped_inside_its_timeout_is_joined() -> None:
    found = events(CORPUS / "sglang-3424-nccl-timeout-wrapped" / "console.log")
    timeouts = [(e["rank"], e["data"]["op"], e["data"]["seq"], e["data"]["timeout_s"])
                for e in found if e.get("what") == "collective_timeout"]
    assert timeouts == [(4, "_ALLGATHER_BASE", 1522789, 600.0)]


def test_launcher_and_torchrun_exit_lines_give_the_rank_and_the_signal() -> None:
    killed = [e for e in events(CORPUS / "ds-3232-sigkill-return-code-9" / "console.log") if e["kind"] == "run_end"]
    assert [(e["exit_code"], e["signal"]) for e in killed] == [(-9, 9)]
    failed = [e for e in events(CORPUS / "starcoder-41-batch-assertion" / "console.log") if e["kind"] == "run_end"]
    assert [(e["rank"], e["exit_code"], e.get("signal")) for e in failed] == [(0, 1, None)]


def test_a_signal_in_torchruns_failure_box_is_the_rank_of_its_entry() -> None:
    # open-mmlab/mmsegmentation#3106: the box lists ranks 1 and 2, each "traceback : Signal 6 (SIGABRT)"; a line
    # of the box names no rank itself, and read alone both were rank 0's, which the box does not list.
    found = events(CORPUS / "mmsegmentation-3106-sigabrt-exitcode-6" / "console.log")
    fatal = [(e["rank"], e["data"]["family"]) for e in found if e.get("what") == "fatal"]
    ended = sorted(e["rank"] for e in found if e["kind"] == "run_end")
    assert sorted(fatal) == [(rank, "process_aborted") for rank in ended]


def test_an_mpirun_tag_gives_the_rank_even_inside_the_exception_line() -> None:
    # deepspeedai/DeepSpeed#1834, under Open MPI's mpirun --tag-output: "[1,19]<stderr>:RuntimeError[1,19]<stderr>::
    # NCCL communicator was aborted on rank 19." (the tag again where Python's second write began). Read as rank 0's.
    path = CORPUS / "heldout7-ds-1834-mpirun-prefix-communicator-aborted" / "console.log"
    found = [(e["rank"], e["type"], e["message"]) for e in events(path) if e["kind"] == "exception"]
    assert found == [(19, "RuntimeError", "NCCL communicator was aborted on rank 19.")]
    (finding,) = [f for f in diagnose([path], rules=RULES).findings if f.rule == "ZD909"]
    assert finding.ranks == [19] and "<stderr>" not in finding.message


def test_a_failure_quoted_in_the_line_is_the_quoted_words() -> None:
    # pytorch/pytorch#131755: "… include/alloc.h:125 NCCL WARN Cuda failure 700 'an illegal memory access was
    # encountered'". From the family's word on, ZD903 printed "illegal memory access was encountered'".
    path = CORPUS / "heldout7-pytorch-131755-nccl-warn-cuda-failure-700" / "console.log"
    (finding,) = [f for f in diagnose([path], rules=RULES).findings if f.rule == "ZD903"]
    assert finding.evidence["fatal.message"] == "an illegal memory access was encountered"


def test_the_memory_cap_of_a_fraction_limited_process_is_read() -> None:
    # PyTorch 2.11 on an H200 capped at 6 GiB (samples/gpu-capacity-oom-h200): free says 132 GiB, the cap 6.
    numbers = oom_numbers("CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 139.80 GiB "
                          "of which 132.55 GiB is free. Including non-PyTorch memory, this process has 7.25 GiB memory "
                          "in use. 6.00 GiB allowed; Of the allocated memory 5.95 GiB is allocated by PyTorch, and "
                          "24.86 MiB is reserved by PyTorch but unallocated.")
    assert numbers["allowed_bytes"] == 6 << 30
    assert numbers["reserved_bytes"] - numbers["allocated_bytes"] == int(24.86 * (1 << 20))


def test_a_crash_signature_is_reported_once_per_rank_with_its_numbers() -> None:
    found = [e for e in events(CORPUS / "glm-136-resume-world-size" / "console.log") if e.get("what") == "crash"]
    assert [e["data"] for e in found] == [{"signature": "resumed_on_other_world_size", "saved_world_size": 256,
                                           "world_size": 2}]
    rich = [e for e in events(CORPUS / "ds-2006-aio-short-swap-interleaved" / "console.log")
            if e.get("what") == "crash"]
    assert [e["data"] for e in rich] == [{"signature": "aio_short_read", "buffer_bytes": 16777216,
                                          "file_bytes": 8388608}]


def test_the_engine_setup_lines_say_offloaded_optimizer_and_stage(tmp_path: Path) -> None:
    # OpenRLHF/OpenRLHF#841: no config dump, but DeepSpeed names the optimizer it built and the ZeRO stage.
    log = CORPUS / "openrlhf-841-zero2-cpuadam-startup" / "console.log"
    setup = [e["data"] for e in events(log) if e.get("what") == "engine_setup"]
    assert setup == [{"optimizer": "DeepSpeedCPUAdam"}, {"zero_stage": 2}]
    engine = open_engine(tmp_path / "store.db")
    pipeline = Pipeline(engine, RULES)
    pipeline.ingest([(log, "text")])
    (judged,) = [pipeline.judge(name) for name in pipeline.views]
    engine.dispose()
    assert judged.values["offload.optimizer"] is True and judged.values["run.zero_stage"] == 2
    assert not [f for f in judged.findings if f.severity in ("warning", "error")]


def test_an_older_throughput_line_gives_its_step_memory_not_a_step_number() -> None:
    # deepspeedai/DeepSpeed#2302: "step=1248, skipped=0" then the pre-0.9 "0/1248, RunningAvgSamplesPerSec=…" form.
    steps = [e for e in events(CORPUS / "ds-2302-healthy-progress-throughput" / "console.log") if e["kind"] == "step"]
    assert [(s["step"], s["mem_allocated_bytes"], s["mem_peak_bytes"]) for s in steps] == [
        (1248, int(0.08 * (1 << 30)), int(0.08 * (1 << 30)))]
