"""Model-state memory per GPU under ZeRO: the paper's arithmetic, shared by signals and plans.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models" (SC'20), §3.1 and Figure 1: mixed-precision Adam keeps 2Ψ bytes of fp16
parameters, 2Ψ of fp16 gradients and KΨ of optimizer state (K = 12: fp32 parameters,
momentum, variance). Partitioned over N data-parallel ranks:

    stage 0: (2 + 2 + K)Ψ        stage 2: 2Ψ + (2 + K)Ψ/N
    stage 1: 4Ψ + KΨ/N           stage 3: (2 + 2 + K)Ψ/N

Offloading the optimizer moves the KΨ term to host memory (ZeRO-Offload); offloading
parameters too (stage 3 only) moves the 2Ψ parameter term as well. Activations,
temporary buffers and fragmentation come on top; callers add headroom for them.
"""

from __future__ import annotations

ADAM_MIXED_K = 12
OFFLOADS = ("none", "optimizer", "optimizer+param")


def model_state_bytes(params: float, world_size: int, stage: int, offload: str = "none",
                      k: int = ADAM_MIXED_K) -> float:
    """Bytes of model states each GPU holds.

    Args:
        params: Ψ, the parameter count.
        world_size: N, data-parallel ranks the states are partitioned over.
        stage: ZeRO stage 0-3.
        offload: "none", "optimizer" (stage ≥ 1) or "optimizer+param" (stage 3 only).
        k: optimizer-state bytes per parameter.
    """
    if offload not in OFFLOADS:
        raise ValueError(f"offload must be one of {OFFLOADS}, not {offload!r}")
    if offload == "optimizer+param" and stage != 3:
        raise ValueError("parameter offload exists only with ZeRO stage 3")
    psi, n = float(params), max(int(world_size), 1)
    opt = 0.0 if offload != "none" else k * psi
    if stage == 0:
        return 4 * psi + opt
    if stage == 1:
        return 4 * psi + opt / n
    if stage == 2:
        return 2 * psi + (2 * psi + opt) / n
    if stage == 3:
        param = 0.0 if offload == "optimizer+param" else 2 * psi
        return (param + 2 * psi + opt) / n
    raise ValueError(f"ZeRO stage must be 0-3, not {stage}")
