"""Sources: what a bad line becomes — a reason, a place, and the bytes kept aside."""

from __future__ import annotations

from dataclasses import dataclass


class BadLine(ValueError):
    """Raised by a parser for a line it cannot turn into events; the message is the reason."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """A quarantined line: never dropped silently, never fatal."""

    path: str
    line: int
    reason: str
    raw: bytes
    size: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"
