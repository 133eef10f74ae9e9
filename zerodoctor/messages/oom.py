"""Messages, OOM: the CUDA caching allocator's out-of-memory text → its numbers, for text logs and the probe alike.

Every generation of ``c10/cuda/CUDACachingAllocator.cpp``'s message carries the same numbers in other words
(``sources/torch.py`` says which; ``docs/logs.md`` which versions): the request, the capacity (or the
``allowed`` cap of a memory fraction), free, allocated, and reserved — printed, or as "reserved but
unallocated" (2.2+) / "cached" (up to 1.3, which printed ``amount_cached - amount_allocated``) beside the
allocated bytes. Here, below the probe and the signals, so that a rank running out of memory reads its own
message without loading the text-log machinery.
"""

from __future__ import annotations


from zerodoctor.messages.deferred import deferred
from zerodoctor.messages.numbers import NUM
from zerodoctor.messages.units import LOGGED

SIZE = rf"({NUM}) ?({'|'.join(sorted(LOGGED, key=len, reverse=True))})"
_FIELDS = {
    "requested_bytes": deferred(rf"Tried to allocate {SIZE}"),
    "capacity_bytes": deferred(rf"{SIZE} total capacity|total capaci?ty of {SIZE}"),
    "free_bytes": deferred(rf"{SIZE} free\b|of which {SIZE} is free"),
    "allocated_bytes": deferred(rf"{SIZE} already allocated|Of the allocated memory {SIZE} is allocated by PyTorch"),
    "reserved_bytes": deferred(rf"{SIZE} reserved in total by PyTorch"),
    "allowed_bytes": deferred(rf"{SIZE} allowed;"),
    # reserved but unallocated: 2.2+ says so; up to 1.3 "cached" printed amount_cached - amount_allocated
    "_unallocated": deferred(rf"and {SIZE} is reserved by PyTorch but unallocated|{SIZE} cached\b"),
}
_DEVICE = deferred(r"\(GPU (\d+);|GPU (\d+) has a total")


def oom_numbers(message: str) -> dict[str, int]:
    """The ``oom`` fields an allocator message gives: its sizes in bytes and the GPU index.

    One reading for the text logs and the probe: PyTorch's ``format_size`` prints binary units
    (MiB, GiB), and the older "MB"/"GB" spellings meant the same. A size no int64 holds is left out.
    """
    fields: dict[str, int] = {}
    for name, pattern in _FIELDS.items():
        match = pattern.search(message)
        if match:
            number, unit = [g for g in match.groups() if g is not None][:2]
            size = float(number) * LOGGED[unit]
            if size < 2**63:  # past int64 no allocator printed it: a mangled line, the size is unknown
                fields[name] = int(size)
    unallocated = fields.pop("_unallocated", None)
    if unallocated is not None and "allocated_bytes" in fields:
        fields["reserved_bytes"] = fields["allocated_bytes"] + unallocated
    device = _DEVICE.search(message)
    if device:
        fields["device"] = int(device.group(1) or device.group(2))
    return fields
