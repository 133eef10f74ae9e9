"""Step time per ZeRO stage × offload option: the parts a step is made of, each figure marked where it came from.

The memory plan (``modelstates.py``) says which options fit; this says what each costs in time, so a plan can
weigh the trade-off the practitioners describe ("stage 3 trained almost twice as slowly as stage 2"). A step is:

- compute: forward and backward, 6Ψ·T FLOPs for T tokens per GPU (Kaplan et al. 2020, §2.1), at the GPU's
  nominal peak × an assumed utilisation, or the run's own time when one was measured;
- ZeRO's collectives (Rajbhandari et al. 2019, §7): an all-reduce's 2Ψ for stages 0-1 once a step, a
  reduce-scatter of Ψ every micro-step plus an all-gather of Ψ after the step for stage 2, and for stage 3
  an all-gather in forward and in backward and a reduce-scatter every micro-step (3Ψ). ZeRO++ (Wang et al.
  2023): hpZ moves the backward all-gather inside the node, qwZ halves the forward all-gather's bytes
  (int8), qgZ quarters the reduce-scatter's (int4). A ring moves (N-1)/N of each collective's bytes through
  the slowest link: NVLink (or PCIe) inside a node, the node's network share between nodes;
- overlap (``overlap_comm``, on by default for stage 3 only): a gradient reduction hides behind backward,
  a prefetched parameter gather behind the phase it feeds; what does not fit is exposed;
- stage 3's per-layer fetch: each layer's parameters are gathered by a hook before forward and backward,
  a fixed cost per layer however fast the link;
- optimizer offload (ZeRO-Offload, Ren et al. 2021): gradients to the host and fp16 parameters back over
  PCIe, and CPU Adam over the node's share of parameters; parameter offload (ZeRO-Infinity, Rajbhandari
  et al. 2021) brings each rank's partition over PCIe before every gather, in forward and in backward. A
  GPU's copies go at its PCIe link's pace, or at its share of what the whole host moves when all its GPUs
  copy at once, whichever is slower.

Each figure is ``measured`` (read from a run), ``nominal`` (a datasheet's number) or ``assumed`` (a default
nobody measured here); a figure computed from an assumed one is assumed. ``predict`` is the one entry point.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

MARKS = ("measured", "nominal", "assumed")
MFU = 0.40  # assumed share of peak FLOPs a transformer step reaches (MFU of well-tuned dense training: 0.3-0.5)
LINK_EFFICIENCY = 0.70  # assumed share of a link's nominal bandwidth a NCCL ring reaches
# Assumed CPU Adam rate per node. What hosts reach varies fourfold: the ZeRO-Offload paper's Table 4 measured
# 1-10B parameters in 0.22-2.57 s (~4e9/s) on a DGX-2's two 24-core Xeons; DeepSpeed #6695 reports 1.2B in ~1.5 s.
CPU_ADAM_PARAMS_S = 1.0e9
# Assumed host <-> GPU bandwidth of a whole node, all GPUs copying at once: the ZeRO-Infinity paper (§6.2) measured
# 3.0 GB/s per GPU with 16 V100s of a DGX-2 reading CPU memory in parallel, 48 GB/s in all; one GPU alone gets its
# PCIe link.
HOST_BW_PER_NODE = 48e9
# ZeRO-3's cost per layer per gather (hook, allocation, launch, waiting on a collective too small to fill the
# link), whatever the bytes. No source publishes it; bench/steptime_published.py fits it: the cost whose median
# error over the published ZeRO-3 rows looked at is least (3.9 ms with the ZeRO-3 Offload blog's rows priced at
# each option's largest batch, 4.0 ms before; stage 3 / stage 2 12.1% in-sample, 18.8% with each row held out of
# its own fit). Cross-check, not fitted: DeepSpeed #1174/#1188 (BERT 5.1B, 64 layers, 8 A100s) measured forward in
# ~60 ms under ZeRO-2 (#1174) and ~270 ms under ZeRO-3 (#1188's fix), 3.3 ms a layer with the gathers' bytes.
LAYER_FETCH_S = 0.0039


@dataclass(frozen=True)
class Gpu:
    """One GPU kind's datasheet figures, per direction (the datasheets print both directions added)."""

    name: str
    peak_flops: float  # dense fp16/bf16 tensor FLOP/s
    nvlink: float  # bytes/s per GPU per direction; 0 without NVLink (peers talk over PCIe)
    pcie: float  # bytes/s per GPU per direction
    source: str
    fp32_flops: float = 0.0  # FP32 FLOP/s without tensor cores: torch's matmuls leave TF32 off by default (1.12+)

    def peak_for(self, precision: str | None) -> float:
        """The peak a run in ``precision`` can reach: fp32's for fp32, else the fp16/bf16 tensor peak."""
        return self.fp32_flops if precision == "fp32" and self.fp32_flops else self.peak_flops


