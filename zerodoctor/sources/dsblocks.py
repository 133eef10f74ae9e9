"""Sources, text: DeepSpeed's multi-line console blocks → ``run_start``, ``comm`` and ``log`` events.

The engine's config dump (``runtime/config.py`` ``DeepSpeedConfig.print``: one
``name ...... value`` line per attribute, then ``json = {`` and the user's config as indented
JSON over many unprefixed lines) and the comms logger summary (``utils/comms_logging.py``
``log_all``: 20-character columns, each op name on its own line above its rows; the same format from 0.7.0
(5349347bb) to 0.19, ``show_straggler``'s second table after a line of underscores since 0.10.0), and the
flops profiler's summary (``print_model_profile``, 0.4.0+). Each block
holds the parser open until it ends; ``feed`` returns ``None`` for a line it does not take, so
the line is read as an ordinary one.
"""

from __future__ import annotations

import json
from typing import Any

from zerodoctor.deepspeed.defaults import BATCH_KEYS
from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.messages.numbers import NUM
from zerodoctor.sources.text import Context, Line
from zerodoctor.messages.units import LOGGED  # the comms logger's KB/MB are powers of 1024 (convert_size)

RUNNING_SINCE = (0, 18, 3)  # the comms logger's entries are running totals from here on (6eb98aaf0)
MAX_BLOCK_LINES = 2000  # a dump that never closes (a truncated log) is let go, not held forever
_ATTR = deferred(r"(?:^|\s)(\w+) \.{2,} (.*?)\s*$")
# print()ed, so bare; a console that logs stdout puts its prefix (ending "] ") before each line
_ROW = deferred(rf"(?:^|\] )\s+({NUM}) ?([KMGTP]?B)\s+(\d+)\s+({NUM})")  # convert_size(0) is "0B"
# What a terminal's wrap leaves of a row or of the header on the next line: numbers, or the header's last columns.
_WRAPPED = deferred(rf"^\s*(?:{NUM}\s*)+$|Latency\(ms\)|\(Gbps\)")
_OP = deferred(r"(?:^|\] )([A-Za-z_][\w.]*)\s*$")


class ConfigDump:
    """``DeepSpeedEngine configuration:`` … ``json = {…}`` → one ``run_start`` (rank 0 prints it)."""

    keywords = (b"DeepSpeedEngine configuration",)

    def __init__(self, context: Context) -> None:
        self.context = context
        self.holding = False
        self._attrs: dict[str, str] = {}
        self._json: list[str] | None = None
        self._depth = 0
        self._lines = 0
        self._line: Line | None = None

    def feed(self, line: Line) -> list[Event] | None:
        text = line.text
        if not self.holding:
            if "DeepSpeedEngine configuration" in text:
                self._open(line)
                return []
            if "json = {" not in text:
                return None
            self._open(line)
        self._lines += 1
        if self._json is None:
            at = text.find("json = {")
            if at >= 0:
                self._json = []
                return self._take_json(text[at + len("json = "):])
            match = _ATTR.search(text)
            if match:
                self._attrs[match.group(1)] = match.group(2)
                return []
        else:
            return self._take_json(text)
        return self._give_up()

    def finish(self) -> list[Event]:
        return self._emit(None) if self.holding else []

    def _open(self, line: Line) -> None:
        self.holding, self._attrs, self._json, self._depth, self._lines, self._line = True, {}, None, 0, 0, line

    def _take_json(self, text: str) -> list[Event]:
        assert self._json is not None
        self._json.append(text)
        self._depth += text.count("{") + text.count("[") - text.count("}") - text.count("]")
        if self._depth <= 0:
            try:
                config = json.loads("\n".join(self._json))
            except ValueError:
                config = None
            return self._emit(config if isinstance(config, dict) else None)
        return self._give_up()

    def _give_up(self) -> list[Event]:
        return self._emit(None) if self._lines > MAX_BLOCK_LINES else []

    def _emit(self, config: dict[str, Any] | None) -> list[Event]:
        self.holding = False
        attrs, line = self._attrs, self._line
        assert line is not None
        if config is None and not attrs:
            return []
        config = config or {}
        facts: dict[str, Any] = {"config": config or None, "derived": {k: _int(attrs.get(k)) for k in BATCH_KEYS
                                                                       if _int(attrs.get(k)) is not None} or None}
        facts["world_size"] = _int(attrs.get("world_size"))
        stage = (config.get("zero_optimization") or {}).get("stage", _int(attrs.get("zero_optimization_stage")))
        facts["zero_stage"] = stage if isinstance(stage, int) else None
        facts["precision"] = _precision(config, attrs)
        self.context.facts.update({k: v for k, v in facts.items() if v is not None})
        return [self.context.event("run_start", line, **facts)]


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def _precision(config: dict[str, Any], attrs: dict[str, str]) -> str | None:
    def on(section: str, attr: str) -> bool:
        return ((config.get(section) or {}).get("enabled") is True
                or attrs.get(attr, "").startswith(("True", "enabled=True")))

    if on("fp16", "fp16_enabled") or on("fp16", "float16_config"):
        return "fp16"
    if on("bf16", "bfloat16_enabled") or on("bfloat16", "bfloat16_config"):
        return "bf16"
    # fp32 only where the print says so: a pasted slice of it (vall-e#58's activation_checkpointing_config and
    # aio_config rows, under "Creating fp16 optimizer") holds no precision row at all
    said = config or any(a in attrs for a in ("fp16_enabled", "float16_config", "bfloat16_enabled", "bfloat16_config"))
    return "fp32" if said else None


