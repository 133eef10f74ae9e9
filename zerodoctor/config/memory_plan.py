"""Config check: parameter count, world size, GPU memory → model-state memory and step time per ZeRO option, a pick.

Rows come from the ZeRO paper's arithmetic (``zerodoctor.deepspeed.modelstates``), beside DeepSpeed's
own estimators when DeepSpeed is installed. Those count bytes too, but print them divided
by 2^30 and labelled "GB", and add the largest layer (4 bytes per parameter of it) to their
ZeRO-3 figures, which a config alone cannot tell: it is counted as 0 here. Sizes in this
module are bytes; people see GB = 10^9 bytes, as in the paper. Step times come from
``zerodoctor.deepspeed.steptime`` on the inputs ``deepspeed/stepinputs.py`` gathers; the pick is the fastest
option that fits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zerodoctor.deepspeed.modelstates import model_state_bytes
from zerodoctor.deepspeed.steptime import Inputs, StepTime, predict
from zerodoctor.signals.memory import HEADROOM
from zerodoctor.messages.units import TYPED

# The options a pick chooses from, in the order that breaks a tie of step times (and the whole order when no
# step time is known): no offload, then optimizer offload (CPU Adam, PCIe once a step), then ZeRO-3
# (parameters gathered every layer), then ZeRO-3 with offloads.
PREFERENCE = ((1, "none"), (2, "none"), (2, "optimizer"), (3, "none"), (3, "optimizer"), (3, "optimizer+param"))
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
    """The fastest option whose paper figure fits: by predicted step time where the rows have one, ties (and
    rows without one) in ``PREFERENCE`` order."""
    paper = {(r.stage, r.offload): r for r in rows if r.source == "zero-paper"}
    fitting = [(_seconds(paper[o]), rank, paper[o]) for rank, o in enumerate(PREFERENCE) if paper[o].fits]
    return min(fitting, key=lambda t: t[:2])[2] if fitting else None


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
