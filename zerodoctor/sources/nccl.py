"""Sources, text: NCCL watchdog timeouts (``ProcessGroupNCCL.cpp``) → ``log`` events ``collective_timeout``.

Old form: ``[E ProcessGroupNCCL.cpp:N] [Rank R] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=S, OpType=OP, [NumelIn=…, NumelOut=…,] Timeout(ms)=T) ran for M milliseconds
before timing out.`` New form (torch 2.2+): the same message behind ``[rankR]:[E… ProcessGroupNCCL.cpp:N]``
and a ``[PG ID 0 PG GUID 0(default_pg) Rank R]`` (or ``[PG 0 (default_pg) Rank R]``) tag. The
watchdog repeats the message when it tears the process down, so each (rank, SeqNum) counts once.
A message a terminal hard-wrapped (``Timeout(ms)=`` / ``600000) ran for …``) is joined with its next line.
"""

from __future__ import annotations

import re

from zerodoctor.events import Event
from zerodoctor.sources.text import Context, Line

_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
    r"(?:, NumelIn=(\d+), NumelOut=(\d+))?, Timeout\(ms\)=(\d+)\)(?: ran for (\d+) milliseconds)?")
_RANK = re.compile(r"Rank (\d+)\]\s*(?:Process group watchdog[^:]*: \[Rank \d+\] )?Watchdog caught")


class NcclDialect:
    name = "nccl"
    keywords = (b"Watchdog caught",)

    def __init__(self, context: Context) -> None:
        self.context = context
        self._seen: set[tuple[int, int]] = set()
        self._wrapped: str | None = None  # the start of a message whose end is on the next line

    @property
    def holding(self) -> bool:
        return self._wrapped is not None

    def feed(self, line: Line) -> list[Event]:
        text, self._wrapped = (self._wrapped + line.text.strip() if self._wrapped is not None else line.text), None
        match = _TIMEOUT.search(text)
        if not match:
            if "Watchdog caught" in line.text and "before timing out" not in line.text:
                self._wrapped = line.text.rstrip()
            return []
        said = _RANK.search(text)
        rank = int(said.group(1)) if said else (line.rank if line.rank is not None else 0)
        seq, op, numel_in, numel_out, timeout_ms, ran_ms = match.groups()
        if (rank, int(seq)) in self._seen:
            return []
        self._seen.add((rank, int(seq)))
        data = {"op": op, "seq": int(seq), "timeout_s": int(timeout_ms) / 1000.0,
                "ran_s": int(ran_ms) / 1000.0 if ran_ms else None,
                "numel_in": int(numel_in) if numel_in else None, "numel_out": int(numel_out) if numel_out else None}
        return [self.context.event("log", line, rank=rank, message=match.group(0), source=self.name, level="ERROR",
                                   what="collective_timeout", data={k: v for k, v in data.items() if v is not None},
                                   step=self.context.step or None)]

    def finish(self) -> list[Event]:
        return []
