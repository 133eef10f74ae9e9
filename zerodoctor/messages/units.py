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


# Everything a person reads is printed by the functions below (templates in rulebook/template.py, evidence and
# tables in report/units.py), so a number reads the same in a message, its evidence and a plot's label.

_LARGE = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))
# plural forms that do not just add "s"
_PLURALS = {"process": "processes", "micro-batch": "micro-batches", "entry": "entries", "retry": "retries"}


def format_large(value: float) -> str:
    """A large count the way people say it: ``5e+08`` → ``500M``, ``7e9`` → ``7B``, ``12480`` → ``12.5k``."""
    return next((f"{value / size:.3g}{name}" for size, name in _LARGE if abs(value) >= size), f"{value:g}")


def format_seconds(seconds: float) -> str:
    """A duration in the unit that keeps it short: ``42.6 ms``, ``12.5 s``, ``80.9 s``, ``3.2 min``, ``1.5 h``
    (µs below 1 ms)."""
    size = abs(seconds)
    if size < 1e-3:
        return f"{seconds * 1e6:.3g} µs" if seconds else "0 s"
    if size < 1:
        return f"{seconds * 1e3:.3g} ms"
    if size < 120:
        return f"{seconds:.3g} s"
    if size < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def plural(word: str, count: float) -> str:
    """``word`` for ``count`` of it: ``1 step``, ``2 steps``, ``2 processes``."""
    if count == 1 or not word:
        return word
    head, _, last = word.rpartition(" ")  # "applied step" → "applied steps"
    return (head + " " if head else "") + _PLURALS.get(last, last + "s")


def format_count(count: float, word: str) -> str:
    """``count`` whole things: ``1 step``, ``992 steps``, ``12,480 steps``; a fraction of one is
    ``less than 1 step``."""
    if isinstance(count, float) and not count.is_integer():
        if 0 < abs(count) < 1:
            return f"less than 1 {word}"
        count = round(count)
    return f"{int(count):,} {plural(word, count)}"


def format_ranks(ranks: list[int] | int) -> str:
    """``rank 0``, ``ranks 0, 1``, ``ranks 0-3, 7``: consecutive ranks of three or more as a range."""
    items = sorted(set([ranks] if isinstance(ranks, int) else ranks))
    return f"{plural('rank', len(items))} {format_int_list(items)}"


def format_int_list(values: list[int]) -> str:
    """``0, 1, 3`` or ``0-3, 7``: runs of three or more consecutive integers as a range."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) >= 3 else ", ".join(map(str, r)) for r in runs)
