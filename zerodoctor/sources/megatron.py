"""Sources, text: Megatron-DeepSpeed iteration lines (``megatron/training.py`` ``training_log``) → ``step`` events.

`` iteration      100/  500000 | consumed samples: … | elapsed time per iteration (ms): … |
learning rate: … | global batch size: … | lm loss: … | loss scale: … | grad norm: … |
number of skipped iterations:   K | number of nan iterations:   N |``. A line sums up the
``log_interval`` iterations since the last one; the interval is the distance between two lines
(so the first line waits for the second). Each iteration becomes a step — the K skipped ones
first, since where they fell inside the interval is not printed — and the line's own values
land on the last.
"""

from __future__ import annotations

import re
from typing import Any

from zerodoctor.events import Event
from zerodoctor.sources.text import MAX_INTERVAL, Context, Line

_ITERATION = re.compile(r"iteration\s+(\d+)/\s*(\d+) \|")
_FIELD = re.compile(r"\| ([a-z][a-z ()]*?): +([-+\w.]+)")
_KEYS = {"lm loss": "loss", "loss": "loss", "learning rate": "lr", "loss scale": "loss_scale", "grad norm": "grad_norm",
         "elapsed time per iteration (ms)": "step_time_s"}


class MegatronDialect:
    name = "megatron"
    keywords = (b"(ms):",)  # "elapsed time per iteration (ms):" opens every iteration line
    holding = False

    def __init__(self, context: Context) -> None:
        self.context = context
        self._held: tuple[Line, int, dict[str, str]] | None = None
        self._last: int | None = None

    def feed(self, line: Line) -> list[Event]:
        match = _ITERATION.search(line.text)
        if not match:
            return []
        iteration = int(match.group(1))
        values = dict(_FIELD.findall(line.text, match.end() - 1))
        if self._last is None:
            if self._held is None:
                self._held = (line, iteration, values)
                return []
            held_line, held_iteration, held_values = self._held
            self._held = None
            interval = max(iteration - held_iteration, 1)
            out = self._steps(held_line, held_iteration, min(interval, held_iteration), held_values)
        else:
            out = []
        interval = iteration - self._last if self._last is not None else 1
        return out + self._steps(line, iteration, max(interval, 1), values)

    def finish(self) -> list[Event]:
        if self._held is None:
            return []
        line, iteration, values = self._held
        self._held = None
        return self._steps(line, iteration, 1, values)

    def _steps(self, line: Line, iteration: int, interval: int, values: dict[str, str]) -> list[Event]:
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
        out = []
        first = iteration - interval + 1
        for i, step in enumerate(range(first, iteration + 1)):
            fields: dict[str, Any] = {"overflow": i < skipped}
            if interval - i <= nan:
                fields["loss"] = float("nan")
            if step == iteration:
                fields.update({k: v for k, v in last.items()
                               if v is not None and not (k == "loss" and "loss" in fields)})
            out.append(self.context.event("step", line, step=step, **fields))
        self.context.step = max(self.context.step, iteration)
        return out


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
