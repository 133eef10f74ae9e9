"""Sources: bytes of a file → numbered lines with their end offsets, streamed, size-capped.

Never reads a whole file, nor a whole oversized line: a line longer than the cap is
skipped in chunks and reported with its size, so a 20 MB line or a file with no newline
costs a bounded amount of memory.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

MAX_LINE_BYTES = 1 << 20
KEEP_OVERSIZE_PREFIX = 4096


def read_lines(
    f: BinaryIO, *, start: int = 0, first_line: int = 1, cap: int = MAX_LINE_BYTES, final: bool = True
) -> Iterator[tuple[int, int, bytes, int]]:
    """Yield ``(line_number, end_offset, data, oversize)`` for each line from ``start``.

    ``data`` keeps its trailing newline. ``oversize`` is 0 for a normal line; for a line
    over ``cap`` it is the line's full length and ``data`` holds only its first
    ``KEEP_OVERSIZE_PREFIX`` bytes. With ``final=False`` (tailing a file that is still
    being written) a last line without a newline is not yielded: it is incomplete and
    will be read whole once its writer finishes it.
    """
    f.seek(start)
    offset, number = start, first_line
    readline = f.readline
    while True:
        data = readline(cap + 1)
        if not data:
            return
        size = len(data)
        if size > cap and not data.endswith(b"\n"):
            prefix = data[:KEEP_OVERSIZE_PREFIX]
            while not data.endswith(b"\n"):
                data = readline(cap + 1)
                if not data:
                    break
                size += len(data)
            if not data.endswith(b"\n") and not final:
                return
            offset += size
            yield number, offset, prefix, size
        else:
            if not final and not data.endswith(b"\n"):
                return
            offset += size
            yield number, offset, data, 0
        number += 1
