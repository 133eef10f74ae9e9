"""Sources, text: the libraries' wall-clock timer reports → the step fields of a phase split.

One table per library from timer name to the ``step`` field the probe fills for the same time, so a
signal reads a console's split and a probed run's alike: ``fwd_s``, ``bwd_s`` (the whole backward, as
the probe times ``engine.backward``), ``optim_s`` (the whole optimizer step), ``comm_s`` (collectives and
pipeline sends and receives), ``data_s`` (fetching the batch), ``step_time_s``.

DeepSpeed, ``utils/timer.py`` ``SynchronizedWallClockTimer.log``: ``time (ms) | name: 12.34 | …`` (0.1+),
``rank=N time (ms) | …`` from 0.3.0 (65c2f974d) to 0.10.0 (b354c28b7); ``memory_breakdown`` appends
`` | mem_allocated: X GB | max_mem_allocated: … | cache_allocated: … | max_cache_allocated: …`` (GiB). The
names: ``runtime/engine.py`` (``fwd``/``bwd``/``bwd_inner``/``bwd_allreduce``/``step`` and their
``_microstep`` forms since 0.7; ``forward``/``backward``/… before), ZeRO-1/2's optimizer line
(``optimizer_allgather | optimizer_gradients | optimizer_step``, ``stage2.py`` / ``stage_1_and_2.py``), the fp16
optimizer's without ZeRO (``fp16/fused_optimizer.py``: ``compute_norm | overflow_check | unscale_and_clip |
basic_step | update_fp16``),
ZeRO-3's (``optimizer_step``, with ``optimizer_swap_in_state`` / ``optimizer_swap_out_state`` under NVMe
offload; ``update_optims`` / ``unscale_grads`` in 0.5's), the pipeline engine's (``runtime/pipe/engine.py``:
``batch_input`` first on its micro-step line, ``pipe_send_output | pipe_send_grad | pipe_recv_input |
pipe_recv_grad`` on a line of their own) and EleutherAI's DeeperSpeed fork of it, one line from
``train_batch`` to ``comms`` and ``reduce_grads``.

Megatron, ``megatron/timers.py`` (``megatron/core/timers.py`` since 2024): ``time (ms) | name: v | …``
until 2022-08 (77efcccb93), then a block: ``(min, max) time across ranks (ms):`` or ``max time across ranks
(ms):`` and one ``    name ......: (min, max)`` / ``: max`` line per timer, or ``times across ranks (ms):``
with ``  name:`` and ``     rank  N: v`` lines. Its names: 2019's ``forward | backward | allreduce |
optimizer | batch generator``, Megatron-DeepSpeed's ``backward-backward | backward-allreduce``, 2020-2022's
``forward-compute | backward-compute | backward-params-all-reduce | … | optimizer | batch-generator``, and
today's ``forward-backward | all-grads-sync | params-all-gather | … | optimizer``. Each value is per
iteration (``normalizer=args.log_interval``); the slowest rank's where a block prints min and max.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.messages.numbers import NUM
from zerodoctor.messages.units import LOGGED
from zerodoctor.sources.text import HARD_WRAP_MIN, Line, clock

TIMES = deferred(r"time \(ms\) \|")
RANK_SAID = deferred(r"\brank=(\d+) time \(ms\)")
_NAMED = deferred(rf"\| ([A-Za-z_][\w .-]*?): ({NUM})")

# DeepSpeed: the engine's global line, whose arrival ends a step.
_DS_GLOBAL = {"fwd": "fwd_s", "forward": "fwd_s", "bwd": "bwd_s", "backward": "bwd_s", "step": "optim_s",
              "bwd_allreduce": "comm_s", "backward_allreduce": "comm_s", "backward_tied_allreduce": "comm_s",
              "train_batch": "step_time_s", "batch_input": "data_s", "comms": "comm_s", "reduce_grads": "comm_s",
              "reduce_tied_grads": "comm_s", "pipe_send_output": "comm_s", "pipe_send_grad": "comm_s",
              "pipe_recv_input": "comm_s", "pipe_recv_grad": "comm_s"}
# DeeperSpeed's ``comms`` wraps its sends, receives and reductions: where printed it is the whole, not a part.
_DS_WHOLE = {"comms"}
_DS_MICRO = {**{f"{name}_microstep": key for name, key in _DS_GLOBAL.items() if key != "step_time_s"},
             "batch_input": "data_s"}
# ZeRO's optimizer line: its all-gather is communication inside the step (the probe's comm_s counts it too);
# update_optims is inside optimizer_step where both print.
_DS_OPTIM = {"optimizer_allgather": "comm_s", "optimizer_step": "optim_s", "update_optims": "optim_s",
             # runtime/fp16/fused_optimizer.py STEP_TIMERS (0.10.1+): its step, part by part
             **dict.fromkeys(("overflow_check", "compute_norm", "unscale_and_clip", "basic_step", "update_fp16"),
                             "optim_s")}
_PIPE_P2P = {"pipe_send_output", "pipe_send_grad", "pipe_recv_input", "pipe_recv_grad"}
_MEMORY = {"mem_allocated": "mem_allocated_bytes", "max_mem_allocated": "mem_peak_bytes",
           "cache_allocated": "mem_reserved_bytes"}

_MEGATRON = {"forward": "fwd_s", "forward-compute": "fwd_s", "backward": "bwd_s", "backward-compute": "bwd_s",
             "optimizer": "optim_s", "batch generator": "data_s", "batch-generator": "data_s",
             **dict.fromkeys(("allreduce", "backward-allreduce", "backward-params-all-reduce",
                              "backward-layernorm-all-reduce", "backward-embedding-all-reduce",
                              "backward-gather-model-params", "layernorm-grads-all-reduce",
                              "embedding-grads-all-reduce", "grads-all-reduce", "all-grads-sync", "params-all-gather",
                              "forward-recv", "forward-send", "backward-recv", "backward-send",
                              "forward-send-forward-recv", "forward-send-backward-recv", "backward-send-forward-recv",
                              "backward-send-backward-recv", "forward-backward-send-forward-backward-recv"), "comm_s")}
# 2020-2022's backward-reduce-model-grads wraps the three all-reduces printed beside it.
_MEGATRON_WHOLE = {"backward-reduce-model-grads": ("backward-params-all-reduce", "backward-layernorm-all-reduce",
                                                   "backward-embedding-all-reduce")}
_MEGATRON_ONLY = {"optimizer", "allreduce"}  # no DeepSpeed timer has these names, nor a space or a hyphen
# Which timers run inside which, per version of training.py: the iteration is the sum of the outermost printed.
# 2019 to 2020-10 (9d4c735a47): 'backward' wraps the all-reduces, master-grad and clip-grad; 'forward' the batch.
# 2020-10 (eed0062a09) to 2022-08: forward-compute | backward-compute | the pipeline's sends and receives |
# backward-params-all-reduce | backward-embedding-all-reduce | optimizer, one after another in train_step
# (backward-reduce-model-grads, where printed, wraps the all-reduces: _MEGATRON_WHOLE); 'optimizer' wraps
# optimizer.step()'s optimizer-* timers, 'forward-compute' the batch-generator. 2022-08 (77efcccb93) on:
# 'forward-backward' wraps the schedule (compute, sends, receives) and, from 2023-09 (805a3d5af6: all-grads-sync,
# finalize_model_grads inside the schedule) the gradient all-reduces; before that they ran between it and
# 'optimizer'. Megatron-DeepSpeed's 'backward' wraps its backward-backward and backward-allreduce.
_MEGATRON_INSIDE = {
    **dict.fromkeys(("allreduce", "backward-allreduce", "backward-backward", "backward-params-all-reduce",
                     "backward-embedding-all-reduce", "backward-master-grad", "backward-clip-grad"), ("backward",)),
    "batch generator": ("forward",), "batch-generator": ("forward-compute", "forward-backward"),
    **dict.fromkeys(("optimizer-copy-to-main-grad", "optimizer-unscale-and-check-inf", "optimizer-clip-main-grad",
                     "optimizer-count-zeros", "optimizer-inner-step", "optimizer-copy-main-to-model-params"),
                    ("optimizer",)),
    **dict.fromkeys(("forward-compute", "backward-compute", "forward-recv", "forward-send", "backward-recv",
                     "backward-send", "forward-send-forward-recv", "forward-send-backward-recv",
                     "backward-send-forward-recv", "backward-send-backward-recv",
                     "forward-backward-send-forward-backward-recv", "all-grads-sync"), ("forward-backward",)),
}
_SINCE_SYNC = ("layernorm-grads-all-reduce", "embedding-grads-all-reduce")  # inside the schedule with all-grads-sync


def zero3_optimizer(names: dict[str, float]) -> bool:
    """Whether a DeepSpeed timer line is ZeRO-3's optimizer's: ``init_optimizer_state``, logged once at start, or
    ``optimizer_step`` with no ``optimizer_allgather`` beside it (``runtime/zero/stage3.py`` since 0.5.0, and its
    ZenFlow and SuperOffload forms). ZeRO-1/2 (``stage2.py`` 0.3-0.5, ``stage_1_and_2.py`` since) start all three
    of ``optimizer_allgather | optimizer_gradients | optimizer_step`` every step, an overflowed one too, and log
    them together; no other optimizer names either timer. Under ``wall_clock_breakdown`` the line prints whatever
    the log level since 0.18.0 (``print_dist``, 9cbd3edd0), while "Creating … ZeRO stage 3 optimizer" is logged at
    INFO, below the default level since 0.17.6 (066d91205): on today's consoles it is the stage's only word."""
    return "init_optimizer_state" in names or ("optimizer_step" in names and "optimizer_allgather" not in names)


def named(text: str) -> dict[str, float]:
    """``name → milliseconds`` of a ``time (ms) | …`` line, the memory breakdown's GB included."""
    return {name: float(value) for name, value in _NAMED.findall(text)}


