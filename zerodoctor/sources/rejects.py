"""Sources: what a bad line becomes — a reason, a place, and the bytes kept aside."""

from __future__ import annotations

import logging
from dataclasses import dataclass

SHOW_REJECTED = 5  # a batch's first bad lines are said one by one, the rest counted: a garbled file says 6 lines


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


def say_rejected(log: logging.Logger, name: str, rejected: list[Rejected]) -> None:
    """Warn of the lines of ``name`` one batch kept aside, as they are read (the report lists them too)."""
    for r in rejected[:SHOW_REJECTED]:
        log.warning("%s:%d: %s (quarantined)", name, r.line, r.reason)
    if len(rejected) > SHOW_REJECTED:
        log.warning("%s: … and %d more line(s) quarantined", name, len(rejected) - SHOW_REJECTED)
