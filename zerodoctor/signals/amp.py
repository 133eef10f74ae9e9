"""Signals, loss scalers outside DeepSpeed: apex's and fairseq's overflow lines → how far the scale fell.

Reads ``log`` events ``amp_overflow`` / ``amp_min_scale`` (``sources/amp.py``). A dynamic scaler halves on each
overflow and grows back after a window of clean steps; a scale that has fallen below 1 divides the loss
instead of multiplying it, which only happens when the gradients overflow fp16 unscaled: they are already
inf/NaN, and no scale helps. fairseq stops there (its minimum, 1e-4 by default); apex goes on halving to 0.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.signals.view import RunView
from zerodoctor.signals.base import Signal

READS = ()

SIGNALS = [
    Signal("amp.overflows", "lines", "overflow lines of apex's or fairseq's loss scaler"),
    Signal("amp.scaler", "name", "loss scaler"),
    Signal("amp.scale_first", "scale", "first loss scale printed"),
    Signal("amp.scale_last", "scale", "last loss scale printed"),
    Signal("amp.min_reached", "bool", "fairseq stopped at its minimum loss scale"),
]


def compute(run: RunView, values: dict[str, Any]) -> dict[str, Any]:
    logs = [e for e in run.events.get("log", []) if e.get("what") in ("amp_overflow", "amp_min_scale")]
    overflows = [e["data"] for e in logs if e["what"] == "amp_overflow"]
    out: dict[str, Any] = {"amp.overflows": len(overflows), "amp.min_reached": any(
        e["what"] == "amp_min_scale" for e in logs)}
    if logs:
        out["amp.scaler"] = logs[-1]["data"]["scaler"]
    if overflows:
        out.update({"amp.scale_first": overflows[0]["scale"], "amp.scale_last": overflows[-1]["scale"]})
    return out
