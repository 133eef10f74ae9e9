"""Config check: parameter count, world size, GPU memory → model-state memory and step time per ZeRO option, a pick.

Rows come from the ZeRO paper's arithmetic (``zerodoctor.deepspeed.modelstates``), beside DeepSpeed's
own estimators when DeepSpeed is installed. Those count bytes too, but print them divided
by 2^30 and labelled "GB", and add the largest layer (4 bytes per parameter of it) to their
ZeRO-3 figures, which a config alone cannot tell: it is counted as 0 here. Sizes in this
module are bytes; people see GB = 10^9 bytes, as in the paper. Step times come from
``zerodoctor.deepspeed.steptime`` on the inputs ``deepspeed/stepinputs.py`` gathers; the pick is the simplest
option that fits unless another that fits is faster by more than the model's own error on that comparison.

With the model's shape (``check --model``) activations join model states (``deepspeed/activations.py``): an option
fits when both together leave ``BUFFER_SHARE`` of the GPU for ZeRO's buffers and the allocator, and each option
gets the largest micro-batch that fits and its throughput there, the trade the ZeRO-Offload paper makes (offload
frees memory for a larger batch, which can outrun the offload's cost). Without it the plan is as before: model
states alone, under ``HEADROOM``.

What an option offloads lands in host memory, which every rank of a node shares: each row carries it per node,
and with ``check --host-mem`` an option fits only where it, times DeepSpeed's own staging factor (``HOST_BUFFER``),
fits the host as well. Once everything is offloaded, a trillion parameters "fit" on any GPU; the host is where
they do not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from zerodoctor.deepspeed.activations import Workload
from zerodoctor.deepspeed.modelstates import host_state_bytes, model_state_bytes
from zerodoctor.deepspeed import steptime as st
from zerodoctor.deepspeed.steptime import Figure, Inputs, StepTime, predict
from zerodoctor.signals.memory import BUFFER_SHARE, HEADROOM
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
ASSUMPTION_PRICED = (f"an option fits when model states and activations take at most {1 - BUFFER_SHARE:.0%} of GPU "
                     f"memory; the other {BUFFER_SHARE:.0%} is left for ZeRO's buffers and fragmentation")
NOT_PRICED = "activations: not priced, no --model"
# DeepSpeed's estimators' ``additional_buffer_factor``: host memory for offloaded states is their bytes times this
# (pinned staging buffers, the optimizer's swap of the partition it steps on).
HOST_BUFFER = 1.5
# Byte units as people type them (GB = 10^9), then counts: 7B parameters, 125M; "B" alone is a billion here.
_UNITS = {**{unit.lower(): size for unit, size in TYPED.items() if unit != "B"},
          "": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "b": 1e9}


@dataclass(frozen=True)
class Batch:
    """An option at a micro-batch: its step and its throughput, samples per second over the job."""

    micro_batch: int
    step: StepTime
    samples_per_s: Figure


@dataclass(frozen=True)
class PlanRow:
    stage: int
    offload: str
    model_states_bytes_per_gpu: int
    source: str
    fits: bool | None = None
    step: StepTime | None = None  # the zero-paper row's; DeepSpeed's estimators price memory only
    activations: Figure | None = None  # bytes at the configured micro-batch, with ``--model``
    max_micro_batch: Figure | None = None  # the largest that fits (0: none), with ``--model`` and ``--gpu-mem``
    largest: Batch | None = None  # the option at ``max_micro_batch``, when one fits and a step is priced
    samples_per_s: Figure | None = None  # throughput at the configured micro-batch
    host_bytes_per_node: int = 0  # offloaded model states the node's host memory holds (before ``HOST_BUFFER``)
    host_fits: bool | None = None  # whether they fit ``check --host-mem`` (None: not given, or nothing offloaded)

    @property
    def host_need_bytes(self) -> float:
        """Host memory a node needs for the offloaded states, DeepSpeed's staging buffers included."""
        return self.host_bytes_per_node * HOST_BUFFER

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in ("stage", "offload", "model_states_bytes_per_gpu",
                                                             "source", "fits", "host_bytes_per_node",
                                                             "host_fits")}
        out["memory_mark"] = "nominal"  # the paper's arithmetic on the parameters given, never a measurement
        out.update(self.step.to_json() if self.step else {"step_time_s": None, "step_time_mark": None})
        out.update(_figure("activation_bytes", self.activations), **_figure("samples_per_s", self.samples_per_s),
                   **_figure("max_micro_batch", self.max_micro_batch))
        big = self.largest
        out["at_max_micro_batch"] = {"step_time_s": big.step.total.value, "step_time_mark": big.step.total.mark,
                                     **_figure("samples_per_s", big.samples_per_s)} if big else None
        return out


def _figure(name: str, figure: Figure | None) -> dict[str, Any]:
    return {name: figure.value if figure else None, f"{name}_mark": figure.mark if figure else None}