def is_megatron(names: dict[str, float]) -> bool:
    return any(name in _MEGATRON_ONLY or " " in name or "-" in name for name in names)


def deepspeed_line(names: dict[str, float]) -> tuple[str, dict[str, Any]] | None:
    """``(kind, fields)`` of one DeepSpeed timer line: ``timers`` (the engine's global line, or DeeperSpeed's
    whole-step one), ``micro_timers``, ``optim_timers`` or ``pipe_timers`` (the pipeline's sends and receives);
    None for a line that holds no phase (``init_optimizer_state``, the MoE forward breakdown)."""
    if any(name.endswith("_microstep") for name in names):
        kind, table = "micro_timers", _DS_MICRO
    elif not names.keys().isdisjoint(_DS_OPTIM):
        kind, table = "optim_timers", _DS_OPTIM
        if "optimizer_step" in names:
            names = {k: v for k, v in names.items() if k != "update_optims"}
    elif names.keys() <= _PIPE_P2P:
        kind, table = "pipe_timers", _DS_GLOBAL
    else:
        kind, table = "timers", _DS_GLOBAL
    fields = _seconds(names, table, _DS_WHOLE)
    for name, key in _MEMORY.items():
        if name in names:
            fields[key] = int(names[name] * LOGGED["GB"])
    if "batch_input" in names and kind == "micro_timers":
        kind = "pipe_micro_timers"  # the pipeline engine's micro-step line: its global line does not end the step
    return (kind, fields) if fields else None


