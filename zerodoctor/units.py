"""Byte units: one table for what logs print, one for what people type, and PyTorch's way of printing sizes.

The same letters mean two things, and both are right where they are used:
- logs: PyTorch (which wrote "MB" for MiB before 1.x) and DeepSpeed (``see_memory_usage``'s
  ``GB`` divides by 1024**3, the comms logger's ``KB``/``MB`` by powers of 1024) print powers of 1024
  under SI names, so a size read from a log uses ``LOGGED``;
- people: ``--gpu-mem 80GB`` means 80·10^9 bytes, like the ZeRO paper and the GPU's box, so a
  size typed on the command line uses ``TYPED`` (``80GiB`` for the binary one).
"""

from __future__ import annotations

KiB, MiB, GiB, TiB, PiB = (1 << (10 * i) for i in range(1, 6))
GB = 10**9  # the decimal gigabyte that GB figures in findings and `check` are given in

_BINARY = {"bytes": 1, "B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB, "PiB": PiB}
LOGGED = {**_BINARY, "KB": KiB, "MB": MiB, "GB": GiB, "TB": TiB, "PB": PiB}
TYPED = {**_BINARY, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15}


def format_bytes(size: float) -> str:
    """``size`` as PyTorch's allocator prints it (``format_size`` in CUDACachingAllocator.cpp), e.g. ``1.50 GiB``.

    Findings quote OOM sizes in the same units and digits as the OOM message beside them.
    """
    size = int(size)
    if size <= KiB:
        return f"{size} bytes"
    for unit, scale in (("KiB", KiB), ("MiB", MiB)):
        if size <= scale * KiB:
            return f"{size / scale:.2f} {unit}"
    return f"{size / GiB:.2f} GiB"