def parse_quantity(text: str, what: str) -> int:
    """``80GiB``, ``80GB``, ``7.5e9``, ``7.5B``, ``125M`` → an integer; ValueError naming ``what`` otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ValueError(f"{what} {text!r}: expected a number with an optional unit (e.g. 7.5e9, 7B, 80GiB, 80GB)")
    return int(float(match.group(1)) * _UNITS[unit])


def plan(params: int, world_size: int, gpu_mem: int | None = None, *, estimators: bool = True,
         timing: Inputs | None = None, workload: Workload | None = None, host_mem: int | None = None,
         ranks_per_node: int = 1) -> list[PlanRow]:
    """Every ZeRO option by the paper, priced in time on ``timing`` when given and in activations on ``workload``
    (the model's shape and batch) when given, then DeepSpeed's estimates where it has them (and ``estimators``);
    each with the host memory its offload takes on a node of ``ranks_per_node`` ranks, judged against
    ``host_mem`` when given."""
    rows = [_row(stage, offload, model_state_bytes(params, world_size, stage, offload), "zero-paper", gpu_mem,
                 predict(stage, offload, timing) if timing else None, workload, timing)
            for stage, offload in OPTIONS]
    estimates = _deepspeed_estimates(params, world_size) if estimators else []
    rows += [_row(*est, "deepspeed-estimator", gpu_mem) for est in estimates]
    local = min(max(ranks_per_node, 1), world_size)
    return [_on_host(row, host_state_bytes(params, world_size, row.offload) * local, host_mem) for row in rows]


def _on_host(row: PlanRow, need: float, host_mem: int | None) -> PlanRow:
    """``row`` with its host bytes a node, and fitting only where they fit the host too (when it is known)."""
    row = replace(row, host_bytes_per_node=int(need))
    host_fits = None if host_mem is None or not need else row.host_need_bytes <= host_mem
    fits = row.fits and host_fits is not False if row.fits is not None else None
    return replace(row, host_fits=host_fits, fits=fits)


def budget(gpu_mem: int, priced: bool) -> float:
    """Bytes an option may take: model states alone under ``HEADROOM``, or with activations under 1 - BUFFER_SHARE."""
    return (1 - BUFFER_SHARE) * gpu_mem if priced else HEADROOM * gpu_mem


def margin(row: PlanRow, gpu_mem: int) -> int:
    """GPU memory an option leaves unused under its budget: how far it is from not fitting."""
    used = row.model_states_bytes_per_gpu + (row.activations.value if row.activations else 0.0)
    return int(budget(gpu_mem, row.activations is not None) - used)


def largest_micro_batch(states: float, gpu_mem: int, workload: Workload) -> int:
    """The largest micro-batch whose activations fit beside ``states`` (0: not even one sample). Activations grow
    with the micro-batch in proportion (every term of the estimate is a multiple of b), so one division gives it."""
    per_sample = workload.bytes_at(1)
    return max(int((budget(gpu_mem, True) - states) // per_sample), 0)


def at_batch(stage: int, offload: str, timing: Inputs, workload: Workload, micro_batch: int,
             mark: str) -> Batch:
    """The option's step at ``micro_batch`` (tokens and compute scale with it; ZeRO's bytes do not) and its
    throughput: micro-batch × grad-accum × world size samples a step."""
    inputs = st.scaled_batch(timing, micro_batch / workload.micro_batch.value, mark)
    step = predict(stage, offload, inputs)
    samples = micro_batch * inputs.micro_steps * inputs.world_size
    return Batch(micro_batch, step, Figure(samples / step.total.value, st.worst(step.total, Figure(1, mark)),
                                           "micro-batch × grad-accum × world size ÷ step time"))


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


def best_at_largest(rows: list[PlanRow], pick: PlanRow) -> tuple[PlanRow, float] | None:
    """The option that runs the most samples a second at its own largest micro-batch, when that is not the pick
    and beats the pick's at its largest, and the model's error on their ratio: what a larger batch would buy."""
    paper = [r for r in rows if r.source == "zero-paper" and r.largest and r.host_fits is not False]
    if not paper or not pick.largest:
        return None
    best = max(paper, key=lambda r: r.largest.samples_per_s.value if r.largest else 0.0)
    if best is pick or not best.largest or best.largest.samples_per_s.value <= pick.largest.samples_per_s.value:
        return None
    return best, model_error(best, pick)


def model_error(a: PlanRow, b: PlanRow) -> float:
    """``steptime.MODEL_ERROR`` of the ratio between two plan rows' options."""
    return st.error_between((a.stage, a.offload), (b.stage, b.offload))


def _seconds(row: PlanRow) -> float:
    return row.step.total.value if row.step else 0.0


def _row(stage: int, offload: str, need: float, source: str, gpu_mem: int | None, step: StepTime | None = None,
         workload: Workload | None = None, timing: Inputs | None = None) -> PlanRow:
    if workload is None:
        return PlanRow(stage, offload, int(need), source, None if gpu_mem is None else need <= budget(gpu_mem, False),
                       step)
    micro = workload.micro_batch
    act = Figure(workload.bytes_at(int(micro.value)), workload.mark, "activations at the configured micro-batch")
    fits = None if gpu_mem is None else need + act.value <= budget(gpu_mem, True)
    samples = at_batch(stage, offload, timing, workload, int(micro.value), micro.mark).samples_per_s if timing else None
    if gpu_mem is None:
        return PlanRow(stage, offload, int(need), source, fits, step, act, samples_per_s=samples)
    most = largest_micro_batch(need, gpu_mem, workload)
    most_fig = Figure(most, workload.mark, "the largest micro-batch whose activations fit")
    largest = at_batch(stage, offload, timing, workload, most, workload.mark) if timing and most else None
    return PlanRow(stage, offload, int(need), source, fits, step, act, most_fig, largest, samples)


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
