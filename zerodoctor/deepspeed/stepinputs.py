"""Step-time inputs: a DeepSpeed config, the hardware a person names and a run's measurements → ``Inputs``.

The arithmetic is ``steptime.py``; this module decides where each input comes from and marks it: the config
(micro-batch, gradient accumulation, precision, ``overlap_comm``, ZeRO++), the hardware named (``check``'s
``--seq-len``, ``--gpu``, ``--gpus-per-node``, ``--inter-node``: nominal, the datasheet's or the user's
figure), a run's signals (``check --from``: measured), else the defaults in ``steptime`` (assumed). It sits
with DeepSpeed's other arithmetic so that signals and fixes can price an option as ``check`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from zerodoctor.deepspeed import steptime as st
from zerodoctor.deepspeed.activations import CHECKPOINTING, Shape, Workload, checkpointing_of
from zerodoctor.deepspeed.defaults import GRAD_ACCUM, MICRO_BATCH
from zerodoctor.deepspeed.steptime import Figure, Inputs, StepTime

SEQ_LEN = 2048  # assumed tokens per sample when --seq-len is not given
GPUS_PER_NODE = 8  # assumed GPUs per node when --gpus-per-node is not given


@dataclass(frozen=True)
class Hardware:
    """What the command line says about the job beyond the config; None: not given."""

    seq_len: int | None = None
    gpu: str | None = None
    gpus_per_node: int | None = None
    inter_node: str | float | None = None  # a NODE_LINKS name, or bytes/s out of one node


def inputs_for(config: dict[str, Any], params: float, world_size: int, hw: Hardware | None = None) -> Inputs:
    """Step-time inputs for ``config`` run on ``world_size`` GPUs; a bad --gpu or --inter-node is a ValueError."""
    hw = hw or Hardware()
    micro, accum = _positive_int(config.get(MICRO_BATCH)), _positive_int(config.get(GRAD_ACCUM))
    tokens = (micro or 1) * (accum or 1) * (hw.seq_len or SEQ_LEN)
    tokens_mark = "nominal" if micro and hw.seq_len else "assumed"
    section = config.get("zero_optimization")
    zero: dict[str, Any] = section if isinstance(section, dict) else {}
    gpu_name = hw.gpu or st.DEFAULT_GPU
    gpu = _lookup(st.GPUS, gpu_name, "--gpu")
    gpu_mark = "nominal" if hw.gpu else "assumed"
    intra = gpu.nvlink or gpu.pcie  # without NVLink the ring goes over PCIe
    node_bw, node_mark = _inter_node(hw.inter_node)
    overlap = zero.get("overlap_comm")
    return Inputs(
        params=params, world_size=world_size,
        gpus_per_node=min(hw.gpus_per_node or GPUS_PER_NODE, world_size) or 1,
        tokens_per_gpu=Figure(tokens, tokens_mark, "micro-batch × grad-accum × sequence length"),
        micro_steps=accum or 1,
        bytes_per_element=2 if _half(config) else 4,
        layers=Figure(layers_of(params), "assumed", "a transformer of hidden size 128 × layers"),
        peak_flops=Figure(gpu.peak_flops, gpu_mark, gpu.source),
        intra_bw=Figure(intra * st.LINK_EFFICIENCY, gpu_mark, gpu.source),
        inter_bw=Figure(node_bw * st.LINK_EFFICIENCY, node_mark, "network out of a node"),
        pcie_bw=Figure(gpu.pcie * st.LINK_EFFICIENCY, gpu_mark, gpu.source),
        overlap_comm=overlap if isinstance(overlap, bool) else None,
        hpz=_positive_int(zero.get("zero_hpz_partition_size")) or 1,
        qwz=zero.get("zero_quantized_weights") is True,
        qgz=zero.get("zero_quantized_gradients") is True,
    )


def workload_for(config: dict[str, Any], shape: Shape, hw: Hardware | None = None) -> Workload:
    """What activations depend on: the shape, ``--seq-len`` (else SEQ_LEN, assumed), the config's micro-batch (else
    1, assumed) and its ``activation_checkpointing`` section (none, assumed, when it has none)."""
    hw = hw or Hardware()
    micro = _positive_int(config.get(MICRO_BATCH))
    mode = checkpointing_of(config)
    return Workload(
        shape,
        Figure(hw.seq_len or SEQ_LEN, "nominal" if hw.seq_len else "assumed", "--seq-len"),
        Figure(micro or 1, "nominal" if micro else "assumed", MICRO_BATCH),
        Figure(CHECKPOINTING.index(mode or "none"), "nominal" if mode else "assumed", "activation_checkpointing"))


def layers_of(params: float) -> int:
    """Layers of a dense transformer of ``params`` parameters whose hidden size is 128 × its layers (GPT-3's
    shapes, Llama 7B's 32 × 4096): Ψ ≈ 12·L·h², so L = (Ψ / (12 · 128²))^(1/3)."""
    return max(1, round(float((params / (12 * 128**2)) ** (1 / 3))))


def calibrate(inputs: Inputs, run: dict[str, Any]) -> Inputs:
    """``inputs`` with what a run measured: forward + backward, CPU Adam's rate, the collectives' bandwidth.

    ``run`` holds the run's signals (``run.zero_stage``, ``run.world_size``, ``run.step_s``, ``comm.step_s``,
    ``comm.compute_s``, ``offload.optimizer``, ``offload.param``, ``offload.optimizer_fraction``), medians over
    its last steps. A run that showed only its step time gives compute as that time less the modelled rest.
    """
    stage, step_s = run.get("run.zero_stage"), run.get("run.step_s")
    offload = ("optimizer+param" if run.get("offload.param") and stage == 3
               else "optimizer" if run.get("offload.optimizer") else "none")
    world = run.get("run.world_size") or inputs.world_size
    own = replace(inputs, world_size=world, gpus_per_node=min(inputs.gpus_per_node, world))
    fraction = run.get("offload.optimizer_fraction")
    optim_s = fraction * step_s if fraction is not None and step_s else None
    out = inputs
    if run.get("comm.compute_s") is not None:
        out = st.with_compute(out, max(run["comm.compute_s"] - (optim_s or 0.0), 0.0))
    elif step_s and stage is not None:
        modelled = st.predict(stage, offload, own)
        rest = modelled.total.value - modelled.compute.value
        out = st.with_compute(out, max(step_s - rest, 0.1 * step_s), "assumed")
    if optim_s and offload != "none" and stage:
        node_share = inputs.params / world * own.gpus_per_node
        out = replace(out, cpu_adam=Figure(node_share / optim_s, "measured", "the run's optimizer step"))
    comm_s = run.get("comm.step_s")
    if comm_s and stage is not None and world > 1:
        modelled_comm = sum(st.predict(stage, offload, own).parts.values())
        if modelled_comm > 0:
            scale = modelled_comm / comm_s
            out = replace(out, intra_bw=Figure(out.intra_bw.value * scale, "measured", "the run's collectives"),
                          inter_bw=Figure(out.inter_bw.value * scale, "measured", "the run's collectives"))
    return out


def step_times(inputs: Inputs, options: tuple[tuple[int, str], ...]) -> dict[tuple[int, str], StepTime]:
    return {(stage, offload): st.predict(stage, offload, inputs) for stage, offload in options}


def _lookup(table: dict[str, Any], name: str, option: str) -> Any:
    for key, value in table.items():
        if key.lower() == name.lower():
            return value
    raise ValueError(f"{option} {name!r}: expected one of {', '.join(table)}")


def _inter_node(link: str | float | None) -> tuple[float, str]:
    if link is None:
        return st.NODE_LINKS[st.DEFAULT_NODE_LINK][0], "assumed"
    if isinstance(link, (int, float)):
        return float(link), "nominal"
    return _lookup(st.NODE_LINKS, link, "--inter-node")[0], "nominal"


def _half(config: dict[str, Any]) -> bool:
    """fp16 or bf16 on ("auto" counts: a Trainer fills it from its own flags, which are almost always on)."""
    return any(isinstance(config.get(k), dict) and config[k].get("enabled") in (True, "auto")
               for k in ("fp16", "bf16", "bfloat16"))


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
