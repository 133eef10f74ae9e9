"""Sources: files on disk → batches of validated ``Event``s plus the lines kept aside.

A parser turns one line into zero or more events (``feed``) and may hold state across
lines (a wrapped message, a traceback), released by ``finish`` at end of input. Parsers
are registered by format name; ``detect_format`` picks one from the content.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Protocol

from zerodoctor.events import Event
from zerodoctor.sources.jsonl import JsonlParser
from zerodoctor.sources.lines import MAX_LINE_BYTES, read_lines
from zerodoctor.sources.rejects import BadLine, Rejected
from zerodoctor.sources.text import TextParser

SNIFF_BYTES = 64 * 1024


class Parser(Protocol):
    format: str

    def feed(self, data: bytes) -> tuple[Event, ...] | list[Event]: ...

    def finish(self) -> tuple[Event, ...] | list[Event]: ...


PARSERS: dict[str, Callable[[str | None], Parser]] = {"jsonl": JsonlParser, "text": TextParser}


class UnsupportedFormat(ValueError):
    """The input is readable but no registered parser handles its format."""


@dataclass
class Batch:
    """Events and rejects read from one file, up to byte offset ``end`` (exclusive)."""

    events: list[Event] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    end: int = 0
    last_line: int = 0


def detect_format(path: Path) -> str:
    """Return ``"jsonl"`` when the first non-blank line is a JSON object with a ``kind``, else ``"text"``."""
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    for line in head.splitlines():
        stripped = line.strip()
        if stripped:
            return "jsonl" if stripped.startswith(b"{") and b'"kind"' in stripped else "text"
    return "jsonl"


def make_parser(fmt: str, run_id: str | None = None) -> Parser:
    try:
        factory = PARSERS[fmt]
    except KeyError:
        known = ", ".join(sorted(PARSERS))
        raise UnsupportedFormat(f"no parser for format '{fmt}' (known: {known})") from None
    return factory(run_id)


def read_batches(
    path: Path,
    parser: Parser,
    *,
    start: int = 0,
    first_line: int = 1,
    final: bool = True,
    batch_lines: int = 20_000,
    stream: BinaryIO | None = None,
) -> Iterator[Batch]:
    """Stream ``path`` from byte ``start`` in batches of at most ``batch_lines`` lines.

    Each batch carries the offset just past its last line, so a consumer that commits
    the batch and its offset together never reads a line twice nor skips one.
    ``final=True`` means the file is complete: an unterminated last line is read and the
    parser's held state is flushed. ``stream``, when given, is read instead of opening
    ``path`` (a tailer keeps a rotated-away file open to drain it); ``path`` still names it.
    """
    name = str(path)
    batch = Batch(end=start, last_line=first_line - 1)
    in_batch = 0
    with nullcontext(stream) if stream is not None else open(path, "rb") as f:
        for number, end, data, oversize in read_lines(f, start=start, first_line=first_line, final=final):
            if oversize:
                batch.rejected.append(
                    Rejected(name, number, f"line of {oversize} bytes is over the {MAX_LINE_BYTES}-byte cap", data, oversize)
                )
            else:
                try:
                    batch.events.extend(parser.feed(data))
                except BadLine as exc:
                    batch.rejected.append(Rejected(name, number, str(exc), data.rstrip(b"\r\n"), len(data)))
            batch.end, batch.last_line = end, number
            in_batch += 1
            if in_batch == batch_lines:
                yield batch
                batch, in_batch = Batch(end=end, last_line=number), 0
    if final:
        batch.events.extend(parser.finish())
    yield batch