def megatron_fields(names: dict[str, float]) -> dict[str, Any]:
    """The step fields of Megatron's timers, one value per name in ms; ``step_time_s`` the sum of the outermost
    timers (``_MEGATRON_INSIDE``) where they show the whole iteration: its computation and its optimizer step."""
    for whole, parts in _MEGATRON_WHOLE.items():
        if whole in names:
            names = {k: v for k, v in names.items() if k not in parts}
            names["backward-params-all-reduce"] = names.pop(whole)
    fields = _seconds(names, _MEGATRON, set())
    outer = [name for name in names if name in _MEGATRON or name == "forward-backward"]
    outer = [name for name in outer if not any(p in names for p in _MEGATRON_INSIDE.get(name, ()))
             and not (name in _SINCE_SYNC and "all-grads-sync" in names)]
    computed = "forward-backward" in outer or {"fwd_s", "bwd_s"} <= fields.keys()
    if computed and "optimizer" in outer:
        fields["step_time_s"] = sum(names[name] for name in outer) / 1000.0
    return fields


def _seconds(names: dict[str, float], table: dict[str, str], wholes: set[str]) -> dict[str, Any]:
    fields: dict[str, float] = {}
    whole = {table[name]: names[name] for name in wholes if name in names}
    for name, ms in names.items():
        key = table.get(name)
        if key is not None and key not in whole:
            fields[key] = fields.get(key, 0.0) + ms / 1000.0
    fields.update({key: ms / 1000.0 for key, ms in whole.items()})
    return fields


