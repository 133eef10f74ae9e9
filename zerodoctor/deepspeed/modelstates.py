"""Model-state memory per GPU under ZeRO: the paper's arithmetic, shared by signals and plans.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models" (SC'20), §3.1 and Figure 1: mixed-precision Adam keeps 2Ψ bytes of fp16
parameters, 2Ψ of fp16 gradients and KΨ of optimizer state (K = 12: fp32 parameters,
momentum, variance). Partitioned over N data-parallel ranks:

    stage 0: (2 + 2 + K)Ψ        stage 2: 2Ψ + (2 + K)Ψ/N
    stage 1: 4Ψ + KΨ/N           stage 3: (2 + 2 + K)Ψ/N

An fp32 run keeps its parameters and gradients in 4 bytes each, and K stays 12: DeepSpeed's
ZeRO optimizers hold an fp32 copy of their partition whatever the model's dtype
(``single_partition_of_fp32_groups`` in stage 1-2, ``fp32_partitioned_groups_flat`` in stage 3),
so stage 2 is 4Ψ + (4 + K)Ψ/N there.

Offloading the optimizer moves the KΨ term to host memory (ZeRO-Offload), and the gradient
partition with it: the ZeRO-Offload paper keeps only the fp16 parameters on the GPU, and DeepSpeed
copies each reduced gradient into the host's fp32 buffer (stage_1_and_2.py ``copy_grads_in_partition``
under ``cpu_offload``; stage3.py allocates ``grad_partitions_flat_buffer`` on the offload device), as
its own estimators count (``estimate_zero2_model_states_mem_needs``: 2Ψ on the GPU with offload).
Stage 1 keeps whole gradients on the GPU until the step (it reduces them at the boundary), offload or
not. Offloading parameters too (stage 3 only) moves the parameter term as well. Activations,
temporary buffers and fragmentation come on top; callers add headroom for them.

What leaves the GPU lands in host memory, shared by the ranks of a node: ``host_state_bytes`` counts it as
DeepSpeed's estimators do with ``zero_init`` (16Ψ over the job under optimizer offload: the optimizer state and
the fp32 gradient partition it steps on; 18Ψ with the parameters too).
"""

from __future__ import annotations

ADAM_MIXED_K = 12
OFFLOADS = ("none", "optimizer", "optimizer+param")


def weight_bytes(precision: str | None) -> int:
    """Bytes of one parameter (and one gradient) in the training dtype: 4 for fp32, else 2.

    An unknown precision counts as mixed precision, the paper's case and most runs'.
    """
    return 4 if precision == "fp32" else 2


def model_state_bytes(params: float, world_size: int, stage: int, offload: str = "none",
                      k: int = ADAM_MIXED_K, precision: str | None = None) -> float:
    """Bytes of model states each GPU holds.

    Args:
        params: Ψ, the parameter count.
        world_size: N, data-parallel ranks the states are partitioned over.
        stage: ZeRO stage 0-3.
        offload: "none", "optimizer" (stage ≥ 1) or "optimizer+param" (stage 3 only).
        k: optimizer-state bytes per parameter.
        precision: "fp16", "bf16" or "fp32" (None: mixed precision); sets the bytes of a parameter
            and of a gradient.
    """
    if offload not in OFFLOADS:
        raise ValueError(f"offload must be one of {OFFLOADS}, not {offload!r}")
    if offload == "optimizer+param" and stage != 3:
        raise ValueError("parameter offload exists only with ZeRO stage 3")
    psi, n, w = float(params), max(int(world_size), 1), weight_bytes(precision)
    opt = 0.0 if offload != "none" else k * psi
    grad = 0.0 if offload != "none" else w * psi  # the partition the optimizer steps on goes to the host with it
    if stage == 0:
        return 2 * w * psi + opt
    if stage == 1:
        return 2 * w * psi + opt / n
    if stage == 2:
        return w * psi + (grad + opt) / n
    if stage == 3:
        param = 0.0 if offload == "optimizer+param" else w * psi
        return (param + grad + opt) / n
    raise ValueError(f"ZeRO stage must be 0-3, not {stage}")


def host_state_bytes(params: float, world_size: int, offload: str = "none") -> float:
    """Bytes of model states one rank keeps in host memory: its optimizer partition and the fp32 gradient
    partition the host's Adam steps on, (K + 4)Ψ/N, and under parameter offload its fp16 parameter partition too.

    DeepSpeed's ``estimate_zero2/3_model_states_mem_needs`` count the same 16Ψ and 18Ψ over the job (with
    ``zero_init``) and multiply by an ``additional_buffer_factor`` of 1.5 for pinned staging buffers; the
    caller adds that headroom."""
    if offload not in OFFLOADS:
        raise ValueError(f"offload must be one of {OFFLOADS}, not {offload!r}")
    if offload == "none":
        return 0.0
    psi, n = float(params), max(int(world_size), 1)
    param = weight_bytes(None) * psi if offload == "optimizer+param" else 0.0
    return ((ADAM_MIXED_K + 4) * psi + param) / n
