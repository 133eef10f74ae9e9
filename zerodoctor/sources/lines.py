"""Sources: bytes of a file → blocks of numbered lines with their offsets, read in large chunks, size-capped.

Reading a line at a time costs more than parsing a step line (``readline`` ~1.2 µs, most of it
per-call overhead); one ``read`` of ``CHUNK`` bytes and one ``split`` cost ~0.2 µs a line, and a
parser that can take many lines at once gets a whole block. Never reads a whole file, nor a whole
oversized line: a line longer than the cap is skipped chunk by chunk and reported with its size,
so a 20 MB line or a file with no newline costs a bounded amount of memory (about the cap plus
``CHUNK``).
"""

from __future__ import annotations

from typing import BinaryIO, Iterator, NamedTuple

MAX_LINE_BYTES = 1 << 20
KEEP_OVERSIZE_PREFIX = 4096
KEEP_OVERSIZE_TAIL = 1 << 16  # the longest last ``\r`` segment of an oversize line kept (``Block.tail``)
CHUNK = 1 << 20


class Block(NamedTuple):
    """Consecutive lines of a file: ``lines[0]`` is line number ``first``; they are the bytes ``[start, end)``.

    Each line is without its ``b"\\n"`` (a ``b"\\r"`` before it stays); every line had one but
    the last of an ``unterminated`` block, the file's last line read before its newline. A block
    with ``oversize`` set is one line over the cap: ``oversize`` is its full length, newline
    included, ``lines`` holds only its first ``KEEP_OVERSIZE_PREFIX`` bytes, and ``tail`` what
    follows its last ``\r`` when that is shorter than ``KEEP_OVERSIZE_TAIL`` (else empty). A
    progress bar redrawn with ``\r`` for hours grows one console line past any cap, and the
    line a library prints after it is glued to its end: ``tail`` is what a terminal would show.
    """

    first: int
    start: int
    end: int
    lines: list[bytes]
    unterminated: bool = False
    oversize: int = 0
    tail: bytes = b""

    def split(self, count: int) -> tuple[Block, Block]:
        """The block of its first ``count`` lines and the block of the rest (``count`` < ``len(lines)``)."""
        cut = self.start + sum(map(len, self.lines[:count])) + count
        return (Block(self.first, self.start, cut, self.lines[:count]),
                self._replace(first=self.first + count, start=cut, lines=self.lines[count:]))


def read_blocks(
    f: BinaryIO, *, start: int = 0, first_line: int = 1, cap: int = MAX_LINE_BYTES, final: bool = True,
    chunk: int = CHUNK,
) -> Iterator[Block]:
    """Yield the ``Block``s of ``f`` from byte ``start``, line ``first_line``, in file order.

    With ``final=False`` (tailing a file that is still being written) a last line without a
    newline is not yielded: it is incomplete and will be read whole once its writer finishes it.
    """
    chunk = min(chunk, cap)  # a line inside one chunk is then never over the cap: only one begun before may be
    f.seek(start)
    read = f.read
    number, pos, pending = first_line, start, b""  # pos: the offset just past the bytes read so far
    data = read(chunk)
    while data:
        begin = pos - len(pending)  # where the first line not yet yielded starts
        pos += len(data)
        lines = data.split(b"\n")
        if pending:
            lines[0] = pending + lines[0]
        pending = lines.pop()
        if lines and len(lines[0]) > cap:  # a line begun in an earlier chunk, ended past the cap
            size = len(lines[0]) + 1
            yield Block(number, begin, begin + size, [lines[0][:KEEP_OVERSIZE_PREFIX]], False, size,
                        _last_segment(None, lines[0], ending=True) or b"")
            number, begin = number + 1, begin + size
            del lines[0]
        if lines:
            yield Block(number, begin, pos - len(pending), lines)
            number += len(lines)
        data = read(chunk)
        if len(pending) > cap:  # a line over the cap with no end in sight: skip it, keeping its head and tail
            prefix, size = pending[:KEEP_OVERSIZE_PREFIX], len(pending)
            # a \r that ends a piece is held back: with the newline after it, it is a CRLF, not a segment
            tail, carry = _last_segment(None, pending.removesuffix(b"\r")), pending[-1:] == b"\r"
            pending = b""
            while data and (cut := data.find(b"\n")) < 0:
                tail = _last_segment(tail, b"\r" * carry + data.removesuffix(b"\r"))
                carry = data.endswith(b"\r")
                pos, size, data = pos + len(data), size + len(data), read(chunk)
            if not data:  # it never ends: read as the file's unterminated last line, or not yet
                if final:
                    yield Block(number, pos - size, pos, [prefix], True, size,
                                _last_segment(tail, b"\r" * carry) or b"")
                return
            tail = _last_segment(tail, b"\r" * carry + data[:cut], ending=True)
            pos, size, data = pos + cut + 1, size + cut + 1, data[cut + 1:] or read(chunk)
            yield Block(number, pos - size, pos, [prefix], False, size, tail or b"")
            number += 1
    if pending and final:
        yield Block(number, pos - len(pending), pos, [pending], True)


def _last_segment(tail: bytes | None, more: bytes, *, ending: bool = False) -> bytes | None:
    """What follows the last ``\r`` of a line read so far as ``tail`` (None: no ``\r`` yet, or a segment
    over ``KEEP_OVERSIZE_TAIL``) and then ``more``; ``ending``: ``more`` is the line's last piece, whose
    ``\r`` before the newline (CRLF) ends the line, not a segment."""
    if ending and more.endswith(b"\r"):
        more = more[:-1]
    cr = more.rfind(b"\r")
    if cr >= 0:
        tail = more[cr + 1:]
    elif tail is not None:
        tail += more
    return tail if tail is not None and len(tail) <= KEEP_OVERSIZE_TAIL else None
