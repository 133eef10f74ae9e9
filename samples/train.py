"""Sample training: a real DeepSpeed run on CPU with an optional injected fault.

Run it under ``zerodoctor run -- torchrun --nproc_per_node 2 samples/train.py --config X``;
``samples/record.py`` does, once per scenario. The script is ordinary DeepSpeed user code:
it never imports zerodoctor (the probe arrives through ``sitecustomize``).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

SHIM = Path(__file__).resolve().parents[1] / "tests" / "shims" / "cpu_fp16.py"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--config", required=True, help="DeepSpeed config JSON")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps to run")
    p.add_argument("--width", type=int, default=64, help="hidden width of the MLP")
    p.add_argument("--layers", type=int, default=2, help="hidden layers of the MLP")
    p.add_argument("--feed", type=int, default=None,
                   help="samples the loader feeds per micro-batch (default: the engine's micro-batch)")
    p.add_argument("--loss", choices=("mean", "sum"), default="mean", help="reduction of the squared error")
    p.add_argument("--loss-mult", type=float, default=1.0, help="fault: multiply the loss by this ...")
    p.add_argument("--loss-mult-from", type=int, default=0, help="... from this optimizer step on ...")
    p.add_argument("--loss-mult-above-lr", type=float, default=None,
                   help="... only while the engine's lr is above this: the divergence a too-high lr causes, made "
                        "deterministic on CPU (a lower lr, in effect, cures it)")
    p.add_argument("--cpu-fp16-shim", action="store_true", help="let DeepSpeed's CPU accelerator do fp16")
    p.add_argument("--hub_token", help="unused: as HF scripts take one to push to the Hub (the probe must redact it)")
    p.add_argument("--max_grad_norm", type=float, help="unused by the loop: TrainingArguments' flag, as HF scripts "
                                                       "that call deepspeed.initialize themselves still take it")
    p.add_argument("--loader", action="store_true", help="feed batches through a torch DataLoader")
    p.add_argument("--slow-data-rank", type=int, default=None, help="fault: this rank's loader is slower ...")
    p.add_argument("--slow-data-s", type=float, default=0.0, help="... by this many seconds per batch")
    p.add_argument("--stall-rank", type=int, default=None, help="fault: this rank stops before its forward ...")
    p.add_argument("--stall-at", type=int, default=0, help="... at this optimizer step ...")
    p.add_argument("--stall-s", type=float, default=0.0, help="... for this many seconds ...")
    p.add_argument("--stall-say-every", type=float, default=0.0,
                   help="... logging a warning every this many seconds meanwhile (a loader that retries)")
    p.add_argument("--eval-every", type=int, default=0, help="every N optimizer steps, all ranks evaluate ...")
    p.add_argument("--eval-s", type=float, default=0.0, help="... for this many seconds (forwards in eval mode)")
    p.add_argument("--save-every", type=int, default=0, help="every N optimizer steps, save a checkpoint ...")
    p.add_argument("--save-s", type=float, default=0.0, help="... on storage this many seconds slow per file")
    p.add_argument("--save-dir", default=None, help="where checkpoints go")
    p.add_argument("--load-dir", default=None, help="resume: load_checkpoint from this directory ...")
    p.add_argument("--load-tag", default=None, help="... this tag (default: the one its 'latest' file names)")
    p.add_argument("--leak-bytes", type=int, default=0, help="fault: keep this many bytes alive per step")
    p.add_argument("--host-work-s", type=float, default=0.0, help="every rank's host work per step (a soak's pace)")
    p.add_argument("--crash", choices=sorted(CRASHES), default=None, help="fault: this rank dies of this crash ...")
    p.add_argument("--crash-rank", type=int, default=1, help="... on this rank ...")
    p.add_argument("--crash-at", type=int, default=3, help="... after this optimizer step")
    p.add_argument("--crash-while-pinned", action="store_true",
                   help="... only while DeepSpeed pins the offloaded optimizer states (offload_optimizer.pin_memory):"
                        " a host that cannot lock that much memory, which ZD406's safe fix (unpinning) cures")
    return p.parse_args()


def _stall(seconds: float, say_every: float) -> None:
    """The --stall-rank fault: the rank stops, silently or saying so now and then through Python's logging
    (with its clock time, as scripts configure it), as a loader that waits for a shard does."""
    if not say_every:
        time.sleep(seconds)
        return
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        logging.getLogger("train").warning("shard not ready, retrying in %.0f s", say_every)
        time.sleep(min(say_every, left))


def _segfault() -> None:
    import ctypes

    ctypes.string_at(0)  # reads address 0: SIGSEGV in C, no Python exception


def _host_memory() -> None:
    bytearray(1 << 62)  # CPython's allocator refuses: MemoryError


def _sigkill() -> None:
    import signal

    os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does


def _device_mismatch() -> None:
    # the meta device is the one other device a CPU-only host has; cat checks its inputs' devices (matmul does not)
    torch.cat([torch.ones(2), torch.ones(2, device="meta")])


def _missing_module() -> None:
    importlib.import_module("flash_attn_not_installed_here")


class _AbortsInTeardown:
    """SIGABRT while the interpreter shuts down, after the script returned and the probe's exit hooks ran: what
    a process group still alive at exit can do (pytorch/pytorch#179291). ``os.abort`` is bound now: by the time
    module globals are cleared, ``os`` may be gone."""

    def __del__(self, abort: Callable[[], object] = os.abort) -> None:
        abort()


def _teardown_abort() -> None:
    """The rank trains on to the end; only its exit dies."""
    global _ARMED
    _ARMED = _AbortsInTeardown()


# Crashes a rank can die of on a CPU host, each the real thing (tests/probe/test_crash_families.py).
CRASHES = {"segfault": _segfault, "host-memory": _host_memory, "sigkill": _sigkill, "device-mismatch": _device_mismatch,
           "missing-module": _missing_module, "teardown-abort": _teardown_abort}


def _pins_offloaded_states(engine) -> bool:  # noqa: ANN001 - a DeepSpeedEngine
    offload = engine.zero_offload_optimizer()
    return bool(offload and offload.device != "none" and offload.pin_memory)


def build_model(width: int, layers: int) -> torch.nn.Module:
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(width, width))


class Batches(torch.utils.data.IterableDataset):
    """(input, target) pairs from a per-rank generator, ``delay_s`` slower per batch when asked."""

    def __init__(self, feed: int, width: int, dtype: torch.dtype, seed: int, delay_s: float) -> None:
        self.feed, self.width, self.dtype, self.seed, self.delay_s = feed, width, dtype, seed, delay_s

    def __iter__(self):  # noqa: ANN204
        generator = torch.Generator().manual_seed(self.seed)
        while True:
            if self.delay_s:
                time.sleep(self.delay_s)
            x = torch.randn(self.feed, self.width, generator=generator).to(self.dtype)
            yield x, torch.randn(self.feed, self.width, generator=generator)


def evaluate(engine, seconds: float, feed: int, width: int, dtype: torch.dtype) -> None:  # noqa: ANN001
    """Forwards in eval mode under no_grad until ``seconds`` have passed, as an eval loop would."""
    engine.eval()
    end = time.monotonic() + seconds
    with torch.no_grad():
        while time.monotonic() < end:
            engine(torch.randn(feed, width).to(dtype))
            time.sleep(0.5)
    engine.train()


def slow_storage(engine, seconds: float) -> None:  # noqa: ANN001
    """Checkpoint files take ``seconds`` longer each to write (a slow network filesystem)."""
    save = engine.checkpoint_engine.save

    def slow_save(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        time.sleep(seconds)
        return save(*args, **kwargs)

    engine.checkpoint_engine.save = slow_save


def main() -> None:
    args = parse_args()
    if args.cpu_fp16_shim:
        spec = importlib.util.spec_from_file_location("cpu_fp16_shim", SHIM)
        shim = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shim)
        shim.install()
    import deepspeed

    torch.manual_seed(0)
    model = build_model(args.width, args.layers)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=args.config)
    if args.load_dir:
        path, _ = engine.load_checkpoint(args.load_dir, args.load_tag)
        if engine.global_rank == 0:
            print(f"resumed from {path} at step {engine.global_steps}", flush=True)
    dtype = torch.float16 if engine.fp16_enabled() else torch.bfloat16 if engine.bfloat16_enabled() else torch.float32
    feed = args.feed or engine.train_micro_batch_size_per_gpu()
    generator = torch.Generator().manual_seed(1 + engine.global_rank)
    rank = engine.global_rank
    rank0 = rank == 0
    batches = None
    if args.loader or args.slow_data_rank is not None:
        delay = args.slow_data_s if rank == args.slow_data_rank else 0.0
        batches = iter(torch.utils.data.DataLoader(Batches(feed, args.width, dtype, 1 + rank, delay), batch_size=None))
    if args.save_s:
        slow_storage(engine, args.save_s)
    kept = []  # the --leak-bytes fault: what a loss appended without .item() keeps alive
    stalled = False
    while engine.global_steps < args.steps:
        if rank == args.stall_rank and engine.global_steps == args.stall_at and not stalled:
            stalled = True
            _stall(args.stall_s, args.stall_say_every)
        if batches is not None:
            x, target = next(batches)
        else:
            x = torch.randn(feed, args.width, generator=generator).to(dtype)
            target = torch.randn(feed, args.width, generator=generator)
        err = (engine(x).float() - target) ** 2
        loss = err.sum() if args.loss == "sum" else err.mean()
        if engine.global_steps >= args.loss_mult_from and (
                args.loss_mult_above_lr is None or engine.get_lr()[0] > args.loss_mult_above_lr):
            loss = loss * args.loss_mult
        before = engine.global_steps
        engine.backward(loss)
        engine.step()
        if engine.global_steps == before:  # a micro-batch of gradient accumulation
            continue
        if args.host_work_s:
            time.sleep(args.host_work_s)
        if args.leak_bytes:
            kept.append(torch.ones(args.leak_bytes // 4))
        if args.crash and rank == args.crash_rank and engine.global_steps == args.crash_at and (
                not args.crash_while_pinned or _pins_offloaded_states(engine)):
            print(f"step {engine.global_steps} loss {loss.item():.4f}", flush=True)
            CRASHES[args.crash]()
        if args.eval_every and engine.global_steps % args.eval_every == 0:
            evaluate(engine, args.eval_s, feed, args.width, dtype)
        if args.save_every and engine.global_steps % args.save_every == 0:
            engine.save_checkpoint(args.save_dir)
        if rank0 and engine.global_steps % 10 == 0:
            print(f"step {engine.global_steps} loss {loss.item():.4f}", flush=True)
    if rank0:
        print(f"done: {engine.global_steps} steps, {engine.skipped_steps} skipped", flush=True)
    if deepspeed.comm.comms_logger.enabled:  # the comms logger's table, as a run that turned it on prints it at the end
        deepspeed.comm.log_summary()
    if os.environ.get("SAMPLE_DESTROY_PG", "1") == "1" and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