# How each of these lines ends: a timer's "{:.2f}", the memory breakdown's "{:.4f} GB", the throughput line's
# MaxMemAllocated; a piece a terminal cut ends anywhere else (or, by chance, there).
_WHOLE = deferred(rf"(?:: \d+\.\d\d|\d\.\d{{4}} GB|MaxMemAllocated={NUM}GB)\s*$")
MAX_PIECES = 6  # a Megatron timer line of 2020-2022 is five 80-column pieces


def whole(text: str) -> bool:
    return _WHOLE.search(text) is not None


class CutLine:
    """A performance line a terminal hard-wrapped at its width, glued back from its pieces.

    The pieces after the first carry no prefix, clock or rank of their own: a line that does (or starts a timer
    line) is the next record, and the held piece is read as it is. A line that may have been cut is read one line
    late, when the next shows whether it was.
    """

    def __init__(self) -> None:
        self.held: tuple[Line, str, int] | None = None
        self._done: Callable[[str], bool] = whole

    def hold(self, line: Line, text: str, done: Callable[[str], bool] = whole) -> None:
        """Hold ``text`` until ``done`` says it is whole."""
        self.held, self._done = (line, text, 1), done

    def holds(self, line: Line, text: str) -> bool:
        """Hold ``text`` when it may go on on the next line: it is cut short, or as wide as a terminal that cuts
        (a cut right after a value leaves a whole-looking piece, and the next one starts with its ``|``)."""
        if whole(text) and line.width < HARD_WRAP_MIN:
            return False
        self.hold(line, text)
        return True

    def take(self, line: Line) -> tuple[Line | None, bool]:
        """``(the glued line, when it is whole or can be no longer; whether ``line`` was one of its pieces)``."""
        assert self.held is not None
        first, text, pieces = self.held
        if not line.text.strip() or line.text.startswith("[") or "time (ms)" in line.text or \
                "across ranks (ms):" in line.text or clock(line.text) is not None or \
                (self._done(text) and not line.text.lstrip().startswith("|")):
            self.held = None
            # a held line no piece followed, as most are: itself (a dataclass copy per timer line was ~7% of them)
            return (first if text is first.text else dataclasses.replace(first, text=text)), False
        text, pieces = text + line.text, pieces + 1
        if self._done(text) or pieces >= MAX_PIECES:
            self.held = None
            return dataclasses.replace(first, text=text), True
        self.held = (first, text, pieces)
        return None, True


class GluesCutLines:
    """A dialect whose performance lines a terminal may cut (``cut``): ``feed`` glues a cut line back from its pieces
    and reads it whole, once, with ``_gluing`` set so that its reader does not hold it again; every other line goes
    to the dialect's own ``_feed``."""

    cut: CutLine
    _gluing: bool = False

    def feed(self, line: Line) -> list[Event]:
        if self.cut.held is not None:
            glued, piece = self.cut.take(line)
            out = self._glued(glued) if glued is not None else []
            return out if piece else out + self._feed(line)
        return self._feed(line)

    def _glued(self, line: Line) -> list[Event]:
        self._gluing = True
        try:
            return self._feed(line)
        finally:
            self._gluing = False

    def _feed(self, line: Line) -> list[Event]:
        raise NotImplementedError
