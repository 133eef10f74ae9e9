"""Rules: the facts a console log could show (``evidence.*``) → a finding's ``evidence_strength``, in words.

A finding from a log is only as strong as what the log printed; the strength is worded by the
family of the finding's first signal that has one (fp16, memory, hang, …), so "ZD401 from a single
OOM message" reads differently from "ZD201 from rank 0's lines, 39 steps".
"""

from __future__ import annotations

from typing import Any, Callable

from zerodoctor.rulebook.template import format_value
from zerodoctor.signals.evidence import MESSAGES

Values = dict[str, Any]


def _stepwise(values: Values) -> str:
    ranks = values.get("evidence.step_ranks")
    if not ranks:
        return "text: no per-step lines"
    who = "rank 0's lines only" if ranks == [0] else "lines of ranks " + format_value(ranks, "list")
    return f"text: {who}, {values.get('run.steps') or 0} step(s) seen"


def _fp16(values: Values) -> str:
    if values.get("fp16.hit_min_scale") and not values.get("run.steps"):
        return "text: the 'loss scale already at minimum' exception only"
    return _stepwise(values)


def _memory(values: Values) -> str | None:
    count, ranks = values.get("memory.oom_count") or 0, values.get("memory.oom_ranks") or []
    if count > 1:
        return f"text: {count} OOM messages from ranks {format_value(ranks, 'list')}"
    return "text: a single OOM message" if count == 1 else None


def _hang(values: Values) -> str | None:
    ranks = values.get("hang.timeout_ranks")
    return f"text: watchdog lines from rank(s) {format_value(ranks, 'list')}" if ranks else None


def _messages(values: Values) -> str:
    said = values.get("evidence.messages")
    return "text: " + ", ".join(MESSAGES[m] for m in said) if said else _stepwise(values)


_BY_FAMILY: dict[str, Callable[[Values], str | None]] = {
    "fp16": _fp16, "numerics": _stepwise, "comm": _stepwise, "offload": _stepwise,
    "memory": _memory, "hang": _hang, "batch": _messages, "trainer": _messages,
}


def evidence_strength(shown: list[str], values: Values) -> str | None:
    """The strength of a finding whose evidence is ``shown``; None for runs with the probe's events."""
    if not values.get("evidence.console_log"):
        return None
    for name in shown:
        word = _BY_FAMILY.get(name.split(".")[0])
        text = word(values) if word else None
        if text:
            return text
    return None
