"""Sources, text: the facts of one optimizer step, spread over several console lines → one ``step`` event.

DeepSpeed prints a step's facts in a fixed order — the OVERFLOW line(s) inside
``optimizer.step()``, then ``step=N, skipped=K``, then the throughput line, then the timers —
and most of them only at some steps or log levels. The clock gathers the lines of one step and
numbers it: by the number the line prints when it prints one, else by counting. When a line
reveals steps that printed nothing (``step=50`` after step 40), the gap is filled from the
``skipped`` count: the missing overflows first, then clean steps, so counts and rates are
right even where the exact positions inside the gap are not knowable; those steps carry
``inferred: true``, so nothing takes their positions for observed ones. The first numbered step
anchors the count when the log does not show the run's start, or when it lies further than
``MAX_INTERVAL`` past ``deepspeed.initialize``'s ``step=0`` (a resumed run prints that before
``load_checkpoint`` restores the counters); later gaps are filled up to ``MAX_INTERVAL`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerodoctor.events import Event
from zerodoctor.sources.rejects import BadLine
from zerodoctor.sources.text import MAX_INTERVAL, Context, Line

# Where in a step each kind of line is printed; a line from earlier in the order than what is
# already gathered starts the next step.
ORDER = {"overflow": 0, "grad_overflow": 0, "reducing": 0, "detected": 0, "static": 0, "flushes": 0,
         "progress": 1, "tput": 2, "optim_timers": 3, "micro_timers": 3, "pipe_micro_timers": 3, "timers": 4,
         "pipe_steps": 5, "pipe_timers": 6}
_MICRO = {"micro_timers", "pipe_micro_timers"}  # one line per micro-batch: summed
_PARTS = {"optim_timers", "pipe_timers"}  # parts of a step's time that the timers line sums with its own
MAX_STEP = 2**63 - 1  # the store's integer; a number past it is a garbled line


@dataclass
class _Pending:
    line: Line
    rank: int
    fields: dict[str, Any] = field(default_factory=dict)
    micro: dict[str, float] = field(default_factory=dict)
    parts: dict[str, float] = field(default_factory=dict)
    tags: set[str] = field(default_factory=set)
    step: int | None = None
    skipped: int | None = None
    order: int = -1


class StepClock:
    """Gathers the lines of one optimizer step and emits its ``step`` event when the step is over."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.pending: _Pending | None = None
        self.overflows = 0  # overflow steps emitted so far, to compare with DeepSpeed's skipped count
        self.numbered = False  # a line has printed a step number: the count is anchored on it

    def add(self, line: Line, rank: int, tag: str, fields: dict[str, Any], *, step: int | None = None,
            skipped: int | None = None, closes: bool = False) -> list[Event]:
        """Add one line's facts under ``tag``; returns the events of any step this completes."""
        if step is not None and not 0 <= step <= MAX_STEP:
            raise BadLine(f"step number {step} is past {MAX_STEP}: a garbled line")
        if step is not None:
            self.context.printed = max(self.context.printed, step)
        if line.stamped:
            self.context.progress_t = line.t
        out: list[Event] = []
        p = self.pending
        if p is not None and self._starts_next(p, tag, fields, step):
            out += self.flush()
            p = None
        if p is None:
            p = self.pending = _Pending(line, rank)
        if tag in _MICRO:
            for k, v in fields.items():
                p.micro[k] = p.micro.get(k, 0.0) + v
        elif tag in _PARTS:
            p.parts.update(fields)
        else:
            p.fields.update({k: v for k, v in fields.items() if v is not None})
        p.tags.add(tag)
        p.order = max(p.order, ORDER[tag])
        p.step = step if step is not None else p.step
        p.skipped = skipped if skipped is not None else p.skipped
        if closes:
            out += self.flush()
        return out

    def flush(self) -> list[Event]:
        p, self.pending = self.pending, None
        if p is None:
            return []
        for k, v in p.micro.items():
            p.fields.setdefault(k, v)
        for k, v in p.parts.items():  # ZeRO's all-gather, the pipeline's sends: communication the engine's line omits
            p.fields[k] = p.fields.get(k, 0.0) + v if k == "comm_s" else p.fields.get(k, v)
        if {"fwd_s", "bwd_s", "optim_s"} <= p.fields.keys():
            p.fields.setdefault("step_time_s", p.fields["fwd_s"] + p.fields["bwd_s"] + p.fields["optim_s"])
        self.context.timed_s += p.fields.get("step_time_s") or 0.0
        out: list[Event] = []
        number = p.step if p.step is not None else self.context.step + 1
        gap = number - self.context.step - 1
        if p.step is not None and not self.numbered and (
                gap > MAX_INTERVAL or not (self.context.anchored or self.context.step)):
            # Nothing before this step is in the log: its skipped count is history, and whether
            # it overflowed itself is known only from its own lines.
            self.overflows = max(self.overflows, (p.skipped or 0) - bool(p.fields.get("overflow")))
        elif p.step is not None and gap > 0:
            out += self._fill_gap(p, number)
        elif p.skipped is not None and not p.fields.get("overflow"):
            p.fields["overflow"] = p.skipped > self.overflows
        elif "overflow" not in p.fields and self.overflows:
            p.fields["overflow"] = False  # this log shows overflow lines, and this step printed none
        if p.fields.get("overflow"):
            self.overflows += 1
        if p.skipped is not None:
            self.overflows = max(self.overflows, p.skipped)
        if number > self.context.step:
            self.context.step = number
        self.context.anchored = True
        self.numbered = self.numbered or p.step is not None
        out.append(self.context.event("step", p.line, rank=p.rank, step=number, **p.fields))
        return out

    def _starts_next(self, p: _Pending, tag: str, fields: dict[str, Any], step: int | None) -> bool:
        if tag in p.tags and tag not in _MICRO:
            return True
        if ORDER[tag] < p.order:
            return True
        if step is not None and p.step is not None and step != p.step:
            return True
        scale, seen = fields.get("loss_scale"), p.fields.get("loss_scale")
        return scale is not None and seen is not None and scale != seen

    def _fill_gap(self, p: _Pending, number: int) -> list[Event]:
        """Steps between the last one seen and ``number`` that printed nothing, the last ``MAX_INTERVAL`` of them."""
        gap = min(number - self.context.step - 1, MAX_INTERVAL)
        missing = 0
        if p.skipped is not None:
            missing = max(p.skipped - self.overflows - (1 if p.fields.get("overflow") else 0), 0)
            if missing > gap:
                p.fields["overflow"] = True
            elif "overflow" not in p.fields:
                p.fields["overflow"] = False
        out = []
        if p.skipped is None:
            return out  # nothing says whether they overflowed: leave them unknown, not clean
        for i in range(gap):
            flagged = i < missing
            self.overflows += flagged
            out.append(self.context.event("step", p.line, rank=p.rank, step=number - gap + i, overflow=flagged,
                                          inferred=True))
        return out
