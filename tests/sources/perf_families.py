"""Performance output of DeepSpeed and Megatron, built from the format strings in the libraries' own source.

None of this was pasted by anyone: each record is a library's format string filled with chosen values, exactly
as that version prints it (the file and versions are named per output); how a console wraps it is
``test_perf_families.py``'s part. ``expect`` is what the step or comm events must carry, computed by hand from
the values: sums over micro-batches, ms → s, MiB → bytes, the intervals the parser has to work out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

GIB = 1 << 30


@dataclass(frozen=True)
class PerfOutput:
    """One library version's performance output: ``records`` in print order (a record may span lines);
    ``expect`` the fields of the step (``step`` names which) or the comm events (``kind='comm'``, per op)."""

    family: str
    versions: str
    source: str
    records: tuple[str, ...]
    expect: dict[str, Any]
    kind: str = "step"
    variant: str = ""
    comm: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind "comm": per op
    data: dict[str, Any] = field(default_factory=dict)  # kind "log": the event's data


def _ds_line(prefix: str, pairs: list[tuple[str, float]]) -> str:
    """utils/timer.py SynchronizedWallClockTimer.log: ``string += " | {}: {:.2f}".format(name, elapsed_time)``."""
    return prefix + "time (ms)" + "".join(f" | {name}: {ms:.2f}" for name, ms in pairs)


LOG_DIST = "[2024-05-01 10:00:{:02d},123] [INFO] [logging.py:96:log_dist] [Rank 0] "
MICRO = [("fwd_microstep", 50.0), ("bwd_microstep", 120.0), ("bwd_inner_microstep", 100.0),
         ("bwd_allreduce_microstep", 20.0), ("step_microstep", 0.5)]
GLOBAL = [("fwd", 100.0), ("bwd", 240.0), ("bwd_inner", 200.0), ("bwd_allreduce", 40.0), ("step", 900.0)]
OLD = {"fwd": "forward", "bwd": "backward", "bwd_inner": "backward_inner", "bwd_allreduce": "backward_allreduce"}


def _old(pairs: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The names before 0.10.1 (b354c28b7): forward, backward, … and their _microstep forms."""
    out = []
    for name, ms in pairs:
        base = name.removesuffix("_microstep")
        out.append((OLD.get(base, base) + ("_microstep" if name.endswith("_microstep") else ""), ms))
    return out


# Two micro-batches, ZeRO-2's optimizer line, the global line (engine.py step(): micro timers logged at every
# micro-step, ZeRO's optimizer timers inside the boundary step, then the global timers).
ZERO2_STEP = {"fwd_s": 0.1, "bwd_s": 0.24, "optim_s": 0.9, "comm_s": 0.04 + 0.03, "step_time_s": 1.24}
OPTIM = [("optimizer_allgather", 30.0), ("optimizer_gradients", 5.0), ("optimizer_step", 850.0)]


