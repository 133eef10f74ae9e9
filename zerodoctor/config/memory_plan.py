"""Config check: parameter count, world size, GPU memory → model-state memory and step time per ZeRO option, a pick.

Rows come from the ZeRO paper's arithmetic (``zerodoctor.deepspeed.modelstates``), beside DeepSpeed's
own estimators when DeepSpeed is installed. Those count bytes too, but print them divided
by 2^30 and labelled "GB", and add the largest layer (4 bytes per parameter of it) to their
ZeRO-3 figures, which a config alone cannot tell: it is counted as 0 here. Sizes in this
module are bytes; people see GB = 10^9 bytes, as in the paper. Step times come from
``zerodoctor.deepspeed.steptime`` on the inputs ``deepspeed/stepinputs.py`` gathers; the pick is the simplest
option that fits unless another that fits is faster by more than the model's own error on that comparison.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zerodoctor.deepspeed.modelstates import model_state_bytes
from zerodoctor.deepspeed import steptime as st
from zerodoctor.deepspeed.steptime import Inputs, StepTime, predict
from zerodoctor.signals.memory import HEADROOM
from zerodoctor.messages.units import TYPED

# The options a pick chooses from, simplest first: no offload, then optimizer offload (CPU Adam, PCIe once a step),
# then ZeRO-3 (parameters gathered every layer), then ZeRO-3 with offloads. The order breaks a tie of step times
# and is the whole order when no step time is known. Stage 1 with the optimizer offloaded (DeepSpeed runs it with
# stage 2's optimizer, gradients left whole: engine.py _configure_zero_optimizer's partition_grads) is the simpler
# offload: its gradients cross PCIe once a step, stage 2's once a micro-step.
PREFERENCE = ((1, "none"), (2, "none"), (1, "optimizer"), (2, "optimizer"), (3, "none"), (3, "optimizer"),
              (3, "optimizer+param"))
OPTIONS = ((0, "none"), (1, "none"), (1, "optimizer"), (2, "none"), (2, "optimizer"),
           (3, "none"), (3, "optimizer"), (3, "optimizer+param"))
ASSUMPTION = (f"an option fits when model states take at most {HEADROOM:.0%} of GPU memory; "
              f"the other {1 - HEADROOM:.0%} is left for activations, buffers and fragmentation")
# Byte units as people type them (GB = 10^9), then counts: 7B parameters, 125M; "B" alone is a billion here.
_UNITS = {**{unit.lower(): size for unit, size in TYPED.items() if unit != "B"},
          "": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "b": 1e9}


@dataclass(frozen=True)
class PlanRow:
    stage: int
    offload: str
    model_states_bytes_per_gpu: int
    source: str
    fits: bool | None = None
    step: StepTime | None = None  # the zero-paper row's; DeepSpeed's estimators price memory only

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in vars(self).items() if k != "step"}
        out["memory_mark"] = "nominal"  # the paper's arithmetic on the parameters given, never a measurement
        out.update(self.step.to_json() if self.step else {"step_time_s": None, "step_time_mark": None})
        return out


def parse_quantity(text: str, what: str) -> int:
    """``80GiB``, ``80GB``, ``7.5e9``, ``7.5B``, ``125M`` → an integer; ValueError naming ``what`` otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ValueError(f"{what} {text!r}: expected a number with an optional unit (e.g. 7.5e9, 7B, 80GiB, 80GB)")
    return int(float(match.group(1)) * _UNITS[unit])


def plan(params: int, world_size: int, gpu_mem: int | None = None, *, estimators: bool = True,
         timing: Inputs | None = None) -> list[PlanRow]:
    """Every ZeRO option by the paper, priced in time on ``timing`` when given, then DeepSpeed's estimates where
    it has them (and ``estimators``)."""
    rows = [_row(stage, offload, model_state_bytes(params, world_size, stage, offload), "zero-paper", gpu_mem,
                 predict(stage, offload, timing) if timing else None)
            for stage, offload in OPTIONS]
    estimates = _deepspeed_estimates(params, world_size) if estimators else []
    return rows + [_row(*est, "deepspeed-estimator", gpu_mem) for est in estimates]


def recommend(rows: list[PlanRow]) -> PlanRow | None:
    """The simplest option that fits (``PREFERENCE`` order) that no other option that fits is clearly faster than.

    A difference smaller than the model's own error is no ground to pick the more complex option: ZeRO-3 was
    underestimated on every published row before its fetch cost was fitted. Without step times this is the
    first option that fits. The fastest option is never clearly beaten, so one that fits is always picked."""
    paper = {(r.stage, r.offload): r for r in rows if r.source == "zero-paper"}
    fitting = [paper[o] for o in PREFERENCE if paper[o].fits]
    return next((r for r in fitting if not any(clearly_faster(other, r) for other in fitting)), None)


def clearly_faster(a: PlanRow, b: PlanRow) -> bool:
    """Whether option ``a`` is faster than ``b`` by more than the model's error ``e`` on their ratio: its step time
    under (1 - e) × b's. A predicted ratio r off by e means a published one as high as r / (1 - e)."""
    if not (a.step and b.step):
        return False
    return a.step.total.value < (1 - model_error(a, b)) * b.step.total.value


def within_error(rows: list[PlanRow], pick: PlanRow) -> tuple[PlanRow, float] | None:
    """The fastest option that fits, when it is faster than the pick (so within the model's error of it), and
    that error: what the pick's line names beside the pick."""
    paper = {(r.stage, r.offload): r for r in rows if r.source == "zero-paper"}
    timed = [paper[o] for o in PREFERENCE if paper[o].fits and paper[o].step]
    if not pick.step or not timed:
        return None
    fastest = min(timed, key=_seconds)
    return (fastest, model_error(fastest, pick)) if _seconds(fastest) < _seconds(pick) else None


def model_error(a: PlanRow, b: PlanRow) -> float:
    """``steptime.MODEL_ERROR`` of the ratio between two plan rows' options."""
    return st.error_between((a.stage, a.offload), (b.stage, b.offload))


def _seconds(row: PlanRow) -> float:
    return row.step.total.value if row.step else 0.0


def _row(stage: int, offload: str, need: float, source: str, gpu_mem: int | None,
         step: StepTime | None = None) -> PlanRow:
    return PlanRow(stage, offload, int(need), source, None if gpu_mem is None else need <= HEADROOM * gpu_mem, step)


def _deepspeed_estimates(params: int, world_size: int) -> list[tuple[int, str, float]]:
    """GPU bytes from the functions behind DeepSpeed's ``estimate_zero{2,3}_model_states_mem_needs_all_live``."""
    from zerodoctor.config.deepspeed_validate import available, import_deepspeed

    if not available():
        return []
    import_deepspeed()
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    out = [(2, off, estimate_zero2_model_states_mem_needs(params, world_size, 1, cpu_offload=off != "none")[1])
           for off in ("none", "optimizer")]
    for off in ("none", "optimizer", "optimizer+param"):
        _, gpu, _ = estimate_zero3_model_states_mem_needs(
            params, 0, world_size, 1, cpu_offload=off != "none", cpu_offload_params=off == "optimizer+param")
        out.append((3, off, gpu))
    return out
