"""Signals, price: a slow run's remedies → the step time each would give, from the step-time model calibrated on it.

The communication and offload rules (ZD3xx, ZD5xx) offer remedies whose whole worth is time: drop the offload,
offload only the optimizer, use stage 2, overlap the collectives. ``deepspeed/steptime.py`` prices every stage ×
offload option, and ``deepspeed/stepinputs.py`` calibrates it with what the run measured (its forward + backward,
its collectives, its optimizer step), as ``check --from`` does; this module is the one place a finding's remedy is
priced, so a fix can say "predicted step 1.20 s from measured rates, now 24.1 s" and ``check`` cannot disagree.

A remedy's step is the run's measured step times the model's ratio of the remedy's step to the run's own option:
the model's error is measured on such ratios (``bench/steptime_published.py``), and the run's own option is then
exactly what it measured. Each record carries the mark of the least certain rate it rests on (measured, nominal or
assumed). Where the run does not show an input the model needs, the record names it (``missing``) instead of a
number. Bucket sizes are not priced: the model has no per-call latency to weigh fewer, larger calls with.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from zerodoctor.deepspeed import steptime as st
from zerodoctor.deepspeed.stepinputs import Hardware, calibrate, inputs_for
from zerodoctor.deepspeed.steptime import Inputs
from zerodoctor.signals import run as run_signals
from zerodoctor.signals.base import shown_by
from zerodoctor.signals.inputs import STEPS
from zerodoctor.signals.view import RunView

_priced = shown_by(STEPS)
_RECORD = ("a record: now_s, the run's step; step_s, the predicted step, and mark, measured, nominal or assumed, the "
           "least certain rate it rests on; or missing, the inputs the run does not show")

READS = ("run.params", "run.world_size", "run.zero_stage", "run.step_s", "run.device_name", "run.host_only",
         "comm.step_s", "comm.compute_s", "offload.optimizer", "offload.param", "offload.optimizer_fraction")
# What the model needs from the run before it can price anything: without them a number would be invented.
NEEDS = ("run.params", "run.world_size", "run.zero_stage", "run.step_s")
_LABELS = {name: next(s.label for s in run_signals.SIGNALS if s.name == name) for name in NEEDS}

SIGNALS = [
    _priced("price.no_offload", "records", f"the run's stage with nothing offloaded, priced: {_RECORD}",
            label="predicted step with nothing offloaded"),
    _priced("price.optimizer_only", "records", f"ZeRO-3 with only the optimizer offloaded, priced: {_RECORD}",
            label="predicted step with only the optimizer offloaded"),
    _priced("price.stage2", "records", f"ZeRO-2 keeping the run's optimizer offload, priced: {_RECORD}",
            label="predicted step under ZeRO-2"),
    _priced("price.stage2_offload", "records", f"ZeRO-2 with the optimizer offloaded, priced: {_RECORD}",
            label="predicted step under ZeRO-2 with optimizer offload"),
    _priced("price.overlap", "records", f"the run's option with overlap_comm on, priced: {_RECORD}",
            label="predicted step with overlap_comm on"),
    _priced("price.refuted", "values",
            "the remedies the model prices no faster than the run by more than its own error on that comparison "
            "(steptime.MODEL_ERROR), of no_offload, optimizer_only, stage2 and stage2_offload; empty where "
            "nothing is priced", label="remedies the step-time model prices no faster"),
]


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    facts: dict[str, Any] = {name: getattr(values.get(name), "summary", values.get(name)) for name in READS}
    missing = [label for name, label in _LABELS.items() if facts.get(name) is None]
    if missing:
        return _unpriced(facts["run.step_s"], ", ".join(missing))
    stage, optimizer, now_s = int(facts["run.zero_stage"]), bool(facts["offload.optimizer"]), float(facts["run.step_s"])
    own = ("optimizer+param" if facts["offload.param"] and stage == 3 else "optimizer" if optimizer else "none")
    inputs = calibrate(inputs_for(view.config, float(facts["run.params"]), int(facts["run.world_size"]),
                                  Hardware(gpu=_gpu(facts["run.device_name"]))), facts)
    if facts["run.host_only"]:
        inputs = replace(inputs, local_adam=inputs.cpu_adam)
    if facts["comm.step_s"] is not None:
        # time measured in collectives is time the step waited on them, whatever overlap_comm says: the model's
        # overlap would hide what the run showed exposed, so only the overlap remedy is priced with it
        inputs = replace(inputs, overlap_comm=False)
    now = st.predict(stage, own, inputs).total
    if now.value <= 0:  # nothing to scale by: a run the model prices at no time at all
        return _unpriced(now_s, "a step the model can price")
    options: dict[str, tuple[int, str, Inputs]] = {
        "price.no_offload": (stage, "none", inputs),
        "price.optimizer_only": (3, "optimizer", inputs),
        "price.stage2": (2, "optimizer" if optimizer else "none", inputs),
        "price.stage2_offload": (2, "optimizer", inputs),
        "price.overlap": (stage, own, replace(inputs, overlap_comm=True)),
    }
    out: dict[str, Any] = {"price.refuted": []}
    for name, (option_stage, offload, priced_on) in options.items():
        step = st.predict(option_stage, offload, priced_on).total
        out[name] = {"now_s": now_s, "step_s": now_s * step.value / now.value, "mark": st.worst(now, step)}
        # A remedy the model cannot tell from the run's own option is refuted by the run's own numbers: offering
        # it would promise a gain the model does not predict (the CPU accelerator's offload, priced alike).
        if name != "price.overlap" and step.value >= (
                1 - st.error_between((option_stage, offload), (stage, own))) * now.value:
            out["price.refuted"].append(name.removeprefix("price."))
    return out


def _unpriced(now_s: float | None, missing: str) -> dict[str, Any]:
    """Every remedy's record naming what the model lacks; none refuted, as none is priced."""
    return {s.name: [] if s.name == "price.refuted" else {"now_s": now_s, "missing": missing} for s in SIGNALS}


def _gpu(device: str | None) -> str | None:
    """The GPU kind of ``steptime.GPUS`` a device's name is (``NVIDIA A100-SXM4-80GB`` → A100): its datasheet's
    rates, nominal; None (an A100 assumed) for a device it does not know."""
    name = (device or "").upper().replace("-", " ")
    return next((kind for kind in st.GPUS if kind.replace("-", " ") in name), None)
