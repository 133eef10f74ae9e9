"""Sources, text: DeepSpeed's console messages, every generation → step, log and exception events.

Message templates (DeepSpeed 0.19.8 unless said): ``runtime/fp16/loss_scaler.py`` (OVERFLOW
lines, the static scaler's "Gradients are non-finite" — bf16's too, 0.19.6+ —, "Current loss scale already at
minimum"), ``runtime/fp16/fused_optimizer.py`` / ``unfused_optimizer.py`` ("Grad overflow on
iteration", "Reducing dynamic loss scale", older "Overflow detected" and "fp16 dynamic loss
scale overflow!"), pre-0.4 ZeRO's ``[deepscale] OVERFLOW!``, ``runtime/config.py`` (batch
assertion, "has to be greater than 0"), ``runtime/engine.py`` (``step=N, skipped=K``),
``utils/timer.py`` (``time (ms) | …``, ``RunningAvgSamplesPerSec``), ``runtime/zero/stage3.py``
(allocator cache flushes), ``runtime/utils.py`` (``see_memory_usage``). Log prefixes and their
line numbers move between versions, so nothing here is anchored on them. The config dump and
the comms table are multi-line blocks, read by ``dsblocks``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from zerodoctor.deepspeed.defaults import BATCH_KEYS, GRAD_ACCUM, MICRO_BATCH, TRAIN_BATCH
from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.sources.dsblocks import CommsTable, ConfigDump, FlopsSummary
from zerodoctor.sources import timers
from zerodoctor.sources.stepclock import StepClock
from zerodoctor.messages.numbers import NUM
from zerodoctor.sources.text import Context, Line, strip_prefix
from zerodoctor.messages.units import LOGGED

MIN_SCALE_MESSAGE = "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."

# The "[deepspeed] "/"[deepscale] " tag may be left out where a line is quoted (DeepSpeed#1593 quotes ZeRO-2's as
# "OVERFLOW! Rank 0 Skipping step. …"); untagged, ZeRO's "Rank N" names it (apex's "OVERFLOW! Skipping step." has none).
_OVERFLOW = deferred(
    rf"(?:\[deep(?:speed|scale)\] |(?<![\w\]] )(?=OVERFLOW! Rank \d))OVERFLOW!(?: Rank (\d+))? Skipping step\."
    rf"(?: Attempted loss scale: ({NUM}))?")
_GRAD_OVERFLOW = deferred(r"Grad overflow on iteration:? (\d+)")
_REDUCED_TO = deferred(rf"reducing to ({NUM})")  # the scale an overflow line set; a step carries the one it tried
_REDUCING = deferred(rf"Reducing dynamic loss scale from ({NUM}) to ({NUM})")
_STATIC = deferred(rf"Using static loss scale of: ({NUM})")
_DETECTED = deferred(rf"(?:Overflow detected\.|fp16 dynamic loss scale overflow!)(?: Rank \d+)?(?: Skipping step\.)?"
                     rf"(?: Attempted loss scale: ({NUM}))?")
_PROGRESS = deferred(rf"step=(\d+), skipped=(\d+), lr=\[\s*({NUM})?")
# utils/timer.py ThroughputTimer: "epoch=E/micro_step=M/global_step=G, …" since 0.9; before, "E/S, …" whose S
# is not always the optimizer step (it counts the timer's stops), so only the memory is taken from those.
# 0.6.1 (fee731359) to 0.7.0 printed "E/S, SamplesPerSec=X, MemAllocated=…"; CurrSamplesPerSec is the last step's
# train_batch_size / time since 0.8 (#2603), the micro-batch's before: a step time only from the global_step form.
_TPUT = deferred(rf"(?:global_step=(\d+)|\b\d+/\d+), (?:RunningAvg)?SamplesPerSec=({NUM}),"
                 rf"(?: CurrSamplesPerSec=({NUM}),)? MemAllocated=({NUM})GB, MaxMemAllocated=({NUM})GB")
_TPUT_OLD = deferred(rf"\b\d+/\d+, SamplesPerSec={NUM}\s*$")  # 0.1-0.5: the average alone, nothing to read
# runtime/pipe/engine.py train_batch, rank 0 at steps_per_print (0.3.0+): the mean iteration of the interval.
_PIPE_STEPS = deferred(rf"\bsteps: (\d+) loss: ({NUM}|nan|inf) .*?iter time \(s\): ({NUM}) samples/sec: ({NUM})")
_FLUSHES = deferred(r"(\d+) pytorch allocator cache flushes since last step")
_SEE_MEMORY = deferred(rf"\bMA ({NUM}) GB\s+Max_MA ({NUM}) GB\s+CA ({NUM}) GB\s+Max_CA ({NUM}) GB")
_NONPOSITIVE = deferred(r"(Train batch size|Micro batch size per gpu|Gradient accumulation steps): ?"
                        r"(-?\d+) has to be greater than 0")
# Matched on whitespace-free text so hard wraps, rich boxes and the pre-2022 form (no space
# after "world_size") all read the same.
_BATCH = deferred(r"[Tt]rain_batch_sizeisnotequaltomicro_batch_per_gpu\*gradient_acc_step\*world_size"
                  r"(\d+)!=(\d+)\*(\d+)\*(\d+)")
_BATCH_START = "rain_batch_sizeisnotequaltomicro_batch_per_gpu"  # 0.1 capitalised the T
_MIN_SCALE = "lossscalealreadyatminimum"
# runtime/config.py _set_batch_related_parameters, 0.3 to today: the config gives no batch size at all.
_NO_BATCH = "Either train_batch_size or micro_batch_per_gpu needs to be provided"
# runtime/engine.py: the optimizer DeepSpeed built and the ZeRO optimizer wrapping it.
_ENGINE = deferred(r"DeepSpeed Basic Optimizer = (\w+)|Creating (?:[\w.]+ )?ZeRO stage (\d) optimizer")
# comm/torch.py build_shm_op, print()ed by every rank (0.14.2+, b22706a72): the shared-memory collectives only
# DeepSpeed's CPU accelerator builds (ShareMemCommBuilder, cpu_accelerator.py alone): the run trains on the host.
_SHM_BUILT = "DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully"
# __init__.py initialize(): log_dist("DeepSpeed info: version={}, git-hash={}, git-branch={}") at INFO (0.3+, shown
# by default until 0.17.6): the version, which says how the comms logger's table reads (dsblocks.CommsTable).
_VERSION = deferred(r"DeepSpeed info: version=(\d+)\.(\d+)\.(\d+)")
# Trainer's tqdm bar glued before a line: "N/M [" says N optimizer steps are done.
_TQDM_STEP = deferred(r"\|\s*(\d+)/(\d+) \[")
_SQUEEZE = deferred(r"[\s│┃|╭╮╰╯─━]+")

_BATCH_KEYS = (*BATCH_KEYS, "world_size")  # the batch assertion's four numbers, in its order
_NONPOSITIVE_KEYS = {"Train batch size": TRAIN_BATCH, "Micro batch size per gpu": MICRO_BATCH,
                     "Gradient accumulation steps": GRAD_ACCUM}


class DeepSpeedDialect(timers.GluesCutLines):
    name = "deepspeed"
    keywords = (b"OVERFLOW!", b"Grad overflow", b"Overflow detected", b"Reducing dynamic loss", b"Using static loss",
                b"Current loss", b"fp16 dynamic", b"Exiting run", b"!=", b"Train batch size",
                b"Micro batch size per gpu", b"Gradient accumulation steps", b"Either train_batch", b", skipped=",
                b"(ms) |", b"SamplesPerSec", b"iter time (s)", b"pytorch allocator", b"Max_MA", b"Basic Optimizer = ",
                b"ZeRO stage ", b"DeepSpeed deepspeed.ops.comm.deepspeed_shm", b"DeepSpeed info: version=",
                *ConfigDump.keywords, *CommsTable.keywords, *FlopsSummary.keywords)

    def __init__(self, context: Context) -> None:
        self.context = context
        self.clock = StepClock(context)
        self.config = ConfigDump(context)
        self.comms = CommsTable(context)
        self.flops = FlopsSummary(context)
        self._reported: set[tuple] = set()
        self._flushes = 0
        self._batch_wrapped = 0  # lines left to complete a batch assertion hard-wrapped after its "!="
        self._scale_set: tuple[Line, int, float | None, float] | None = None  # the last overflow line's new scale
        self._halving: str | None = None  # the last overflow line's "Attempted A, reducing to B" (A > B), as printed
        self.cut = timers.CutLine()  # a timer or throughput line a terminal cut, until its last piece
        self._gluing = False
        self._pipe_last: int | None = None  # the pipeline engine's last printed step
        self._pipe_every: int | None = None  # steps its timers' totals cover, when known

    @property
    def holding(self) -> bool:
        return (self.config.holding or self.comms.holding or self.flops.holding or self._batch_wrapped > 0
                or self.cut.held is not None)

    def _feed(self, line: Line) -> list[Event]:
        if self.holding:
            block = self.config if self.config.holding else self.comms if self.comms.holding else self.flops
            held = block.feed(line)
            if held is not None:
                return held
            if block is self.comms:  # the table ended at this line: its rows, then the line as any other
                return self.comms.finish() + self._feed(line)
        text = line.text
        if "verflow" in text or "OVERFLOW" in text or "loss scale" in text:
            out = self._overflow(line, text)
            if out is not None:
                return out
        if "Exiting run" in text or "Current loss" in text:
            return self._min_scale(line)
        if "!=" in text or self._batch_wrapped:
            return self._batch_assertion(line)
        if "has to be greater" in text:
            return self._nonpositive(line, text)
        if _NO_BATCH in text and self._once(("no_batch", line.rank)):
            return [self.context.event("log", line, message=_NO_BATCH, source=self.name, level="ERROR",
                                       what="batch_missing")]
        if ", skipped=" in text:
            return self._progress(line, text)
        if "(ms) |" in text:
            return self._timers(line, text)
        if "SamplesPerSec" in text:
            return self._throughput(line, text)
        if "iter time (s)" in text:
            return self._pipe_steps(line, text)
        if "cache flushes" in text:
            return self._cache_flushes(line, text)
        if "Max_MA" in text:
            return self._memory_usage(line, text)
        if "Basic Optimizer = " in text or "ZeRO stage " in text:
            return self._engine(line, text)
        version = _VERSION.search(text)
        if version:
            self.context.facts["deepspeed_version"] = tuple(map(int, version.groups()))
            return []
        if _SHM_BUILT in text and self._once(("engine", "accelerator")):
            return [self.context.event("log", line, message=_SHM_BUILT, source=self.name, what="engine_setup",
                                       data={"accelerator": "cpu"})]
        for block in (self.config, self.comms, self.flops):
            started = block.feed(line)
            if started is not None:
                return started
        return []

    def finish(self) -> list[Event]:
        out: list[Event] = []
        if self.cut.held is not None:
            first, text, _ = self.cut.held
            self.cut.held = None
            out = self._glued(dataclasses.replace(first, text=text))
        out += self.config.finish() + self.flops.finish() + self.clock.flush()
        out += self.comms.finish()  # after the last step, which its rows count up to
        if self._scale_set is not None:
            line, rank, tried, scale = self._scale_set
            out.append(self.context.event("log", line, rank=rank, message=f"loss scale set to {scale:g}",
                                          source=self.name, level="INFO", what="loss_scale_set",
                                          data={"attempted": tried, "scale": scale}))
        return out

    def _rank(self, line: Line, said: str | None = None) -> int:
        if said is not None:
            return int(said)
        return line.rank if line.rank is not None else 0

    def _overflow(self, line: Line, text: str) -> list[Event] | None:
        match = _OVERFLOW.search(text)
        if match:
            scale = float(match.group(2)) if match.group(2) else None
            rank = self._rank(line, match.group(1))
            if self._another_rank(text, match, scale, "overflow"):
                return []
            out = self.clock.add(line, rank, "overflow", {"overflow": True, "loss_scale": scale},
                                 step=_bar_step(text, match.start()))
            if "Gradients are non-finite" in text and self._once(("static",)):
                # loss_scaler.py LossScaler (0.19.6+): the static scaler's own message, which bf16 runs print
                # too (CreateLossScaler gives them a LossScaler of scale 1): it says no scale was lowered
                out.append(self.context.event("log", line, rank=rank, message=match.group(0), source=self.name,
                                              level="WARNING", what="static_loss_scaler"))
            elif "reducing to" in text or "Reducing hysteresis" in text:
                tag = "deepscale" if match.group(0).startswith("[deepscale]") else "deepspeed"
                out += self._dynamic(line, rank, match.group(0), {"scaler": "DynamicLossScaler", "tag": tag})
                reduced = _REDUCED_TO.search(text, match.end())
                if reduced:
                    self._scale_set = (line, rank, scale, float(reduced.group(1)))
                elif "Reducing hysteresis" in text and scale is not None:  # a count-down keeps the scale it tried
                    self._scale_set = (line, rank, scale, scale)
            return out
        match = _GRAD_OVERFLOW.search(text)
        if match:
            # cur_iter counts update_scale calls from 0: the optimizer step, 0-based
            return self.clock.add(line, self._rank(line), "grad_overflow", {"overflow": True},
                                  step=int(match.group(1)) + 1)
        match = _REDUCING.search(text)
        if match:
            self._scale_set = (line, self._rank(line), float(match.group(1)), float(match.group(2)))
            return self.clock.add(line, self._rank(line), "reducing",
                                  {"overflow": True, "loss_scale": float(match.group(1))}) + self._dynamic(
                line, self._rank(line), match.group(0), {"scaler": "FP16_Optimizer"})
        match = _STATIC.search(text)
        if match:
            return self.clock.add(line, self._rank(line), "static",
                                  {"overflow": True, "loss_scale": float(match.group(1))})
        match = _DETECTED.search(text)
        if match:
            scale = float(match.group(1)) if match.group(1) else None
            if self._another_rank(text, match, scale, "detected"):
                return []
            out = self.clock.add(line, self._rank(line), "detected", {"overflow": True, "loss_scale": scale})
            reduced = _REDUCED_TO.search(text, match.end())
            # FP16_Optimizer and FP16_UnfusedOptimizer (fused_optimizer.py, unfused_optimizer.py; 0.5's
            # zero/stage1.py too) print these words whatever their scaler; only the dynamic one lowers the scale,
            # the static LossScaler's "reducing to" repeats the scale it tried.
            if reduced and scale is not None and float(reduced.group(1)) < scale:
                out += self._dynamic(line, self._rank(line), match.group(0), {"scaler": "FP16_Optimizer"})
                self._scale_set = (line, self._rank(line), scale, float(reduced.group(1)))
            return out
        return None

    def _another_rank(self, text: str, match: re.Match[str], scale: float | None, tag: str) -> bool:
        """The overflow line just read, printed again by another rank: the same step, not the next one.

        ZeRO-1/2 and the fp16 optimizers log it with ``logger.info`` on every rank (0.3.12 to 0.8.2 without the
        rank's number). One rank never prints the same halving twice in a row: its next overflow tries the scale
        this one set. A scale pinned at its floor ("1, reducing to 1") repeats by itself, and is counted.
        """
        reduced = _REDUCED_TO.search(text, match.end())
        if reduced is None or scale is None or float(reduced.group(1)) >= scale:
            self._halving = None
            return False
        said = text[match.start():reduced.end()]
        pending = self.clock.pending
        repeat = said == self._halving and pending is not None and pending.tags == {tag}
        self._halving = said
        return repeat

    def _dynamic(self, line: Line, rank: int, message: str, data: dict[str, str]) -> list[Event]:
        """A dynamic scaler lowered the scale: say so once per scaler that printed it. ZeRO's DynamicLossScaler
        (runtime/fp16/loss_scaler.py) prints "OVERFLOW! … reducing to" or "Reducing hysteresis", ``[deepscale]``
        before 0.6.4; FP16_Optimizer and FP16_UnfusedOptimizer (fused_optimizer.py, unfused_optimizer.py: ZeRO
        stage 0) print "Reducing dynamic loss scale from A to B", or "fp16 dynamic loss scale overflow! … reducing to B"
        with B below the scale tried, and nothing else does."""
        if not self._once(("dynamic", data["scaler"])):
            return []
        return [self.context.event("log", line, rank=rank, message=message, source=self.name, level="INFO",
                                   what="dynamic_loss_scaler", data=data)]

    def _previous(self, line: Line) -> str:
        """The line before this one, as read: the first piece of a line a terminal cut, where this is the second."""
        before = self.context.lookback()[:-1]
        return strip_prefix(before[-1])[1] if before else ""

    def _same_rank_window(self, line: Line) -> str:
        """This line and the ones before it from the same rank, without whitespace or box drawing."""
        parts = []
        for raw in self.context.lookback()[:-1]:
            rank, text = strip_prefix(raw)
            if rank == line.rank:
                parts.append(text)
        parts.append(line.text)
        return _SQUEEZE.sub("", "".join(parts))

    def _once(self, key: tuple) -> bool:
        if key in self._reported:
            return False
        self._reported.add(key)
        return True

    def _min_scale(self, line: Line) -> list[Event]:
        if _MIN_SCALE not in self._same_rank_window(line) or not self._once(("min_scale", line.rank)):
            return []
        return self.clock.flush() + [self.context.event("exception", line, type="Exception", message=MIN_SCALE_MESSAGE,
                                                        step=self.context.last_step())]

    def _batch_assertion(self, line: Line) -> list[Event]:
        window = self._same_rank_window(line)
        found = _BATCH.findall(window)
        if not found:
            # Rich and terminals wrap the numbers onto the next lines ("64 != 4 *" / "8 * 1"): wait for them.
            if "!=" in line.text and _BATCH_START in window:
                self._batch_wrapped = 2
            else:
                self._batch_wrapped = max(self._batch_wrapped - 1, 0)
            return []
        self._batch_wrapped = 0
        values = tuple(int(v) for v in found[-1])
        if not self._once(("batch", line.rank, values)):
            return []
        data = dict(zip(_BATCH_KEYS, values))
        message = "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size " \
                  "{} != {} * {} * {}".format(*values)
        return [self.context.event("log", line, message=message, source=self.name, level="ERROR",
                                   what="batch_assertion", data=data)]

    def _nonpositive(self, line: Line, text: str) -> list[Event]:
        match = _NONPOSITIVE.search(text)
        if not match:
            return []
        data = {_NONPOSITIVE_KEYS[match.group(1)]: int(match.group(2))}
        return [self.context.event("log", line, message=match.group(0), source=self.name, level="ERROR",
                                   what="batch_nonpositive", data=data)]

    def _progress(self, line: Line, text: str) -> list[Event]:
        match = _PROGRESS.search(text)
        if not match:
            return []
        step, skipped = int(match.group(1)), int(match.group(2))
        if step == 0:  # printed by deepspeed.initialize: the log starts with the run
            self.context.anchored = True
            return []
        lr = float(match.group(3)) if match.group(3) else None
        return self.clock.add(line, self._rank(line), "progress", {"lr": lr}, step=step, skipped=skipped)

    def _timers(self, line: Line, text: str) -> list[Event]:
        if not timers.TIMES.search(text):  # "time (ms)" itself cut: the piece before holds its start
            text = self._previous(line) + text
            if not timers.TIMES.search(text):
                return []
            line = dataclasses.replace(line, text=text)
        if "fwd_moe" in text:
            return []  # the MoE forward breakdown repeats fwd; the global line follows it
        if not self._gluing and self.cut.holds(line, text):
            return []
        names = timers.named(text)
        if timers.is_megatron(names):
            return []  # Megatron's own timers: its dialect puts them on its iteration
        said_stage = self._zero3_timers(line, names)
        read = timers.deepspeed_line(names)
        if read is None:
            return said_stage
        tag, fields = read
        said = timers.RANK_SAID.search(text)
        rank = self._rank(line, said.group(1) if said else None)
        pipe = "pipe_micro_timers" in (self.clock.pending.tags if self.clock.pending else ())
        if tag == "pipe_timers":  # printed after the step's ``steps: N`` line, which says what interval they add up
            if self._pipe_every is None:
                return []  # totals over an interval this log does not show
            fields = {k: v / self._pipe_every for k, v in fields.items()}
        return said_stage + self.clock.add(line, rank, tag, fields,
                                           closes=tag == "pipe_timers" or (tag == "timers" and not pipe))

    def _zero3_timers(self, line: Line, names: dict[str, float]) -> list[Event]:
        """ZeRO-3's optimizer timers (``timers.zero3_optimizer``): the stage, where the console prints no
        "Creating … ZeRO stage 3 optimizer" (INFO, below DeepSpeed's default level since 0.17.6) and no config."""
        if not timers.zero3_optimizer(names) or not self._once(("engine", "zero_stage")):
            return []
        shown = " | ".join(name for name in names if name in ("init_optimizer_state", "optimizer_step"))
        return [self.context.event("log", line, message=f"ZeRO-3's optimizer timers ({shown})", source=self.name,
                                   what="engine_setup", data={"zero_stage": 3})]

    def _pipe_steps(self, line: Line, text: str) -> list[Event]:
        """The pipeline engine's ``steps: N loss: L … iter time (s): T samples/sec: S``: the step, and how many
        steps its timers (printed at the same interval, never reset between) add up."""
        match = _PIPE_STEPS.search(text)
        if not match:
            return []
        step = int(match.group(1))
        every = step - self._pipe_last if self._pipe_last is not None else _int((self.context.facts.get("config")
                                                                                 or {}).get("steps_per_print"))
        self._pipe_last, self._pipe_every = step, every if every and every > 0 else None
        pending = self.clock.pending
        if pending is not None and "pipe_micro_timers" in pending.tags:
            if self._pipe_every is None:
                self.clock.pending = None  # its timers are totals over an unknown interval
            else:
                pending.fields.update({k: v / self._pipe_every for k, v in pending.fields.items() if k.endswith("_s")})
                pending.micro = {k: v / self._pipe_every for k, v in pending.micro.items()}
        return self.clock.add(line, self._rank(line), "pipe_steps",
                              {"loss": float(match.group(2)), "step_time_s": float(match.group(3))}, step=step)

    def _throughput(self, line: Line, text: str) -> list[Event]:
        match = _TPUT.search(text)
        if not match:
            if not (self._gluing or timers.whole(text) or _TPUT_OLD.search(text)):  # a terminal's cut: glue, then read
                glued = self._previous(line) + text
                self.cut.hold(dataclasses.replace(line, text=glued), glued)
            return []
        step, _, current, allocated, peak = match.groups()
        fields: dict[str, Any] = {"mem_allocated_bytes": int(float(allocated) * LOGGED["GB"]),
                                  "mem_peak_bytes": int(float(peak) * LOGGED["GB"])}
        batch = (self.context.facts.get("derived") or {}).get(TRAIN_BATCH)
        if step and current and batch and float(current) > 0:
            fields["step_time_s"] = batch / float(current)
        return self.clock.add(line, self._rank(line), "tput", fields, step=int(step) if step else None)

    def _cache_flushes(self, line: Line, text: str) -> list[Event]:
        match = _FLUSHES.search(text)
        if not match:
            return []
        self._flushes += int(match.group(1))  # the warning counts since the last step; the field is cumulative
        return self.clock.add(line, self._rank(line), "flushes", {"alloc_retries": self._flushes})

    def _engine(self, line: Line, text: str) -> list[Event]:
        """What deepspeed.initialize built: a console log's only word on CPU offload (DeepSpeedCPUAdam) or stage."""
        match = _ENGINE.search(text)
        if not match:
            return []
        optimizer, stage = match.groups()
        data = {"optimizer": optimizer} if optimizer else {"zero_stage": int(stage)}
        if not self._once(("engine", *data)):
            return []
        return [self.context.event("log", line, message=match.group(0), source=self.name, what="engine_setup",
                                   data=data)]

    def _memory_usage(self, line: Line, text: str) -> list[Event]:
        match = _SEE_MEMORY.search(text)
        if not match:
            return []
        keys = ("allocated_bytes", "peak_allocated_bytes", "reserved_bytes", "peak_reserved_bytes")
        data = {k: int(float(v) * LOGGED["GB"]) for k, v in zip(keys, match.groups())}
        return [self.context.event("log", line, message=match.group(0), source=self.name, what="memory_usage",
                                   data=data, step=self.context.last_step())]


def _bar_step(text: str, end: int) -> int | None:
    """The optimizer step a line glued after a tqdm bar belongs to: the bar counts the steps already done."""
    bars = _TQDM_STEP.findall(text, 0, end)
    return int(bars[-1][0]) + 1 if bars else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
