"""Real pastes of the libraries' performance output, one or more per family, read into the probe's fields.

The corpus's pastes are read from ``tests/corpus/<name>/console.log`` (their URL in its ``expected.json``); the
others are excerpts copied from the public issue named beside them, as the search tool returned the issue's text
(whole lines only; whitespace inside a line may differ from the page). The figures checked are ones the parser
has to work out: ms → s, which timer is the whole and which a part, the step a line belongs to.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.sources.test_perf_families import events_of

CORPUS = Path(__file__).resolve().parents[1] / "corpus"

# https://github.com/EleutherAI/gpt-neox/issues/126 (DeeperSpeed's pipeline engine; "comms" 85 % of train_batch)
NEOX_126 = ("rank=0 time (ms) | train_batch: 87510.72 | batch_input: 78.66 | forward: 2844.74 | pipe_send_output: "
            "5377.75 | comms: 74766.41 | pipe_recv_grad: 10826.45 | backward: 8724.91 | reduce_tied_grads: 0.80 | "
            "reduce_grads: 29651.29 | step: 29300.81 | _step_clipping: 0.20 | _step_step: 29295.69 | "
            "_step_zero_grad: 2.97 | _step_check_overflow: 0.80M \n")
# https://github.com/bigcode-project/Megatron-LM/issues/28 (Megatron's min/max block, pasted without its header)
BIGCODE_28 = """\
    forward-backward ...............................: (5164.84, 5177.15)
    forward-compute ................................: (2584.92, 2735.66)
    backward-compute ...............................: (2423.13, 2586.40)
    batch-generator ................................: (408.98, 817.78)  <---
    data-iterator ..................................: (3.90, 43.10)
    broadcast-data .................................: (395.41, 776.42)  <---
    layernorm-grads-all-reduce .....................: (0.02, 0.03)
    embedding-grads-all-reduce .....................: (0.03, 0.04)
    grads-all-reduce ...............................: (193.33, 193.63)
    optimizer-copy-to-main-grad ....................: (10.61, 10.67)
    optimizer-unscale-and-check-inf ................: (36.12, 36.37)
    optimizer-clip-main-grad .......................: (2.90, 3.00)
    optimizer-count-zeros ..........................: (0.00, 0.01)
    optimizer-inner-step ...........................: (17.63, 17.73)
    optimizer-copy-main-to-model-params ............: (4.63, 4.72)
    optimizer ......................................: (72.92, 73.13)
"""
# https://github.com/NVIDIA/nccl/issues/743 (Megatron-LM 2021-2022: the single timer line, then iteration 30's)
NCCL_743 = """\
time (ms) | forward-compute: 58.16 | backward-compute: 42.66 | backward-params-all-reduce: 21.43 |
backward-layernorm-all-reduce: 0.02 | backward-embedding-all-reduce: 0.03 | backward-reduce-model-grads: 21.52 |
backward-gather-model-params: 0.00 | optimizer-copy-to-main-grad: 5.67 | optimizer-unscale-and-check-inf: 3.74 | optimizer-clip-main-grad: 1.15 | optimizer-count-zeros: 0.00 | optimizer-inner-step: 46.00 | optimizer-copy-main-to-model-params: 0.83 | optimizer: 57.50 | batch-generator: 5.24
[Rank 0] (after 20 iterations) memory (MB) | allocated: 6245.033203125 | max allocated: 6245.0361328125 | reserved:
6554.0 | max reserved: 6554.0
 iteration       30/ 1000000 | consumed samples:          120 | elapsed time per iteration (ms): 123.4 | learning rate:
 1.111E-07 | global batch size:     4 | lm loss: 1.012573E+01 | sop loss: 6.911852E-01 | loss scale: 16384.0 | number of
 skipped iterations:   1 | number of nan iterations:   0 |
