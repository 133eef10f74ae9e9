"""Sources, text: Megatron's iteration lines (``training.py`` ``training_log``) and its timers → ``step`` events.

`` iteration      100/  500000 | consumed samples: … | elapsed time per iteration (ms): … |
learning rate: … | global batch size: … | lm loss: … | loss scale: … | grad norm: … |
number of skipped iterations:   K | number of nan iterations:   N |``. A line sums up the
``log_interval`` iterations since the last one; the interval is the distance between two lines
(so the first line waits for the second). Each iteration becomes a step — the K skipped ones
first, since where they fell inside the interval is not printed — and the line's own values
land on the last. A line that prints no loss though an iteration advanced lost it to a NaN (``_loss_vanished``):
its last step's loss is NaN, as the nan count's are.

Right after the line, ``timers.log`` prints the interval's timers per iteration (``sources/timers.py`` has
every form): their phase split lands on the same last step, which waits for them until the next line of
another kind. Timers with no iteration line before them (a paste of the timer line alone) are a step of
their own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.messages.numbers import NUM
from zerodoctor.sources import timers
from zerodoctor.sources.text import MAX_INTERVAL, Context, Line

_ITERATION = deferred(r"iteration\s+(\d+)/\s*(\d+) \|")
_FIELD = deferred(r"\| ([a-zA-Z][a-zA-Z ()/]*?): +([-+\w.]+)")
# The model's TFLOP/s per GPU, where the line prints it: NVIDIA's training.py since 2748e7c7d4 (2023-11, with
# --log-throughput) ' throughput per GPU (TFLOP/s/GPU): {:.1f} |'; Megatron-DeepSpeed's and bigcode's forks
# ' TFLOPs: {:.2f} |'.
_KEYS = {"lm loss": "loss", "loss": "loss", "learning rate": "lr", "loss scale": "loss_scale", "grad norm": "grad_norm",
         "elapsed time per iteration (ms)": "step_time_s", "throughput per GPU (TFLOP/s/GPU)": "tflops",
         "TFLOPs": "tflops"}
# megatron/timers.py since 77efcccb93: ``(name + ' ').ljust(48, '.')`` then the max or (min, max), one per line
_BLOCK_ROW = deferred(rf"^\s+([A-Za-z][\w ./-]*?) \.*: (?:\(({NUM}), ({NUM})\)|({NUM}))(?=\s|$)")
# the "all" option: a name, then one line per rank; torchrun's "[rank3]: " prefix takes a space
_ALL_NAME = deferred(r"^ {1,2}([A-Za-z][\w ./-]*):\s*$")
_ALL_RANK = deferred(rf"^\s+rank\s+\d+: ({NUM})\s*$")
UNSCALED = "1.0"  # training_log's loss scale ('{:.1f}') where nothing scales the loss: bf16 or fp32, never skipping
Pending = tuple[Line, int, dict[str, Any]]


class MegatronDialect(timers.GluesCutLines):
    name = "megatron"
    # the iteration line's "elapsed time per iteration (ms):" (and "| consumed samples:", where a terminal's cut
    # left that alone on the first piece), the block header's "time across ranks (ms):", the single timer line's
    # "time (ms) |", a min/max row's ".: (" (a paste may start below the header)
    keywords = (b"(ms):", b"(ms) |", b".: (", b"| consumed samples:")

    def __init__(self, context: Context) -> None:
        self.context = context
        self._held: tuple[Line, int, dict[str, str]] | None = None
        self._last: int | None = None
        self._pending: list[Pending] = []  # the last iteration line's steps, open for its timers
        self._timed: dict[str, Any] | None = None  # timers read while the first line waits for the second
        self._block: dict[str, float] | None = None  # a timer block being read: name → the slowest rank's ms
        self._block_line: Line | None = None
        self._name: str | None = None  # the "all" form's timer whose ranks' lines follow
        self.cut = timers.CutLine()  # a timer or iteration line a terminal cut, until its last piece
        self._gluing = False

    @property
    def holding(self) -> bool:
        return self._block is not None or self.cut.held is not None

    def _feed(self, line: Line) -> list[Event]:
        text = line.text
        out: list[Event] = []
        if self._block is not None:
            if self._block_row(text):
                return []
            out = self._timers(self._block_line or line, timers.megatron_fields(self._block))
            self._block = self._name = None
        if "time across ranks (ms):" in text or "times across ranks (ms):" in text:
            self._block, self._block_line = {}, line
            return out
        if ".: (" in text and _BLOCK_ROW.match(text):  # a min/max row without its header
            self._block, self._block_line = {}, line
            self._block_row(text)
            return out
        if "(ms) |" in text and timers.TIMES.search(text):
            return out if not self._gluing and self.cut.holds(line, text) else out + self._timer_line(line, text)
        match = _ITERATION.search(text)
        if not match:
            return out
        if not self._gluing and not _ended(text):  # every field ends in " |": a terminal cut it
            self.cut.hold(line, text, _ended)
            return out
        out += self._emit()
        iteration = int(match.group(1))
        values = dict(_FIELD.findall(text, match.end() - 1))
        if self._last is None:
            if self._held is None:
                self._held = (line, iteration, values)
                return out
            held_line, held_iteration, held_values = self._held
            self._held = None
            interval = max(iteration - held_iteration, 1)
            self._pending = self._steps(held_line, held_iteration, min(interval, held_iteration), held_values)
            if self._timed is not None:
                _time(self._pending[-1][2], self._timed)
                self._timed = None
            out += self._emit()
        interval = iteration - self._last if self._last is not None else 1
        self._pending = self._steps(line, iteration, max(interval, 1), values)
        return out

    def _timer_line(self, line: Line, text: str) -> list[Event]:
        names = timers.named(text)
        return self._timers(line, timers.megatron_fields(names)) if timers.is_megatron(names) else []

    def finish(self) -> list[Event]:
        out: list[Event] = []
        if self.cut.held is not None:
            first, text, _ = self.cut.held
            self.cut.held = None
            out = self._glued(dataclasses.replace(first, text=text))
        if self._block is not None:
            out += self._timers(self._block_line or Line("", 0, None, 0.0), timers.megatron_fields(self._block))
            self._block = None
        if self._held is not None:
            line, iteration, values = self._held
            self._held = None
            self._pending = self._steps(line, iteration, 1, values)
            if self._timed is not None:
                _time(self._pending[-1][2], self._timed)
                self._timed = None
        return out + self._emit()

    def _block_row(self, text: str) -> bool:
        """Take one line of a timer block; False when the line is no part of it (the block has ended)."""
        assert self._block is not None
        row = _BLOCK_ROW.match(text)
        if row:
            name, _, most, only = row.groups()
            self._block[name] = float(most if most is not None else only)
            return True
        named = _ALL_NAME.match(text)
        if named:
            self._name = named.group(1)
            return True
        ranked = _ALL_RANK.match(text)
        if ranked and self._name is not None:
            self._block[self._name] = max(self._block.get(self._name, 0.0), float(ranked.group(1)))
            return True
        return False

    def _timers(self, line: Line, fields: dict[str, Any]) -> list[Event]:
        if not fields:
            return []
        if self._pending:
            _time(self._pending[-1][2], fields)
            return self._emit()
        if self._held is not None:
            self._timed = fields
            return []
        step = self.context.step + 1  # a timer line alone: the next step, counted
        self.context.step = step
        return [self.context.event("step", line, step=step, **fields)]

    def _emit(self) -> list[Event]:
        pending, self._pending = self._pending, []
        return [self.context.event("step", line, step=step, **fields) for line, step, fields in pending]

    def _steps(self, line: Line, iteration: int, interval: int, values: dict[str, str]) -> list[Pending]:
        self._last = iteration
        interval = min(interval, MAX_INTERVAL)
        skipped = min(_int(values.get("number of skipped iterations")), interval)
        nan = min(_int(values.get("number of nan iterations")), interval - skipped)
        last: dict[str, Any] = {}
        for key, field in _KEYS.items():
            if key in values:
                last[field] = _float(values[key])
        if "step_time_s" in last and last["step_time_s"] is not None:
            last["step_time_s"] /= 1000.0
        if _loss_vanished(values, interval - skipped):
            nan = max(nan, 1)
        out = []
        first = iteration - interval + 1
        for i, step in enumerate(range(first, iteration + 1)):
            fields: dict[str, Any] = {"overflow": i < skipped}
            if interval - i <= nan:
                fields["loss"] = float("nan")
            if step == iteration:
                fields.update({k: v for k, v in last.items()
                               if v is not None and not (k == "loss" and "loss" in fields)})
            out.append((line, step, fields))
        self.context.step = max(self.context.step, iteration)
        return out


def _time(step: dict[str, Any], timed: dict[str, Any]) -> None:
    """The timers' split on its iteration's step. The iteration took its elapsed time, where the line prints one,
    and at least as long as its outermost timers (each the slowest rank's), so no part is longer than the whole."""
    elapsed, total = step.get("step_time_s"), timed.get("step_time_s")
    step.update(timed)
    if elapsed is not None:
        step["step_time_s"] = max(elapsed, total) if total is not None else elapsed


def _loss_vanished(values: dict[str, str], advanced: int) -> bool:
    """The line prints no loss though an iteration of its interval advanced: every loss's average was NaN.

    training_log prints each loss of the interval as ``if avg > 0.0`` (664cd28b27, 2020-11; ``>= 0.0`` since
    b09ee64ae1, 2026-03), the sum over the advanced iterations divided by their number: a NaN in one makes the
    average NaN, which fails the comparison, and the key vanishes from the line. A line whose iterations were all
    skipped has nothing to average, and a line that is no training_log's (no skipped count, no loss scale) says
    nothing.
    """
    lost = not any("loss" in key and key != "loss scale" for key in values)
    if "number of skipped iterations" not in values:
        # A line cut before its counts (Megatron-LLM#33: '... | loss scale: 1.0 | gr') still says it where it reached
        # the loss scale, which every training_log prints after the losses; at a scale of 1.0 (bf16's, fp32's) no
        # iteration is skipped for an overflow, so the interval advanced.
        return advanced >= 1 and "loss scale" in values and values["loss scale"] == UNSCALED and lost
    return advanced >= 1 and lost


def _ended(text: str) -> bool:
    """The line ends as training_log ends it, " |" and nothing after (a cut after a field leaves its space)."""
    return text.endswith("|")


def _int(value: str | None) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def _float(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None
