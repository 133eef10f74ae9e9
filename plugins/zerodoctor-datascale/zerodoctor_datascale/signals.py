"""Signals, data scale: tokens seen (and planned) per model parameter.

Hoffmann et al., "Training Compute-Optimal Large Language Models" (2022, the Chinchilla
paper): for a fixed compute budget, loss is lowest with about 20 training tokens per
parameter (Chinchilla: 70B parameters, 1.4T tokens). A run planned at a small fraction of
that spends its compute on a model the data cannot fill.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.signals.base import Signal
from zerodoctor.signals.view import RunView

OPTIMAL_TOKENS_PER_PARAM = 20

READS = ("run.params", "run.steps", "config.total_steps")

SIGNALS = [
    Signal("data.tokens_seen", "tokens", "token ids fed to the model so far, summed over ranks"),
    Signal("data.tokens_per_step", "tokens", "token ids per optimizer step over all ranks"),
    Signal("data.expected_tokens", "tokens", "tokens per step × planned steps (config.total_steps)"),
    Signal("data.tokens_per_param", "ratio", "expected tokens / parameters"),
    Signal("data.shortfall", "ratio",
           f"{OPTIMAL_TOKENS_PER_PARAM} / data.tokens_per_param: how far below compute-optimal"),
    Signal("data.optimal_params", "parameters",
           f"a compute-optimal model size for the expected tokens (tokens / {OPTIMAL_TOKENS_PER_PARAM})"),
    Signal("data.optimal_tokens", "tokens",
           f"compute-optimal tokens for this model ({OPTIMAL_TOKENS_PER_PARAM} × parameters)"),
]


RANK_FIELDS = {"tokens": ("tokens", "sum")}


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    seen = [r["tokens"] for r in view.per_rank.values() if r.get("tokens")]
    steps, params, planned = values.get("run.steps"), values.get("run.params"), values.get("config.total_steps")
    out: dict[str, Any] = {"data.optimal_tokens": OPTIMAL_TOKENS_PER_PARAM * params if params else None}
    if not seen or not steps:
        return out
    out["data.tokens_seen"] = sum(seen)
    out["data.tokens_per_step"] = sum(seen) / steps
    if planned:
        expected = out["data.tokens_per_step"] * planned
        out["data.expected_tokens"] = expected
        out["data.optimal_params"] = expected / OPTIMAL_TOKENS_PER_PARAM
        if params:
            out["data.tokens_per_param"] = expected / params
            out["data.shortfall"] = OPTIMAL_TOKENS_PER_PARAM * params / expected
    return out