def _boundary(micro: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The boundary micro-step's line: its step timer holds the optimizer step."""
    return [(name, 900.0 if name.startswith("step") else ms) for name, ms in micro]


def _engine(versions: str, prefix: str, names: list[tuple[str, float]], micro: list[tuple[str, float]],
            variant: str = "") -> PerfOutput:
    return PerfOutput("deepspeed_wall_clock_breakdown", versions,
                      "deepspeed/utils/timer.py SynchronizedWallClockTimer.log; runtime/engine.py step(); "
                      "runtime/zero/stage_1_and_2.py OPTIMIZER_TIMERS",
                      (_ds_line(prefix, micro), _ds_line(prefix, OPTIM), _ds_line(prefix, _boundary(micro)),
                       _ds_line(prefix, names)), ZERO2_STEP, variant=variant)


def convert_size(size_bytes: int) -> str:
    """utils/comms_logging.py convert_size (0.7.0+): powers of 1024, rounded to 2 decimals, "0B" for nothing."""
    if size_bytes == 0:
        return "0B"
    names = ("B", "KB", "MB", "GB", "TB")
    i = int(math.floor(math.log(size_bytes, 1024)))
    return "%s %s" % (round(size_bytes / math.pow(1024, i), 2), names[i])


def _trim_mean(data: list[float], trim: float = 0.1) -> float:
    """utils/timer.py trim_mean: the mean of the sorted values, round(n * trim) cut from each end."""
    data, k = sorted(data), int(round(len(data) * trim))
    kept = data[k:len(data) - k]
    return sum(kept) / len(kept)


def comms_table(calls: list[tuple[str, int, float]], running: bool, world: int = 2) -> tuple[str, ...]:
    """DeepSpeed's comms logger summary of ``calls`` (op, message bytes, ms, in call order): ``comm/comm.py``
    ``timed_op`` appends ``timers(op).elapsed(reset=False)`` per call, which is the call's own latency until
    0.18.2 and the op's running total since 0.18.3 (``running``: ``utils/timer.py`` 6eb98aaf0 stopped clearing
    the timer's records); ``utils/comms_logging.py`` ``log_all`` prints per (op, size) their sum, their trimmed mean
    and ``calc_bw_log``'s trimmed-mean bandwidths (all-gather and reduce-scatter: ``size * n`` over the time)."""
    records: dict[str, dict[int, list[tuple[float, float, float]]]] = {}
    spent: dict[str, float] = {}
    for op, size, ms in calls:
        spent[op] = spent.get(op, 0.0) + ms
        latency = spent[op] if running else ms
        moved = size * world if op in ("all_gather_into_tensor", "reduce_scatter_tensor") else size
        tput = moved / latency * 8 / 1e6
        records.setdefault(op, {}).setdefault(size, []).append((latency, tput, tput * (world - 1) / world))
    head = "{: <20}" * 7
    row = "{: <20}{: <20}{: <20}{: <20.2f}{: <20.2f}{: <20.2f}{: <20.2f}"
    lines = [head.format("Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)",
                         "tput_avg (Gbps)", "busbw_avg (Gbps)")]
    for op, sizes in records.items():
        lines.append(op)
        for size, vals in sorted(sizes.items()):
            lat, tput, busbw = (list(v) for v in zip(*vals))
            lines.append(row.format(" ", convert_size(size), len(vals), sum(lat), _trim_mean(lat), _trim_mean(tput),
                                    _trim_mean(busbw)))
    return tuple(lines)


# A ZeRO-3 run of 10 steps as DeepSpeed 0.18-0.19 prints it under wall_clock_breakdown and the comms logger: per
# step stage3.py's optimizer line (optimizer_step alone), the engine's micro-step and global lines, and in the
# step 8 parameter all-gathers of 32 MiB at 45 ms and 4 gradient reduce-scatters of 64 MiB at 30 ms; the summary
# after the last step. The all-gathers take 360 ms of each 1.4 s step: 25.7 %.
ZERO3_STEPS = 10
ZERO3_MICRO = [("fwd_microstep", 400.0), ("bwd_microstep", 800.0), ("bwd_inner_microstep", 760.0),
               ("bwd_allreduce_microstep", 40.0), ("step_microstep", 200.0)]
ZERO3_CALLS = [call for _ in range(ZERO3_STEPS) for call in
               [("all_gather_into_tensor", 32 << 20, 45.0)] * 8 + [("reduce_scatter_tensor", 64 << 20, 30.0)] * 4]


VERSION_LINE = "[2025-12-20 10:00:00,000] [INFO] [logging.py:107:log_dist] [Rank 0] DeepSpeed info: version={}, " \
               "git-hash=unknown, git-branch=unknown"


def zero3_console(running: bool) -> tuple[str, ...]:
    """The ZeRO-3 run's console (rank 0's lines, print_dist's "[Rank 0] " prefix), its summary as ``running``."""
    steps = [line for _ in range(ZERO3_STEPS) for line in (
        _ds_line("[Rank 0] ", [("optimizer_step", 180.0)]), _ds_line("[Rank 0] ", ZERO3_MICRO),
        _ds_line("[Rank 0] ", [(n.removesuffix("_microstep"), ms) for n, ms in ZERO3_MICRO]))]
    return (*steps, *comms_table(ZERO3_CALLS, running))


PERF: list[PerfOutput] = [
    _engine("deepspeed 0.1-0.2", "", _old(GLOBAL), _old(MICRO)),
    _engine("deepspeed 0.3.0-0.3.11", "rank=0 ", _old(GLOBAL), _old(MICRO)),
    _engine("deepspeed 0.3.12-0.10.0", LOG_DIST.format(1) + "rank=0 ", _old(GLOBAL), _old(MICRO)),
    _engine("deepspeed 0.10.1-0.17", LOG_DIST.format(2), GLOBAL, MICRO),
    _engine("deepspeed 0.18-0.19", "[Rank 0] ", GLOBAL, MICRO, variant="print_dist"),
    # The global line missing (a paste cut before it): the micro-steps' sums (the optimizer step inside the
    # boundary micro-step's) and the optimizer line's all-gather.
    PerfOutput("deepspeed_wall_clock_breakdown", "deepspeed 0.10.1-0.19", "deepspeed/utils/timer.py; runtime/engine.py",
               (_ds_line("[Rank 0] ", MICRO), _ds_line("[Rank 0] ", OPTIM), _ds_line("[Rank 0] ", _boundary(MICRO))),
               {"fwd_s": 0.1, "bwd_s": 0.24, "optim_s": 0.9005, "comm_s": 0.04 + 0.03, "step_time_s": 1.2405},
               variant="micro_only"),
    # ZeRO-3 0.10.1+ (stage3.py OPTIMIZER_STEP_TIMER, swap timers under NVMe offload), memory_breakdown on
    # (SynchronizedWallClockTimer.memory_usage appended to the micro line, GiB with 4 decimals).
    PerfOutput("deepspeed_wall_clock_breakdown", "deepspeed 0.10.1-0.19", "deepspeed/runtime/zero/stage3.py; "
               "deepspeed/utils/timer.py memory_usage", (
                   _ds_line("[Rank 0] ", MICRO) + " | mem_allocated: 1.5000 GB | max_mem_allocated: 3.2500 GB | "
                   "cache_allocated: 4.0000 GB | max_cache_allocated: 4.0000 GB",
                   _ds_line("[Rank 0] ", [("optimizer_swap_in_state", 200.0), ("optimizer_step", 600.0),
                                          ("optimizer_swap_out_state", 150.0)]),
                   _ds_line("[Rank 0] ", [(n, ms) for n, ms in GLOBAL if n.endswith("step") or "_" not in n]
                            + [("bwd_allreduce", 40.0)])),
               {"fwd_s": 0.1, "bwd_s": 0.24, "optim_s": 0.9, "comm_s": 0.04, "mem_allocated_bytes": int(1.5 * GIB),
                "mem_peak_bytes": int(3.25 * GIB), "mem_reserved_bytes": 4 * GIB}, variant="zero3_memory"),
    # ThroughputTimer.stop (0.8.0+, 0f0e38c52), after the config dump gave train_batch_size 32: CurrSamplesPerSec
    # is the step's train_batch_size / seconds, so 25.0 samples/s is a 1.28 s step.
    PerfOutput("deepspeed_throughput", "deepspeed 0.8-0.19", "deepspeed/utils/timer.py ThroughputTimer.stop; "
               "runtime/config.py DeepSpeedConfig.print", (
                   "[2024-05-01 10:00:00,001] [INFO] [config.py:1000:print] DeepSpeedEngine configuration:",
                   "[2024-05-01 10:00:00,001] [INFO] [config.py:1004:print]   train_batch_size ............. 32",
                   ("[2024-05-01 10:00:00,001] [INFO] [config.py:1004:print]   json = {\n"
                    '    "train_batch_size": 32\n}'),
                   ("[2024-05-01 10:00:09,300] [INFO] [timer.py:264:stop] epoch=0/micro_step=40/global_step=20, "
                    "RunningAvgSamplesPerSec=24.8, CurrSamplesPerSec=25.0, MemAllocated=12.5GB, "
                    "MaxMemAllocated=30.25GB")),
               {"step": 20, "step_time_s": 1.28, "mem_allocated_bytes": int(12.5 * GIB),
                "mem_peak_bytes": int(30.25 * GIB)}),
    PerfOutput("deepspeed_throughput", "deepspeed 0.6.0-0.6.x", "deepspeed/utils/timer.py ThroughputTimer.stop "
               "(4912e0ad7)", (("[2022-05-01 10:00:09,300] [INFO] [timer.py:190:stop] 0/40, SamplesPerSec=24.8, "
                                "MemAllocated=12.5GB, MaxMemAllocated=30.25GB"),),
               {"mem_allocated_bytes": int(12.5 * GIB), "mem_peak_bytes": int(30.25 * GIB)}),
    # The pipeline engine (runtime/pipe/engine.py, 0.10.1+ names): at steps_per_print 10, its micro-step line
    # (batch_input first) and global line inside the optimizer step, then train_batch's "steps:" line, then the
    # sends and receives; every timer a total since the last print. The second interval is known (20 - 10).
    PerfOutput("deepspeed_pipeline_timers", "deepspeed 0.10.1-0.19", "deepspeed/runtime/pipe/engine.py "
               "_exec_optimizer_step, train_batch", tuple(
                   line for step in (10, 20) for line in (
                       _ds_line("[Rank 0] ", [("batch_input", 20.0), ("fwd_microstep", 1000.0),
                                              ("bwd_microstep", 2000.0), ("bwd_inner_microstep", 1900.0),
                                              ("bwd_allreduce_microstep", 100.0), ("step_microstep", 500.0)]),
                       _ds_line("[Rank 0] ", [("fwd", 1000.0), ("bwd", 2000.0), ("bwd_inner", 1900.0),
                                              ("bwd_allreduce", 100.0), ("step", 500.0)]),
                       f"steps: {step} loss: 2.3456 iter time (s): 0.512 samples/sec: 31.250",
                       _ds_line("[Rank 0] ", [("pipe_send_output", 300.0), ("pipe_send_grad", 200.0),
                                              ("pipe_recv_input", 400.0), ("pipe_recv_grad", 100.0)]))),
               {"step": 20, "step_time_s": 0.512, "loss": 2.3456, "fwd_s": 0.1, "bwd_s": 0.2, "optim_s": 0.05,
                "data_s": 0.002, "comm_s": 0.01 + 0.1}),
    # DeepSpeed's comms logger (utils/comms_logging.py log_all, 0.7.0+): f"{'Comm. Op': <20}…", the op's name
    # alone, then f"{' ': <20}{convert_size(msg_size): <20}{count: <20}{total_lat: <20.2f}…" per message size.
    # With no step timed before it, the table is read as printed: per-call latencies, as until 0.18.2.
    PerfOutput("deepspeed_comms_logger", "deepspeed 0.7-0.18.2", "deepspeed/utils/comms_logging.py log_all", (
        "{: <20}{: <20}{: <20}{: <20}{: <20}{: <20}{: <20}".format(
            "Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)",
            "busbw_avg (Gbps)"),
        "all_gather_into_tensor",
        "{: <20}{: <20}{: <20}{: <20.2f}{: <20.2f}{: <20.2f}{: <20.2f}".format(" ", "64.0 MB", 200, 1600.0, 8.0,
                                                                                 67.11, 62.91),
        "reduce_scatter_tensor",
        "{: <20}{: <20}{: <20}{: <20.2f}{: <20.2f}{: <20.2f}{: <20.2f}".format(" ", "128.0 MB", 100, 2500.0, 25.0,
                                                                                 42.95, 40.27),
        "{: <20}{: <20}{: <20}{: <20.2f}{: <20.2f}{: <20.2f}{: <20.2f}".format(" ", "2.0 KB", 10, 1.5, 0.15,
                                                                                 0.11, 0.10)),
        {}, kind="comm", comm={
            "all_gather_into_tensor": {"count": 200, "bytes": 200 * 64 * (1 << 20), "total_s": 1.6},
            "reduce_scatter_tensor": {"count": 110, "bytes": 100 * 128 * (1 << 20) + 10 * 2048, "total_s": 2.5015}}),
    # The same logger after a ZeRO-3 run's step timers, each version's way: per-call latencies (0.7-0.18.2) as
    # printed; running totals (0.18.3+) read back to the op's time, 2 Σ / (N + 1), exact at this steady rate.
    *(PerfOutput("deepspeed_comms_logger", versions, "deepspeed/utils/comms_logging.py log_all, convert_size, "
                 "calc_bw_log; deepspeed/comm/comm.py timed_op; deepspeed/utils/timer.py _get_elapsed_msec, trim_mean",
                 zero3_console(running), {}, kind="comm", variant=variant, comm={
                     "all_gather_into_tensor": {"count": 80, "bytes": 80 * (32 << 20), "total_s": 3.6},
                     "reduce_scatter_tensor": {"count": 40, "bytes": 40 * (64 << 20), "total_s": 1.2}})
      for versions, variant, running in (("deepspeed 0.7-0.18.2", "zero3_per_call", False),
                                          ("deepspeed 0.18.3-0.19", "zero3_running_totals", True))),
    # Where the log printed the version (__init__.py initialize, log_dist at INFO), it decides: 0.19.8's table with
    # no step timed before it is still read back; 0.17.5's per-call table is read as printed, though its start-up
    # broadcast (20 s, waiting for a slow rank) puts its sum beyond the steps' 14 s.
    PerfOutput("deepspeed_comms_logger", "deepspeed 0.18.3-0.19", "deepspeed/__init__.py initialize; "
               "deepspeed/utils/comms_logging.py log_all", (VERSION_LINE.format("0.19.8"),
                                                            *comms_table(ZERO3_CALLS, True)),
               {}, kind="comm", variant="version_printed", comm={
                   "all_gather_into_tensor": {"count": 80, "bytes": 80 * (32 << 20), "total_s": 3.6},
                   "reduce_scatter_tensor": {"count": 40, "bytes": 40 * (64 << 20), "total_s": 1.2}}),
    PerfOutput("deepspeed_comms_logger", "deepspeed 0.7-0.18.2", "deepspeed/__init__.py initialize; "
               "deepspeed/utils/comms_logging.py log_all", (
                   VERSION_LINE.format("0.17.5"), *zero3_console(False)[:-5],
                   *comms_table([("broadcast", 16 << 20, 20000.0), *ZERO3_CALLS], False)),
               {}, kind="comm", variant="version_printed_startup", comm={
                   "broadcast": {"count": 1, "bytes": 16 << 20, "total_s": 20.0},
                   "all_gather_into_tensor": {"count": 80, "bytes": 80 * (32 << 20), "total_s": 3.6},
                   "reduce_scatter_tensor": {"count": 40, "bytes": 40 * (64 << 20), "total_s": 1.2}}),
]

_MEG_ITER = (" iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration (ms): {:.1f} | "
             "learning rate: {:.3E} | global batch size: {:5d} | lm loss: {:.6E} | loss scale: {:.1f} | "
             "number of skipped iterations: {:3d} | number of nan iterations: {:3d} |")


def _iteration(i: int, ms: float) -> str:
    """megatron/training.py training_log's line (2021-2024 form)."""
    return _MEG_ITER.format(i, 1000, i * 64, ms, 1.5e-4, 64, 2.5, 65536.0, 0, 0)


def _rows(pairs: list[tuple[str, float, float]], max_only: bool) -> str:
    """megatron/timers.py _get_global_min_max_time_string (77efcccb93+): ljust(48, '.') names."""
    head = "max time across ranks (ms):" if max_only else "(min, max) time across ranks (ms):"
    rows = ["\n    {}: {:.2f}".format((n + " ").ljust(48, "."), hi) if max_only else
            "\n    {}: ({:.2f}, {:.2f})".format((n + " ").ljust(48, "."), lo, hi) for n, lo, hi in pairs]
    return head + "".join(rows)


NEW_TIMERS = [("forward-backward", 700.0, 720.0), ("forward-compute", 250.0, 260.0),
              ("backward-compute", 400.0, 410.0), ("layernorm-grads-all-reduce", 0.02, 0.03),
              ("embedding-grads-all-reduce", 0.03, 0.04), ("all-grads-sync", 150.0, 160.0),
              ("params-all-gather", 40.0, 45.0), ("optimizer-inner-step", 30.0, 31.0), ("optimizer", 90.0, 95.0),
              ("batch-generator", 2.0, 5.0)]
NEW_EXPECT = {"step": 20, "step_time_s": 1.0, "fwd_s": 0.26, "bwd_s": 0.41, "optim_s": 0.095, "data_s": 0.005,
              "comm_s": (0.03 + 0.04 + 160.0 + 45.0) / 1000}
OLD_TIMERS = [("forward-compute", 250.0), ("backward-compute", 400.0), ("backward-params-all-reduce", 150.0),
              ("backward-layernorm-all-reduce", 0.02), ("backward-embedding-all-reduce", 0.03),
              ("backward-reduce-model-grads", 150.1), ("backward-gather-model-params", 40.0),
              ("optimizer-inner-step", 30.0), ("optimizer", 90.0), ("batch-generator", 5.0)]

PERF += [
    PerfOutput("megatron_timers", "megatron 2020-2022-08", "megatron/training.py training_log; "
               "megatron/global_vars.py _Timers.log ('time (ms)' + ' | {}: {:.2f}')",
               (_iteration(10, 990.0), _ds_line("", [(n, ms) for n, ms in OLD_TIMERS]), _iteration(20, 1000.0),
                _ds_line("", [(n, ms) for n, ms in OLD_TIMERS])),
               {"step": 20, "step_time_s": 1.0, "fwd_s": 0.25, "bwd_s": 0.4, "optim_s": 0.09, "data_s": 0.005,
                "comm_s": (150.1 + 40.0) / 1000}),
    PerfOutput("megatron_timers", "megatron 2019-10", "megatron/training.py (73af129039) timers_to_log",
               (_iteration(10, 990.0), _ds_line("", [("forward", 250.0), ("backward", 400.0), ("allreduce", 150.0),
                                                     ("optimizer", 90.0), ("batch generator", 5.0)]),
                _iteration(20, 1000.0), _ds_line("", [("forward", 250.0), ("backward", 400.0),
                                                      ("allreduce", 150.0), ("optimizer", 90.0),
                                                      ("batch generator", 5.0)])),
               {"step": 20, "step_time_s": 1.0, "fwd_s": 0.25, "bwd_s": 0.4, "optim_s": 0.09, "data_s": 0.005,
                "comm_s": 0.15}),
    PerfOutput("megatron_timers", "megatron 2022-08-latest", "megatron/core/timers.py (megatron/timers.py "
               "77efcccb93+) _get_global_min_max_time_string; megatron/training/training.py timers_to_log",
               (_iteration(10, 990.0), _rows(NEW_TIMERS, False), _iteration(20, 1000.0), _rows(NEW_TIMERS, False)),
               NEW_EXPECT, variant="minmax"),
    PerfOutput("megatron_timers", "megatron 2022-08-latest", "megatron/core/timers.py _get_global_min_max_time_string "
               "(log_option 'max')",
               (_iteration(10, 990.0), _rows(NEW_TIMERS, True), _iteration(20, 1000.0), _rows(NEW_TIMERS, True)),
               NEW_EXPECT, variant="max"),
    PerfOutput("megatron_timers", "megatron 2022-08-latest", "megatron/core/timers.py _get_all_ranks_time_string "
               "(log_option 'all')", tuple(
                   rec for i in (10, 20) for rec in (
                       _iteration(i, 990.0 if i == 10 else 1000.0),
                       "times across ranks (ms):" + "".join(
                           f"\n  {n}:" + "".join(f"\n     rank {r:2d}: {v:.2f}"
                                                         for r, v in ((0, lo), (1, hi)))
                           for n, lo, hi in NEW_TIMERS))),
               NEW_EXPECT, variant="all"),
]

# The model's TFLOP/s per GPU on the iteration line: NVIDIA's training.py since 2748e7c7d4 (2023-11, with
# --log-throughput) prints it after the iteration time; bigcode's fork (497832129b, 2023-03) and Megatron-DeepSpeed
# print ' TFLOPs: {:.2f} |' last.
_MEG_THROUGHPUT = (" iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration (ms): {:.1f} | "
                   "throughput per GPU (TFLOP/s/GPU): {:.1f} | learning rate: {:.3E} | global batch size: {:5d} | "
                   "lm loss: {:.6E} | loss scale: {:.1f} | number of skipped iterations: {:3d} | "
                   "number of nan iterations: {:3d} |")
PERF += [
    PerfOutput("megatron_tflops", "megatron 2023-11-latest (--log-throughput)",
               "megatron/training.py (2748e7c7d4+; megatron/training/training.py) training_log", tuple(
                   _MEG_THROUGHPUT.format(i, 1000, i * 64, 1000.0, tf, 1.5e-4, 64, 2.5, 65536.0, 0, 0)
                   for i, tf in ((10, 150.0), (20, 31.4))), {"step": 20, "step_time_s": 1.0, "tflops": 31.4}),
    PerfOutput("megatron_tflops", "bigcode Megatron-LM 2023-03+, Megatron-DeepSpeed",
               "megatron/training.py (bigcode 497832129b) training_log: ' TFLOPs: {:.2f} |'", tuple(
                   _iteration(i, 1000.0) + " TFLOPs: {:.2f} |".format(tf) for i, tf in ((10, 150.0), (20, 12.35))),
               {"step": 20, "step_time_s": 1.0, "tflops": 12.35}, variant="forks"),
]

# Megatron's timers with no iteration line (Megatron-LM#184's paste is such), and with one whose elapsed time is
# shorter than them: the iteration is the sum of the outermost timers, the gradient all-reduce included where
# train_step runs it between the backward and the optimizer (2020-10 to 2022-08), or inside 'backward' (2019-10 to
# 2020-10), never shorter than its parts.
ALLREDUCE_TIMERS = [("forward-compute", 300.0), ("backward-compute", 300.0), ("backward-params-all-reduce", 2600.0),
                    ("backward-embedding-all-reduce", 0.04), ("optimizer-copy-to-main-grad", 10.0),
                    ("optimizer-unscale-and-check-inf", 700.0), ("optimizer", 850.0), ("batch-generator", 5.0)]
ALLREDUCE_EXPECT = {"fwd_s": 0.3, "bwd_s": 0.3, "optim_s": 0.85, "data_s": 0.005, "comm_s": 2.60004,
                    "step_time_s": 4.05004}
PERF += [
    PerfOutput("megatron_timers", "megatron 2020-10-2022-08", "megatron/training.py train_step, training_log "
               "timers_to_log; megatron/global_vars.py _Timers.log", (_ds_line("", ALLREDUCE_TIMERS),),
               {"step": 1, **ALLREDUCE_EXPECT}, variant="timers_alone"),
    PerfOutput("megatron_timers", "megatron 2020-10 (9d4c735a47)", "megatron/training.py train_step ('backward' "
               "wraps the all-reduces); megatron/global_vars.py _Timers.log",
               (_ds_line("", [("forward", 300.0), ("backward", 2900.0), ("backward-params-all-reduce", 2600.0),
                              ("backward-embedding-all-reduce", 0.04), ("optimizer", 850.0)]),),
               {"step": 1, "fwd_s": 0.3, "bwd_s": 2.9, "optim_s": 0.85, "comm_s": 2.60004, "step_time_s": 4.05},
               variant="backward_wraps_allreduce"),
    PerfOutput("megatron_timers", "megatron 2020-10-2022-08", "megatron/training.py training_log; "
               "megatron/global_vars.py _Timers.log",
               (_iteration(10, 3000.0), _ds_line("", ALLREDUCE_TIMERS), _iteration(20, 3000.0),
                _ds_line("", ALLREDUCE_TIMERS)), {"step": 20, **ALLREDUCE_EXPECT}, variant="timers_past_elapsed"),
]

_LINE_FMT = "{:<70}  {:<8}"  # profiling/flops_profiler/profiler.py print_model_profile's line_fmt
PERF.append(PerfOutput(
    "deepspeed_flops_profiler", "deepspeed 0.10-0.19", "deepspeed/profiling/flops_profiler/profiler.py "
    "print_model_profile, number_to_string ('{:g} {units}')", (
        "\n-------------------------- DeepSpeed Flops Profiler --------------------------",
        "Profile Summary at step 10:",
        ("Notations:\ndata parallel size (dp_size), model parallel size(mp_size),\n"
         "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
         "number of floating-point operations (flops), floating-point operations per second (FLOPS),\n"
         "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
         "step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n"),
        *(_LINE_FMT.format(name, value) for name, value in (
            ("world size: ", 8), ("data parallel size: ", 8), ("model parallel size: ", 1),
            ("batch size per GPU: ", 4), ("params per GPU: ", "1.3 B"),
            ("params of model = params per GPU * mp_size: ", "1.3 B"), ("fwd MACs per GPU: ", "10.65 TMACs"),
            ("fwd flops per GPU: ", "21.3 T"), ("fwd flops of model = fwd flops per GPU * mp_size: ", "21.3 T"),
            ("fwd latency: ", "250.5 ms"), ("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", "85.03 TFLOPS"),
            ("bwd latency: ", "510.2 ms"), ("step latency: ", "1.2 s"), ("iter latency: ", "1.96 s"))),
        "------------------------------------------------------------------------------"),
    {}, kind="log", data={"params": 1_300_000_000, "params_per_gpu": 1_300_000_000, "fwd_flops": 21_300_000_000_000,
                          "fwd_latency_s": 0.2505, "bwd_latency_s": 0.5102, "step_latency_s": 1.2,
                          "iter_latency_s": 1.96}))
