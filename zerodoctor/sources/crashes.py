"""Sources, text: the messages of known crashes and start-up stalls → ``log`` events ``crash`` and ``extension``.

The crash signatures and their keywords are ``messages/signatures.py``'s records (an optimizer op given a number
as a string, ZeRO-3 partitions in a checkpoint, a resume on another world size, op builds, NVMe offload, Ray's
memory monitor); each is reported once per rank, the first one a line holds, with what its match gives. An
``Invoked with:`` line that shows no quoted number keeps the next lines open: pybind prints the arguments' reprs,
which wrap. The JIT build lock (``torch/utils/file_baton.py``) is read as ``extension`` events: ``root`` for
``Using … as PyTorch extensions root...``, ``ready`` once a build or load follows, ``waiting`` for a
stack dump caught in ``file_baton.py``'s ``wait``; a rank whose last word is ``root`` is waiting on it.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.messages.numbers import NUM
from zerodoctor.messages.signatures import SIGNATURES
from zerodoctor.sources.text import Context, Line, strip_prefix

_QUOTED_NUMBER = deferred(rf"'({NUM})'")
_EXT_ROOT = deferred(r"Using\s+\S.* as PyTorch extensions root")
INVOKED_LINES = 4  # pybind prints the arguments' reprs, which wrap (a tensor's repr spans lines)
_EXT_READY = ("Emitting ninja build file", "Building extension module", "Loading extension module",
              "No modifications detected for re-loaded extension")
_EXT_WAITING = "torch/utils/file_baton.py"


class CrashDialect:
    name = "crash"
    # The signatures' keywords (messages/signatures.py), then the JIT build lock's
    keywords = tuple(dict.fromkeys((*(k for s in SIGNATURES for k in s.keywords), b"PyTorch extensions root",
                                    b"Emitting ninja", b"Building extension", b"Loading extension",
                                    b"No modifications detected", b"_baton.py")))

    def __init__(self, context: Context) -> None:
        self.context = context
        self._reported: set[tuple[str, int]] = set()
        self._waiting_ranks: set[int] = set()
        self._invoked = 0  # lines left in an "Invoked with:" argument list still being read

    @property
    def holding(self) -> bool:
        return self._invoked > 0

    def feed(self, line: Line) -> list[Event]:
        text = line.text
        if self._invoked:
            self._invoked -= 1
            if _QUOTED_NUMBER.search(text):
                self._invoked = 0
                return self._report(line, text, "optimizer_string_hyperparameter", {})
        elif "Invoked with:" in text and not _QUOTED_NUMBER.search(text):
            self._invoked = INVOKED_LINES
            return []
        if "extensions root" in text or "extension" in text or _EXT_WAITING in text:
            out = self._extension(line, text)
            if out is not None:
                return out
        for signature in SIGNATURES:
            match = signature.pattern.search(text)
            if match is None:
                continue
            if signature.needs_deepspeed and not self._deepspeed_nearby(text):
                continue
            return self._report(line, text, signature.name, signature.read(match) if signature.read else {})
        return []

    def _report(self, line: Line, text: str, signature: str, found: dict[str, Any]) -> list[Event]:
        rank = line.rank if line.rank is not None else 0
        if (signature, rank) in self._reported:
            return []
        self._reported.add((signature, rank))
        return [self.context.event("log", line, message=text.strip()[:500], source=self.name, level="ERROR",
                                   what="crash", data={"signature": signature, **found}, step=self.context.last_step())]

    def finish(self) -> list[Event]:
        return []

    def _extension(self, line: Line, text: str) -> list[Event] | None:
        if _EXT_ROOT.search(text):
            state = "root"
        elif any(s in text for s in _EXT_READY):
            state = "ready"
        elif _EXT_WAITING in text and "wait" in text:
            rank = line.rank if line.rank is not None else 0
            if rank in self._waiting_ranks:
                return []
            self._waiting_ranks.add(rank)
            state = "waiting"
        else:
            return None
        return [self.context.event("log", line, message=text.strip()[:500], source=self.name, what="extension",
                                   data={"state": state})]

    def _deepspeed_nearby(self, text: str) -> bool:
        """DeepSpeed on this line or in the traceback lines just before it."""
        return "deepspeed" in text or any("deepspeed" in strip_prefix(raw)[1] for raw in self.context.lookback())