class CommsTable:
    """The comms logger summary → one ``comm`` event per (op, message size) row, once the table ends.

    What its latencies are depends on the version, which the table does not print. ``comm/comm.py`` ``timed_op``
    stops the op's timer (one per op name, every message size alike: ``get_debug_log_name``) and appends
    ``timers(log_name).elapsed(reset=False)`` (0.7.0, 5349347bb, to today). Until 0.18.2 ``utils/timer.py``'s
    ``_get_elapsed_msec`` cleared the timer's records as it read them (fee731359), so each entry was that call's
    latency. 0.18.3 ("Wall clock timers API", #7714, 6eb98aaf0) dropped the clear: each entry is the op's running
    total since its first call (0.19.8 as installed, master as of 2026-08 alike). ``log_all`` then prints, per row,
    ``sum(vals[1])`` as "Total Latency(ms)" and their trimmed mean as "Avg Latency(ms)" (and bandwidths from
    them): a sum of running totals, which grows as the square of the calls. Where the log printed DeepSpeed's
    version ("DeepSpeed info: version=…", INFO), it decides (``RUNNING_SINCE``); else the table tells the two
    apart only by size (``running``): a step's collectives are timed one after another on its thread, so single calls'
    latencies sum to no more than the steps' time the log showed, unless calls outside the steps (start-up,
    evaluation) took longer than the steps themselves (then read as running totals: understated, never
    inflated). A table within the steps' time, or after none, is read as printed, which for 0.18.3+ overstates
    an op N/2-fold. An op whose N entries are running totals S_1 < … < S_N of its calls summed Σ S_k ≈ S_N (N + 1)
    / 2 at a steady rate, so its total is 2 Σ / (N + 1); how it divides among the op's rows is lost, so each row's
    printed total is scaled by that factor. On a real 2-rank CPU run (0.19.8) this gave its reduce-scatters
    14.6 s and its all-reduces 0.27 s where the probe timed 15.7 s and 0.30 s; read as printed, 1,541 s.

    Where the latencies are also short of the calls: on DeepSpeed's CPU accelerator ``synchronize`` does
    nothing, so an async call (ZeRO-3's parameter all-gathers, ``partition_parameters._dist_allgather_fn``) is
    timed to its launch; on a real run the table's all-gathers were 1.7 s where the probe timed 13 s.
    """

    keywords = (b"Comm. Op",)

    def __init__(self, context: Context) -> None:
        self.context = context
        self.holding = False
        self._op: str | None = None
        self._rows: list[tuple[Line, str, int, int, float]] = []  # line, op, bytes per call, calls, total ms

    def feed(self, line: Line) -> list[Event] | None:
        text = line.text
        if not self.holding:
            # show_straggler's second table (its "Total comm lat(ms)" the minimum over ranks) reads the same calls
            if "Comm. Op" in text and "Message Size" in text and "Count" in text and "comm lat(ms)" not in text:
                self.holding, self._op, self._rows = True, None, []
                return []
            return None
        row = _ROW.search(text)
        if row and self._op:
            size, unit, count, total_ms = row.groups()
            self._rows.append((line, self._op, int(float(size) * LOGGED[unit]), int(count), float(total_ms)))
            return []
        op = _OP.search(text)
        if op and not text.startswith(" "):
            self._op = op.group(1)
            return []
        if _WRAPPED.search(text):
            return []
        self.holding = False  # a blank line, the straggler section or anything else ends the table
        return None

    def finish(self) -> list[Event]:
        """The table's rows, read as its version wrote them; the dialect calls it when the table ends."""
        self.holding = False
        rows, self._rows = self._rows, []
        if not rows:
            return []
        scale = dict.fromkeys((op for _, op, *_ in rows), 1.0)
        if self.running(rows):
            calls: dict[str, int] = {}
            for _, op, _, count, _ in rows:
                calls[op] = calls.get(op, 0) + count
            scale = {op: 2.0 / (n + 1) for op, n in calls.items()}
        step = self.context.last_step()
        return [self.context.event("comm", line, op=op, count=count, bytes=size * count,
                                   total_s=total_ms * scale[op] / 1000.0, step=step, since_step=0)
                for line, op, size, count, total_ms in rows]

    def running(self, rows: list[tuple[Line, str, int, int, float]]) -> bool:
        """Whether the printed totals are sums of running totals: the version says so, else they hold more than
        the steps' time."""
        version = self.context.facts.get("deepspeed_version")
        if version is not None:
            return bool(version >= RUNNING_SINCE)
        timed = self.context.timed_s
        return timed > 0 and sum(row[4] for row in rows) / 1000.0 > timed