"""

# https://github.com/NVIDIA/Megatron-LM/issues/756 (Mixtral 8x7B on 16 H100s, --log-throughput: iterations 71-73)
MEGATRON_756 = """\
 [2024-04-06 03:02:12] iteration       71/     100 | consumed samples:         9088 | elapsed time per iteration (ms): 5361.6 | throughput per GPU (TFLOP/s/GPU): 243.6 | learning rate: 1.420000E-05 | global batch size:   128 | lm loss: 1.818812E+00 | load_balancing_loss: 1.013377E+00 | loss scale: 1.0 | grad norm: 1.300 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-04-06 03:02:18] iteration       72/     100 | consumed samples:         9216 | elapsed time per iteration (ms): 5470.7 | throughput per GPU (TFLOP/s/GPU): 238.7 | learning rate: 1.440000E-05 | global batch size:   128 | lm loss: 1.820313E+00 | load_balancing_loss: 1.019612E+00 | loss scale: 1.0 | grad norm: 1.305 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
 [2024-04-06 03:02:24] iteration       73/     100 | consumed samples:         9344 | elapsed time per iteration (ms): 5829.9 | throughput per GPU (TFLOP/s/GPU): 224.0 | learning rate: 1.460000E-05 | global batch size:   128 | lm loss: 1.798953E+00 | load_balancing_loss: 1.010977E+00 | loss scale: 1.0 | grad norm: 1.539 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""


# https://github.com/lucidrains/DALLE-pytorch/pull/302 (DeepSpeed 0.4's flops profiler: "params per gpu", "fwd flops
# per GPU = 2 * fwd MACs per GPU"; the excerpt's Notations lines are left out, its rows are whole)
DALLE_302 = """\
-------------------------- DeepSpeed Flops Profiler --------------------------
Profile Summary at step 10:
world size:                                                   1
data parallel size:                                           1
model paralel size:                                           1
batch size per GPU:                                           80
params per gpu:                                               336.23 M
params of model = params per GPU * mp_size:                   336.23 M
fwd MACs per GPU:                                             3139.93 G
fwd flops per GPU = 2 * fwd MACs per GPU:                     6279.86 G
fwd flops of model = fwd flops per GPU * mp_size:             6279.86 G
"""


def _steps(path: Path) -> dict[int, dict]:
    return {e["step"]: e for e in events_of(path) if e["kind"] == "step"}


def _near(got: dict, **want: float) -> None:
    wrong = {k: (got.get(k), v) for k, v in want.items()
             if got.get(k) is None or not math.isclose(got[k], v, rel_tol=1e-6)}
    assert not wrong, f"(read, expected) {wrong}"


