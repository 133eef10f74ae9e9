"""Signals, trainer: what Hugging Face Trainer and Accelerate refused or silently changed in the DeepSpeed config.

Accelerate overwrites ``gradient_accumulation_steps`` with its own value and says so only at
INFO, and refuses to prepare a model when nothing says the micro-batch; Trainer refuses a config
whose values contradict its ``TrainingArguments`` (batch values apart: a batch fault, not a
config one). All come from console logs (``sources/hf.py``).
"""

from __future__ import annotations

from typing import Any

from zerodoctor.signals.base import Signal
from zerodoctor.signals.view import RunView

READS = ()

SIGNALS = [
    Signal("trainer.grad_accum_changed", "bool", "Accelerate replaced the config's gradient_accumulation_steps"),
    Signal("trainer.grad_accum_from", "micro-batches", "gradient_accumulation_steps the DeepSpeed config said"),
    Signal("trainer.grad_accum_to", "micro-batches", "gradient_accumulation_steps Accelerate used instead"),
    Signal("trainer.batch_ratio", "ratio", "effective batch / the batch the DeepSpeed config describes"),
    Signal("trainer.config_mismatches", "values", "DeepSpeed config values that contradict TrainingArguments"),
    Signal("trainer.mismatches", "keys", "each contradicting DeepSpeed key → its value in the DeepSpeed config"),
    Signal("trainer.trainer_values", "keys", "the TrainingArguments side: HF key → its value"),
    Signal("trainer.batch_mismatches", "values", "DeepSpeed batch values (train_batch_size, micro-batch, grad-accum) "
                                               "that contradict TrainingArguments"),
    Signal("trainer.batch_mismatch_keys", "keys", "those DeepSpeed batch keys"),
    Signal("trainer.batch_unknown", "bool", "Accelerate refused to prepare: no data loader and no integer micro-batch"),
]


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    logs = view.events.get("log", [])
    out: dict[str, Any] = {}
    updates = [e["data"] for e in logs if e.get("what") == "grad_accum_update" and e.get("data")]
    out["trainer.grad_accum_changed"] = bool(updates)
    if updates:
        was, now = updates[0].get("from"), updates[-1].get("to")
        out["trainer.grad_accum_from"], out["trainer.grad_accum_to"] = was, now
        if was and now:
            out["trainer.batch_ratio"] = now / was
    rows = [row for e in logs if e.get("what") == "hf_config_mismatch"
            for row in (e.get("data") or {}).get("mismatches", [])]
    out["trainer.config_mismatches"] = len(rows)
    if rows:
        out["trainer.mismatches"] = {r["ds_key"]: r["ds_value"] for r in rows}
        out["trainer.trainer_values"] = {r["hf_key"]: r["hf_value"] for r in rows}
    batch_rows = [row for e in logs if e.get("what") == "hf_batch_mismatch"
                  for row in (e.get("data") or {}).get("mismatches", [])]
    out["trainer.batch_mismatches"] = len(batch_rows)
    out["trainer.batch_mismatch_keys"] = list(dict.fromkeys(r["ds_key"] for r in batch_rows)) or None
    out["trainer.batch_unknown"] = any(e.get("what") == "accelerate_batch_unknown" for e in logs)
    return out