GPUS = {g.name: g for g in (
    Gpu("V100", 125e12, 150e9, 16e9,
        "NVIDIA V100 datasheet: 125 TFLOPS tensor, NVLink 300 GB/s, PCIe gen3 x16 32 GB/s (both directions)",
        15.7e12),
    Gpu("A100", 312e12, 300e9, 32e9,
        "NVIDIA A100 datasheet: 312 TFLOPS bf16 dense, NVLink 600 GB/s, PCIe gen4 64 GB/s (both directions)",
        19.5e12),
    Gpu("H100", 989e12, 450e9, 64e9,
        "NVIDIA H100 SXM datasheet: 989 TFLOPS bf16 dense, NVLink 900 GB/s, PCIe gen5 128 GB/s (both directions)",
        67e12),
    Gpu("H200", 989e12, 450e9, 64e9,
        "NVIDIA H200 SXM datasheet: 989 TFLOPS bf16 dense, NVLink 900 GB/s, PCIe gen5 128 GB/s (both directions)",
        67e12),
    Gpu("TITAN-RTX", 130e12, 0.0, 16e9,
        "NVIDIA TITAN RTX spec: 130 TFLOPS fp16 tensor, PCIe gen3 x16 (no NVLink bridge counted)", 16.3e12),
)}
DEFAULT_GPU = "A100"


def gpu_named(device_name: str | None) -> Gpu | None:
    """The GPU kind a device name is (torch's ``get_device_properties().name``: 'NVIDIA A100-SXM4-80GB', 'Tesla
    V100-SXM2-32GB', 'NVIDIA H100 80GB HBM3'); None for one not in ``GPUS``. A PCIe card of a kind whose figures
    are the SXM part's (H100 PCIe: 756 TFLOPS) is None too: its peak is not the table's."""
    if not device_name:
        return None
    words = re.split(r"[\s_-]+", device_name.upper())
    if "PCIE" in words and any(k in words for k in ("H100", "H200")):
        return None
    return next((g for key, g in GPUS.items() if key.upper().replace("-", " ") in " ".join(words)), None)

# Network bandwidth out of one node, bytes/s per direction: a NIC kind, or the instances people name.
NODE_LINKS = {
    "hdr": (25e9, "InfiniBand HDR, one 200 Gb/s NIC"),
    "ndr": (50e9, "InfiniBand NDR, one 400 Gb/s NIC"),
    "dgx-a100": (200e9, "DGX A100: 8 InfiniBand HDR NICs of 200 Gb/s"),
    "dgx-h100": (400e9, "DGX H100: 8 InfiniBand NDR NICs of 400 Gb/s"),
    "p3dn": (12.5e9, "AWS p3dn.24xlarge: 100 Gb/s EFA"),
    "p4d": (50e9, "AWS p4d.24xlarge: 400 Gb/s EFA"),
    "dgx-2": (100e9, "DGX-2: 8 InfiniBand EDR NICs of 100 Gb/s"),
    "100gbe": (12.5e9, "100 Gb Ethernet"),
}
DEFAULT_NODE_LINK = "dgx-a100"


@dataclass(frozen=True)
class Figure:
    """A number and where it came from: ``mark`` one of MARKS, ``source`` a few words a person can check."""

    value: float
    mark: str
    source: str = ""

    def scaled(self, factor: float, mark: str | None = None) -> Figure:
        return Figure(self.value * factor, mark or self.mark, self.source)


