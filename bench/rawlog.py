"""Benchmark: the "text" parser on console logs, against plain line reading measured in the same run.

Five logs: one of ordinary lines no dialect claims (DeepSpeed-style INFO prefixes, tqdm bars,
prints — the bulk of any real console); a dense DeepSpeed log where every step prints an
OVERFLOW line, ``step=N, skipped=K``, a throughput line and two timer lines; and one per other
performance family the reader knows, every line of it that family's output, built from the
library's format strings (each writer names the file and version): the comms logger's summary
table, Megatron's iteration line with its timers, the pipeline engine's timers and ``steps:``
line. For each: the baseline (``for line in f``), the parser alone over the lines (``feed`` per
line), and the whole source stage as ``diagnose`` runs it (``read_batches``: size-capped reading,
offsets, quarantine). Target: ≥ 100 MB/s on the unclaimed log through ``read_batches``; the
performance families no slower per MB than the dense DeepSpeed log.

To compare two versions of the reader on the same files, write the logs once (``--keep DIR``)
and run this script again with ``--reuse`` under each version's ``PYTHONPATH``, interleaved.

    python bench/rawlog.py [--mb 200] [--keep DIR [--reuse]] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import math
import random
import tempfile
import time
from pathlib import Path

from zerodoctor.sources.batches import make_parser, read_batches

WORDS = ("the model layer loss epoch data loader batch worker token sample node host info warning "
         "saving checkpoint evaluating tokenizer shard cache download config").split()


def write_unclaimed(path: Path, mb: int) -> None:
    rng = random.Random(7)
    target = mb * 1_000_000
    with path.open("w") as f:
        size, i = 0, 0
        while size < target:
            i += 1
            if i % 3:
                line = (f"[2026-01-12 09:{i // 60 % 60:02d}:{i % 60:02d},{i % 1000:03d}] [INFO] "
                        f"[engine.py:{i % 900}:run] "
                        + " ".join(rng.choice(WORDS) for _ in range(10)) + "\n")
            else:
                line = f" {i % 100:3d}%|████      | {i % 1000}/1000 [01:{i % 60:02d}<02:10,  3.21it/s]\n"
            f.write(line)
            size += len(line)


def write_dense(path: Path, mb: int) -> None:
    target = mb * 1_000_000
    with path.open("w") as f:
        size, step = 0, 0
        while size < target:
            step += 1
            lines = [
                "[2026-01-12 09:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                "Skipping step. Attempted loss scale: 65536, reducing to 32768\n" if step % 50 == 0 else "",
                f"[2026-01-12 09:00:00,000] [INFO] [logging.py:107:log_dist] [Rank 0] step={step}, "
                f"skipped={step // 50}, "
                f"lr=[0.0001], mom=[(0.9, 0.999)]\n",
                f"[2026-01-12 09:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step={step}/global_step={step}, "
                f"RunningAvgSamplesPerSec=41.5, CurrSamplesPerSec=40.2, MemAllocated=12.5GB, MaxMemAllocated=30.25GB\n",
                "[Rank 0] time (ms) | fwd_microstep: 10.00 | bwd_microstep: 20.00 | bwd_inner_microstep: 15.00 | "
                "bwd_allreduce_microstep: 5.00 | step_microstep: 3.00\n",
                "[Rank 0] time (ms) | fwd: 10.00 | bwd: 20.00 | bwd_inner: 15.00 | bwd_allreduce: 5.00 | step: 3.00\n",
            ]
            text = "".join(lines)
            f.write(text)
            size += len(text)


def write_comms_logger(path: Path, mb: int) -> None:
    """DeepSpeed's comms logger summary, ``utils/comms_logging.py`` ``log_all`` (0.7.0+, read at 0.19.6): the
    header in 20-column fields, each op's name alone, then per message size
    ``f"{' ': <20}{convert_size(msg_size): <20}{count: <20}{total_lat: <20.2f}{avg_lat: <20.2f}{avg_algbw: <20.2f}"
    f"{avg_busbw: <20.2f}"``, printed bare (``print``); one table per ``log_summary()`` call."""
    header = (f"{'Comm. Op': <20}{'Message Size': <20}{'Count': <20}{'Total Latency(ms)': <20}"
              f"{'Avg Latency(ms)': <20}{'tput_avg (Gbps)': <20}{'busbw_avg (Gbps)': <20}\n")
    ops = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "broadcast")
    sizes = (2048, 4 << 20, 64 << 20)
    target = mb * 1_000_000
    with path.open("w") as f:
        size, table = 0, 0
        while size < target:
            table += 1
            rows = [header]
            for op in ops:
                rows.append(op + "\n")
                for i, msg in enumerate(sizes):
                    count = 10 * table + i
                    total = 1.5 * count + i
                    avg = total / count
                    rows.append(f"{' ': <20}{_convert_size(msg): <20}{count: <20}{total: <20.2f}{avg: <20.2f}"
                                f"{msg * 8 / avg / 1e6: <20.2f}{msg * 8 / avg / 1e6 * 0.9: <20.2f}\n")
            text = "".join(rows)
            f.write(text)
            size += len(text)


def _convert_size(size_bytes: int) -> str:
    """``utils/comms_logging.py`` ``convert_size``: "0B", else the size in the largest 1024 unit, 2 decimals."""
    if size_bytes == 0:
        return "0B"
    names = ("B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")
    i = int(math.floor(math.log(size_bytes, 1024)))
    return "%s %s" % (round(size_bytes / math.pow(1024, i), 2), names[i])


MEGATRON_TIMERS = ("forward-backward", "forward-compute", "backward-compute", "layernorm-grads-all-reduce",
                   "embedding-grads-all-reduce", "all-grads-sync", "params-all-gather",
                   "optimizer-copy-to-main-grad", "optimizer-unscale-and-check-inf", "optimizer-clip-main-grad",
                   "optimizer-inner-step", "optimizer-copy-main-to-model-params", "optimizer", "batch-generator")


def write_megatron(path: Path, mb: int) -> None:
    """Megatron-LM's per-iteration output at --log-interval 1 (read at d98e8a64dd, 2026-08):
    ``megatron/training/training.py`` ``training_log``'s iteration line (with --log-throughput), then
    ``megatron/core/timers.py`` ``_get_global_min_max_time_string``: '(min, max) time across ranks (ms):' and
    ``'\\n    {}: ({:.2f}, {:.2f})'.format((name + ' ').ljust(48, '.'), min, max)`` per timer of
    ``timers_to_log``."""
    target = mb * 1_000_000
    with path.open("w") as f:
        size, it = 0, 0
        while size < target:
            it += 1
            line = (f" [2026-01-12 09:00:{it % 60:02d}.000000] iteration {it:8d}/{10_000_000:8d} |"
                    f" consumed samples: {it * 512:12d} | elapsed time per iteration (ms): {1000.0 + it % 7:.1f} |"
                    f" throughput per GPU (TFLOP/s/GPU): {150.0 + it % 5:.1f} | learning rate: {1.5e-4:.6E} |"
                    f" global batch size: {512:5d} | lm loss: {2.5 + 1 / it:.6E} | loss scale: 1.0 |"
                    f" grad norm: {1.234:.3f} | number of skipped iterations: {0:3d} |"
                    f" number of nan iterations: {0:3d} |\n")
            timers = "(min, max) time across ranks (ms):" + "".join(
                "\n    {}: ({:.2f}, {:.2f})".format((name + " ").ljust(48, "."), 10.0 + i, 12.0 + i + it % 3)
                for i, name in enumerate(MEGATRON_TIMERS)) + "\n"
            f.write(line + timers)
            size += len(line) + len(timers)


def write_pipeline(path: Path, mb: int) -> None:
    """DeepSpeed's pipeline engine at steps_per_print 1 with wall_clock_breakdown (``runtime/pipe/engine.py``,
    read at 0.19.6): ``_exec_optimizer_step``'s micro-step line (``batch_input`` first) and global line through
    ``utils/timer.py`` ``SynchronizedWallClockTimer.log`` (``" | {}: {:.2f}"``, 0.18+'s ``[Rank 0] `` prefix),
    ``train_batch``'s ``f'steps: {…} loss: {…:0.4f} iter time (s): {…:0.3f} samples/sec: {…:0.3f}'``, then its
    sends and receives."""
    def timers(pairs: list[tuple[str, float]]) -> str:
        return "[Rank 0] time (ms)" + "".join(f" | {name}: {ms:.2f}" for name, ms in pairs) + "\n"

    target = mb * 1_000_000
    with path.open("w") as f:
        size, step = 0, 0
        while size < target:
            step += 1
            text = (timers([("batch_input", 2.0), ("fwd_microstep", 100.0 + step % 3), ("bwd_microstep", 200.0),
                            ("bwd_inner_microstep", 190.0), ("bwd_allreduce_microstep", 10.0),
                            ("step_microstep", 50.0)])
                    + timers([("fwd", 100.0 + step % 3), ("bwd", 200.0), ("bwd_inner", 190.0),
                              ("bwd_allreduce", 10.0), ("step", 50.0)])
                    + f"steps: {step} loss: {2.3456:0.4f} iter time (s): {0.512:0.3f} samples/sec: {31.25:0.3f}\n"
                    + timers([("pipe_send_output", 30.0), ("pipe_send_grad", 20.0), ("pipe_recv_input", 40.0),
                              ("pipe_recv_grad", 10.0)]))
            f.write(text)
            size += len(text)


LOGS = {"unclaimed": write_unclaimed, "dense deepspeed": write_dense, "comms logger": write_comms_logger,
        "megatron": write_megatron, "pipeline": write_pipeline}


def _rate(path: Path, run) -> tuple[float, int]:  # noqa: ANN001 - a callable taking the path
    start = time.perf_counter()
    count = run(path)
    return path.stat().st_size / 1e6 / (time.perf_counter() - start), count


def baseline(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def parser_only(path: Path) -> int:
    parser = make_parser("text", "bench")
    events = 0
    with open(path, "rb") as f:
        for line in f:
            events += len(parser.feed(line))
    return events + len(parser.finish())


def source_stage(path: Path) -> int:
    """Events and sealed step rows (``Batch.seal`` moves the steps into columns)."""
    return sum(len(b.events) + sum(c.n for c in b.columns.values())
               for b in read_batches(path, make_parser("text", "bench")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="size of each log in MB")
    ap.add_argument("--keep", type=Path, help="write the logs here instead of a temporary directory")
    ap.add_argument("--reuse", action="store_true", help="with --keep: read the logs already there, write none")
    ap.add_argument("--only", nargs="+", choices=sorted(LOGS), help="measure these logs only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        where = args.keep or Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        logs = {name: where / (name.replace(" ", "_") + ".log") for name in args.only or LOGS}
        for name, path in logs.items():
            if not (args.reuse and path.exists()):
                LOGS[name](path, args.mb)
        print(f"{'log':<16} {'MB':>6} {'for line in f':>14} {'parser feed':>12} {'read_batches':>13} "
              f"{'feed/base':>10} {'batches/base':>13} {'events':>9}")
        for name, path in logs.items():
            base, _ = _rate(path, baseline)
            feed, _ = _rate(path, parser_only)
            stage, events = _rate(path, source_stage)
            print(f"{name:<16} {path.stat().st_size / 1e6:>6.0f} {base:>11.0f} MB/s {feed:>7.1f} MB/s "
                  f"{stage:>8.1f} MB/s "
                  f"{feed / base:>10.3f} {stage / base:>13.3f} {events:>9}")


if __name__ == "__main__":
    main()