def _pasted(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "console.log"
    path.write_text(text, encoding="utf-8")
    return path


def test_zero2_timers_glued_to_tqdm_add_the_optimizer_allgather() -> None:
    """accelerate#1589: the optimizer line after step 1's global line belongs to step 2, its all-gather to comm_s."""
    steps = _steps(CORPUS / "accelerate-1589-zero2-timers" / "console.log")
    _near(steps[1], fwd_s=0.02741, bwd_s=0.07344, optim_s=0.07282, comm_s=0.0224)
    _near(steps[2], fwd_s=0.02746, bwd_s=0.0736, optim_s=0.0726, comm_s=0.0225 + 0.00796,
          step_time_s=0.02746 + 0.0736 + 0.0726)


def test_zero3_offload_step_is_the_engine_step_not_its_parts() -> None:
    """DeepSpeed#1635: update_optims sits inside optimizer_step, and the engine's step holds both."""
    (step,) = _steps(CORPUS / "ds-1635-cpu-adam-step-dominates" / "console.log").values()
    _near(step, fwd_s=0.3766, bwd_s=0.86456, optim_s=22.88087, comm_s=0.05762)


def test_fp16_optimizer_parts_make_the_optimizer_step() -> None:
    """DeepSpeed#4132: the fp16 optimizer's STEP_TIMERS alone, no engine line: their sum is the step."""
    steps = _steps(CORPUS / "heldout3-ds-4132-healthy-optimizer-step-timers" / "console.log")
    _near(steps[1], optim_s=(2.99 + 8.91 + 5.07 + 19.65 + 4.56) / 1000)


def test_deeperspeed_pipeline_comms_are_85_percent_of_train_batch(tmp_path: Path) -> None:
    """gpt-neox#126: ``comms`` is the whole of the line's communication, ``train_batch`` the step."""
    (step,) = _steps(_pasted(tmp_path, NEOX_126)).values()
    _near(step, step_time_s=87.51072, comm_s=74.76641, fwd_s=2.84474, bwd_s=8.72491, optim_s=29.30081,
          data_s=0.07866)
    assert step["comm_s"] / step["step_time_s"] == pytest.approx(0.854, abs=1e-3)


def test_megatron_min_max_rows_without_their_header(tmp_path: Path) -> None:
    """bigcode Megatron-LM#28: the slowest rank's times; the rows' "<---" marks do not end the block."""
    (step,) = _steps(_pasted(tmp_path, BIGCODE_28)).values()
    _near(step, fwd_s=2.73566, bwd_s=2.5864, optim_s=0.07313, data_s=0.81778, comm_s=(0.03 + 0.04 + 193.63) / 1000)


def test_megatron_single_timer_line_and_its_iteration(tmp_path: Path) -> None:
    """nccl#743: reduce-model-grads is the whole of the three all-reduces beside it, and runs between the backward
    and the optimizer (train_step, 2020-2022): the step is the four; iteration 30 keeps its own."""
    steps = _steps(_pasted(tmp_path, NCCL_743))
    _near(steps[1], fwd_s=0.05816, bwd_s=0.04266, optim_s=0.0575, data_s=0.00524, comm_s=0.02152,
          step_time_s=0.05816 + 0.04266 + 0.02152 + 0.0575)
    _near(steps[30], step_time_s=0.1234, loss=10.12573)


def test_megatron_deepspeed_2019_names() -> None:
    """DeepSpeed#650: Megatron's 2019 names ("batch generator" with a space) are Megatron's, not DeepSpeed's."""
    (step,) = _steps(CORPUS / "heldout9-ds-650-megatron-timer-optimizer-dominates" / "console.log").values()
    _near(step, fwd_s=0.20771, bwd_s=3.5091, optim_s=38.73877, data_s=0.00465)


def test_throughput_line_memory() -> None:
    """DeepSpeed#3742 (Megatron-DeepSpeed): the 0.8+ throughput line's memory, its step numbered by it."""
    events = events_of(CORPUS / "ds-3742-bf16-megatron-healthy-step" / "console.log")
    (step,) = [e for e in events if e["kind"] == "step" and "mem_allocated_bytes" in e]
    assert step["step"] == 34
    assert step["mem_allocated_bytes"] == int(59.65 * (1 << 30))
    assert step["mem_peak_bytes"] == int(63.31 * (1 << 30))


def test_comms_logger_table() -> None:
    """DeepSpeed#2012: six broadcast rows, the first of them "0B" (convert_size(0), no space), bytes as count ×
    message size (KB and MB powers of 1024)."""
    comm = [e for e in events_of(CORPUS / "ds-2012-comms-logger-broadcast-only" / "console.log") if e["kind"] == "comm"]
    assert {e["op"] for e in comm} == {"broadcast"}
    assert sum(e["count"] for e in comm) == 2 + 146 + 24 + 1 + 24 + 24
    assert sum(e["bytes"] for e in comm) == (146 * 2048 + 24 * 6144 + int(6.31 * 1024) + 24 * 8192
                                             + 24 * 2 * (1 << 20))
    assert sum(e["total_s"] for e in comm) == pytest.approx((0.19 + 11.12 + 1.84 + 0.12 + 1.85 + 2.05) / 1000)


def test_flops_profiler_summary_of_0_4(tmp_path: Path) -> None:
    """DALLE-pytorch#302: the old row names, the summary cut before its latencies, ended by the file's end."""
    (profile,) = [e for e in events_of(_pasted(tmp_path, DALLE_302)) if e.get("what") == "flops_profile"]
    assert profile["step"] == 10
    assert profile["data"] == {"params_per_gpu": 336_230_000, "params": 336_230_000, "fwd_flops": 6_279_860_000_000}


def test_megatron_throughput_per_gpu(tmp_path: Path) -> None:
    """Megatron-LM#756: each iteration's 'throughput per GPU (TFLOP/s/GPU)' lands on its step."""
    steps = _steps(_pasted(tmp_path, MEGATRON_756))
    assert {step: steps[step]["tflops"] for step in (71, 72, 73)} == {71: 243.6, 72: 238.7, 73: 224.0}
    _near(steps[73], step_time_s=5.8299, loss=1.798953)
