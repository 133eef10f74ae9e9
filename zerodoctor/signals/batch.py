"""Signals, batch: the batch the config promises vs the batch the model was actually fed.

DeepSpeed checks ``train_batch_size == micro × grad_accum × world_size`` only among the
values the user wrote; when it derives one, nothing checks that the data loader feeds
``micro`` samples per micro-batch. The probe counts what really arrived.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from zerodoctor.signals import view as runview
from zerodoctor.deepspeed.defaults import BATCH_KEYS as _KEYS, GRAD_ACCUM, MICRO_BATCH, TRAIN_BATCH
from zerodoctor.signals.view import RunView, Steps
from zerodoctor.signals.inputs import BATCH_DUMP, CONFIG, STEPS
from zerodoctor.signals.base import shown_by

_dumped = shown_by(CONFIG, switch=BATCH_DUMP)
_stepwise = shown_by(STEPS)

READS = ("run.world_size",)

SIGNALS = [
    _dumped("batch.config_explicit", "bool", "the config sets train_batch_size, micro-batch and grad-accum all three"),
    _dumped("batch.config_product", "samples", "micro × grad-accum × world size from the values the user wrote"),
    _dumped("batch.train_batch_size", "samples", "global batch per optimizer step, as configured (or derived)"),
    _dumped("batch.micro_batch", "samples", "train_micro_batch_size_per_gpu, as configured (or derived)"),
    _dumped("batch.grad_accum", "micro-batches", "gradient_accumulation_steps, as configured (or derived)"),
    _stepwise("batch.samples_per_micro", "samples", "samples the model received per micro-batch (median over ranks)"),
    _stepwise("batch.micro_batches_per_step", "micro-batches", "backward calls per optimizer step (median over steps)"),
    _stepwise("batch.effective_batch", "samples", "samples per optimizer step over all ranks, as fed"),
    _stepwise("batch.effective_ratio", "ratio", "effective batch / configured train_batch_size"),
    _dumped("batch.mismatched_ranks", "ranks", "ranks whose fed samples per micro-batch differ from the config"),
    _dumped("batch.nonpositive", "values", "batch values DeepSpeed refused as not > 0"),
    _dumped("batch.missing", "ranks", "ranks whose DeepSpeed refused a config giving no batch size at all"),
    _dumped("batch.nonpositive_key", "name", "the batch value DeepSpeed refused as not > 0 (written or derived)"),
    _dumped("batch.nonpositive_value", "samples", "the batch value DeepSpeed refused, as written"),
]


def _configured(view: RunView) -> tuple[dict[str, Any], dict[str, Any]]:
    """(values the user wrote, values DeepSpeed resolved), from run_start or a batch assertion."""
    start = view.first_start()
    written = {k: (start.get("config") or {}).get(k) for k in _KEYS}
    resolved = {k: (start.get("derived") or {}).get(k) for k in _KEYS}
    for log in view.events.get("log", []):
        if log.get("what") == "batch_assertion":
            written.update({k: v for k, v in (log.get("data") or {}).items() if k in _KEYS})
        elif log.get("what") == "trainer_batch":  # what HF Trainer resolved and used, printed in its header
            resolved.update({k: v for k, v in (log.get("data") or {}).items() if k in _KEYS and resolved[k] is None})
    for k in _KEYS:
        if not isinstance(written[k], int) or isinstance(written[k], bool):
            written[k] = None  # "auto" or a string: not a number DeepSpeed used
        resolved[k] = resolved[k] if resolved[k] is not None else written[k]
    return written, resolved


STEP_FIELDS = {"micro_batches": "max"}
RANK_FIELDS = {"samples": ("samples", "sum"), "micro_batches": ("micro_batches", "sum")}


@dataclass
class Fold(runview.Fold):
    VERSION = 1  # of the saved state: bump it when the fields or what they hold change
    micro_batches: dict[str, int] = field(default_factory=dict)  # backward calls per step → steps with that many

    def add_steps(self, block: Steps, view: RunView) -> None:
        counts = Counter(block.columns["micro_batches"])
        counts.pop(None, None)
        for value, n in counts.items():
            key = str(value)
            self.micro_batches[key] = self.micro_batches.get(key, 0) + n


def _median(counts: dict[str, int]) -> float:
    """The median of a multiset given as value → count (the lower and upper middle averaged)."""
    ordered = sorted((float(v), n) for v, n in counts.items())
    total = sum(n for _, n in ordered)
    middles, seen, found = ((total - 1) // 2, total // 2), 0, []
    for value, n in ordered:
        while len(found) < 2 and middles[len(found)] < seen + n:
            found.append(value)
        seen += n
    return (found[0] + found[1]) / 2


def _nonpositive(view: RunView) -> dict[str, Any]:
    """DeepSpeed's "<value>: N has to be greater than 0" (runtime/config.py _batch_assertion), and its refusal of a
    config with no batch size at all."""
    refused = [log["data"] for log in view.events.get("log", [])
               if log.get("what") == "batch_nonpositive" and log.get("data")]
    out: dict[str, Any] = {"batch.nonpositive": len(refused), "batch.missing": len(
        {log["rank"] for log in view.events.get("log", []) if log.get("what") == "batch_missing"})}
    if refused:
        (key, value), = refused[0].items()
        out.update({"batch.nonpositive_key": key, "batch.nonpositive_value": value})
    return out


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    world = values.get("run.world_size")
    written, resolved = _configured(view)
    explicit = all(written[k] is not None for k in _KEYS)
    out: dict[str, Any] = {
        "batch.config_explicit": explicit,
        "batch.train_batch_size": resolved[TRAIN_BATCH],
        "batch.micro_batch": resolved[MICRO_BATCH],
        "batch.grad_accum": resolved[GRAD_ACCUM],
        **_nonpositive(view),
    }
    if explicit and world:
        out["batch.config_product"] = written[MICRO_BATCH] * written[GRAD_ACCUM] * world

    per_micro = {
        rank: r["samples"] / r["micro_batches"]
        for rank, r in view.per_rank.items()
        if r.get("samples") and r.get("micro_batches")
    }
    if per_micro:
        out["batch.samples_per_micro"] = statistics.median(per_micro.values())
        micro = resolved[MICRO_BATCH]
        if micro:
            out["batch.mismatched_ranks"] = sorted(r for r, v in per_micro.items() if abs(v - micro) > 1e-9)
    micro_counts = view.fold(__name__).micro_batches
    if micro_counts:
        out["batch.micro_batches_per_step"] = _median(micro_counts)
    if per_micro and micro_counts and world:
        effective = out["batch.samples_per_micro"] * out["batch.micro_batches_per_step"] * world
        out["batch.effective_batch"] = effective
        if resolved[TRAIN_BATCH]:
            out["batch.effective_ratio"] = effective / resolved[TRAIN_BATCH]
    return out