def worst(*figures: Figure) -> str:
    """The mark of a figure computed from these: assumed if any is, else nominal if any is, else measured.

    A part that is zero whatever the rates (no collectives on one GPU, no host copies without offload) adds
    nothing to a sum and does not lower its mark."""
    marks = {f.mark for f in figures if f.value} or {f.mark for f in figures}
    return next(m for m in reversed(MARKS) if m in marks) if marks else "assumed"


@dataclass(frozen=True)
class Inputs:
    """What a step's time depends on; every rate a Figure so its mark travels into the parts it prices.

    ``compute_s`` is forward + backward of one optimizer step on one GPU (all micro-steps), when a run
    measured it; otherwise it is priced from ``peak_flops`` × ``mfu`` and 6Ψ·T.
    """

    params: float
    world_size: int
    gpus_per_node: int
    tokens_per_gpu: Figure  # tokens one GPU processes per optimizer step
    micro_steps: int = 1  # gradient accumulation steps
    bytes_per_element: int = 2  # fp16/bf16 collectives; 4 in fp32
    layers: Figure = Figure(32, "assumed")
    peak_flops: Figure = Figure(GPUS[DEFAULT_GPU].peak_flops, "assumed")
    mfu: Figure = Figure(MFU, "assumed")
    intra_bw: Figure = Figure(GPUS[DEFAULT_GPU].nvlink * LINK_EFFICIENCY, "assumed")
    inter_bw: Figure = Figure(NODE_LINKS[DEFAULT_NODE_LINK][0] * LINK_EFFICIENCY, "assumed")  # per node
    pcie_bw: Figure = Figure(GPUS[DEFAULT_GPU].pcie * LINK_EFFICIENCY, "assumed")  # one GPU's, copying alone
    host_bw: Figure = Figure(HOST_BW_PER_NODE, "assumed")  # a node's, all its GPUs copying at once
    cpu_adam: Figure = Figure(CPU_ADAM_PARAMS_S, "assumed")  # parameters per second per node
    layer_fetch_s: Figure = Figure(LAYER_FETCH_S, "assumed", "fitted to published step times")
    overlap_comm: bool | None = None  # None: DeepSpeed's default, on for stage 3 only
    hpz: int = 1  # zero_hpz_partition_size
    qwz: bool = False  # zero_quantized_weights
    qgz: bool = False  # zero_quantized_gradients
    compute_s: Figure | None = None
    # The optimizer step's rate where nothing is offloaded, parameters per second per node: None on a GPU, whose own
    # step is small beside the rest; on DeepSpeed's CPU accelerator the "device" is the host, and its step runs at
    # CPU Adam's pace with or without offload.
    local_adam: Figure | None = None

    @property
    def nodes(self) -> int:
        return -(-self.world_size // max(self.gpus_per_node, 1))


@dataclass(frozen=True)
class StepTime:
    """One option's step, in seconds per optimizer step, by part; ``total`` is what a step costs."""

    stage: int
    offload: str
    compute: Figure
    comm: Figure  # collectives left exposed after overlap
    fetch: Figure  # stage 3's per-layer gather cost
    pcie: Figure  # host <-> GPU copies not hidden
    optimizer: Figure  # CPU Adam (offload) or the GPU's own step (0 here: small beside the rest)
    parts: dict[str, float] = field(default_factory=dict)  # the collectives' times before overlap, for reading

    @property
    def total(self) -> Figure:
        figures = (self.compute, self.comm, self.fetch, self.pcie, self.optimizer)
        return Figure(sum(f.value for f in figures), worst(*figures))

    def to_json(self) -> dict[str, object]:
        part = {name: {"seconds": f.value, "mark": f.mark} for name, f in (
            ("compute", self.compute), ("comm", self.comm), ("fetch", self.fetch), ("pcie", self.pcie),
            ("optimizer", self.optimizer))}
        return {"step_time_s": self.total.value, "step_time_mark": self.total.mark, "parts": part}


def compute_time(inputs: Inputs) -> Figure:
    """Forward + backward of one optimizer step on one GPU: measured, or 6Ψ·T / (peak × utilisation)."""
    if inputs.compute_s is not None:
        return inputs.compute_s
    flops = 6 * inputs.params * inputs.tokens_per_gpu.value
    return Figure(flops / (inputs.peak_flops.value * inputs.mfu.value),
                  worst(inputs.tokens_per_gpu, inputs.peak_flops, inputs.mfu), "6 × parameters × tokens")


def ring_time(size_bytes: float, inputs: Inputs, *, within_node: bool = False) -> tuple[float, Figure]:
    """Seconds for one reduce-scatter or all-gather of ``size_bytes`` over the data-parallel ranks.

    A ring passes (N-1)/N of the bytes through each rank's link; between nodes each node's network carries
    that much for its GPUs together (NCCL runs one ring per NIC), so the slower of the two sets the pace.
    """
    n = inputs.world_size if not within_node else min(inputs.world_size, inputs.gpus_per_node, inputs.hpz)
    if n <= 1:
        return 0.0, Figure(0.0, "nominal")
    moved = size_bytes * (n - 1) / n
    if within_node or inputs.nodes == 1:
        return moved / inputs.intra_bw.value, inputs.intra_bw
    slow = min(inputs.intra_bw, inputs.inter_bw, key=lambda f: f.value)
    return moved / slow.value, slow


# The model's error on the ratio of two options' step times, per kind of ratio: the held-out (leave-one-out) median
# of |predicted / published - 1| that bench/steptime_published.py measures against the published step times looked
# at while the model was made (rows in brackets); its untouched rows test these figures and enter none of them. A
# comparison the bench has no published pair for takes the largest of these. A pick (``check``) and a priced remedy
# (``signals/price.py``) call one option faster than another only by more than this.
MODEL_ERROR = {
    "stage 2 / stage 1": 0.250,  # (3) BELLE #402: stage 2 20-33% slower; the model prices both alike
    "stage 3 / stage 2": 0.188,  # (4)
    "optimizer only / none": 0.181,  # (8)
    "offload all / none": 0.246,  # (1)
    "stage 2 optimizer only / stage 3 none": 0.044,  # (2)
    # (3) #3901 on 8 A100s, and the ZeRO-3 Offload blog's one V100 at 10B and 13B priced at each option's largest
    # micro-batch (+34% and +32%; +66% and +140% at one batch for both, which the blog did not run)
    "stage 3 offload all / stage 2 optimizer only": 0.325,
}
_OFFLOADS = {"none": "none", "optimizer": "optimizer only", "optimizer+param": "offload all"}


def comparison(a: tuple[int, str], b: tuple[int, str]) -> str:
    """The kind of ratio between two (stage, offload) options, as ``MODEL_ERROR`` names it."""
    (sa, oa), (sb, ob) = a, b
    if oa == ob:
        return f"stage {sa} / stage {sb}"
    if sa == sb:
        return f"{_OFFLOADS[oa]} / {_OFFLOADS[ob]}"
    return f"stage {sa} {_OFFLOADS[oa]} / stage {sb} {_OFFLOADS[ob]}"


def error_between(a: tuple[int, str], b: tuple[int, str]) -> float:
    """``MODEL_ERROR`` of the ratio between two options, either way round; the largest for one not measured."""
    return MODEL_ERROR.get(comparison(a, b), MODEL_ERROR.get(comparison(b, a), max(MODEL_ERROR.values())))


def predict(stage: int, offload: str, inputs: Inputs) -> StepTime:
    """One option's step time on the hardware and batch ``inputs`` describe (see the module doc)."""
    compute = compute_time(inputs)
    psi, b, k = inputs.params, inputs.bytes_per_element, inputs.micro_steps
    overlap = inputs.overlap_comm if inputs.overlap_comm is not None else stage == 3
    full = psi * b
    marks: list[Figure] = []

    def ring(size: float, **kw: bool) -> float:
        seconds, link = ring_time(size, inputs, **kw)
        marks.append(link)
        return seconds

    fwd_c, bwd_c = compute.value / 3, 2 * compute.value / 3  # backward is twice forward's FLOPs
    if stage <= 1:
        parts = {"all-reduce": 2 * ring(full)}  # once a step, after the last micro-step: nothing to hide behind
        exposed = parts["all-reduce"]
    elif stage == 2:
        parts = {"reduce-scatter": k * ring(full), "all-gather": ring(full)}
        hidden = min(parts["reduce-scatter"], bwd_c) if overlap else 0.0
        exposed = parts["reduce-scatter"] - hidden + parts["all-gather"]
    else:
        gather_fwd = k * ring(full / 2 if inputs.qwz else full)
        gather_bwd = k * ring(full, within_node=inputs.hpz > 1) if inputs.hpz > 1 else k * ring(full)
        scatter = k * ring(full / 4 if inputs.qgz else full)
        parts = {"all-gather (forward)": gather_fwd, "all-gather (backward)": gather_bwd, "reduce-scatter": scatter}
        if overlap:
            exposed = max(gather_fwd - fwd_c, 0.0) + max(gather_bwd + scatter - bwd_c, 0.0)
        else:
            exposed = gather_fwd + gather_bwd + scatter
    comm = Figure(exposed, worst(*marks) if marks else "nominal", "ZeRO's collectives")

    fetch = Figure(0.0, "nominal")
    if stage == 3:
        fetch = Figure(2 * k * inputs.layers.value * inputs.layer_fetch_s.value,
                       worst(inputs.layers, inputs.layer_fetch_s), "per-layer gathers")

    pcie, optimizer = Figure(0.0, "nominal"), Figure(0.0, "nominal")
    share = psi / max(inputs.world_size, 1)  # parameters whose update this rank owns (stages 1-3)
    if offload != "none" and stage >= 1:
        local = min(inputs.gpus_per_node, inputs.world_size)  # ranks sharing a host's CPUs and memory
        optimizer = Figure(share * local / inputs.cpu_adam.value, inputs.cpu_adam.mark, "CPU Adam")
        host = min(inputs.pcie_bw, inputs.host_bw.scaled(1 / local), key=lambda f: f.value)
        # gradients out, hidden behind backward when overlapped
        grads_s = (k if stage >= 2 else 1) * share * b / host.value
        seconds = grads_s if not overlap else max(grads_s - bwd_c, 0.0)
        if offload == "optimizer+param":
            # each rank's partition comes over PCIe before every gather, in forward and in backward; the updated
            # fp16 partition stays on the host (stage3.py keeps it there under offload_param), so nothing goes back
            seconds += 2 * k * share * b / host.value
        else:  # the updated fp16 parameters go back to the GPU after the step
            seconds += share * b / host.value
        pcie = Figure(seconds, host.mark, "host copies")
    elif inputs.local_adam is not None:
        local = min(inputs.gpus_per_node, inputs.world_size)
        owned = share if stage >= 1 else psi  # stage 0 updates every parameter on every rank
        optimizer = Figure(owned * local / inputs.local_adam.value, inputs.local_adam.mark, "the host's optimizer")
    return StepTime(stage, offload, compute, comm, fetch, pcie, optimizer, parts)


def scaled_batch(inputs: Inputs, factor: float, mark: str) -> Inputs:
    """``inputs`` with ``factor`` × the samples in each micro-step: the tokens and the compute they cost (measured
    compute scales with them); ZeRO's collectives, host copies and CPU Adam move the model's bytes, not the
    batch's, and stay. ``mark``: how certain the new batch is."""
    tokens = inputs.tokens_per_gpu
    compute = inputs.compute_s.scaled(factor, worst(inputs.compute_s, Figure(1, mark))) if inputs.compute_s else None
    return replace(inputs, tokens_per_gpu=Figure(tokens.value * factor, worst(tokens, Figure(1, mark)), tokens.source),
                   compute_s=compute)


def with_compute(inputs: Inputs, seconds: float, mark: str = "measured") -> Inputs:
    """``inputs`` with forward + backward set from a run (one optimizer step on one GPU)."""
    return replace(inputs, compute_s=Figure(seconds, mark, "the run's forward + backward"))