# profiling/flops_profiler/profiler.py print_model_profile (0.4.0+): one '{:<70}  {:<8}' line per figure, each a
# number_to_string ("1.3 M", "12.35 ms", "4.56 T"); params_to_string writes G as B
# ("params per gpu" and "fwd flops per GPU = 2 * fwd MACs per GPU" before 0.9); srun's "0: " or a logger's prefix
# may lead
_FLOPS_ROW = deferred(rf"(?:^|: |\] )(params per (?:GPU|gpu)|params of model = params per GPU \* mp_size|"
                      rf"fwd flops per GPU(?: = 2 \* fwd MACs per GPU)?|fwd latency|bwd latency|step latency|"
                      rf"iter latency):\s+({NUM}) ?([TGBMKmu]?)")
_FLOPS_KEYS = {"params per GPU": "params_per_gpu", "params of model = params per GPU * mp_size": "params",
               "fwd flops per GPU": "fwd_flops", "fwd latency": "fwd_latency_s", "bwd latency": "bwd_latency_s",
               "step latency": "step_latency_s", "iter latency": "iter_latency_s"}
_MAGNITUDE = {"T": 1e12, "G": 1e9, "B": 1e9, "M": 1e6, "K": 1e3, "m": 1e-3, "u": 1e-6, "": 1.0}
_PROFILE_STEP = deferred(r"Profile Summary at step (\d+):")
MAX_PROFILE_LINES = 60  # the notations and the summary; the per-module profile after it is not read


class FlopsSummary:
    """The flops profiler's summary → one ``log`` ``flops_profile``: the model's parameters, its forward flops
    per GPU, and the latencies of the profiled step (the engine's timers, where ``wall_clock_breakdown`` is on)."""

    keywords = (b"Profile Summary at step",)

    def __init__(self, context: Context) -> None:
        self.context = context
        self.holding = False
        self._data: dict[str, float] = {}
        self._line: Line | None = None
        self._step: int | None = None
        self._lines = 0

    def feed(self, line: Line) -> list[Event] | None:
        text = line.text
        if not self.holding:
            started = _PROFILE_STEP.search(text)
            if started is None:
                return None
            self.holding, self._data, self._line, self._lines = True, {}, line, 0
            self._step = int(started.group(1))
            return []
        self._lines += 1
        row = _FLOPS_ROW.search(text.strip())
        if row:
            name, number, unit = row.groups()
            name = name.replace("per gpu", "per GPU").removesuffix(" = 2 * fwd MACs per GPU")
            value = float(number) * _MAGNITUDE[unit]
            self._data[_FLOPS_KEYS[name]] = round(value) if name.startswith(("params", "fwd flops")) else value
            return []
        if (self._data and ("------" in text or "Top " in text)) or self._lines > MAX_PROFILE_LINES:
            return self.finish()
        return []

    def finish(self) -> list[Event]:
        if not self.holding:
            return []
        self.holding = False
        data, self._data = self._data, {}
        if not data or self._line is None:
            return []
        return [self.context.event("log", self._line, message=f"flops profile at step {self._step}",
                                   source="deepspeed", what="flops_profile", data=data, step=self._step)]
