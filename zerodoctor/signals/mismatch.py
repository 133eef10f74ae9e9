"""Signals, collective mismatch: c10d's "Detected mismatch between collectives" → which rank called what.

Under ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` c10d's ProcessGroupWrapper allgathers a fingerprint of every collective
before running it (op type, sequence number, tensor shapes) and raises when two ranks' differ; without DETAIL the
same run hangs until the watchdog's timeout. The fingerprint is printed by ``operator<<`` as
``CollectiveFingerPrint(SequenceNumber=32, OpType=ALLREDUCE, TensorShape=[], …)`` (no SequenceNumber in 1.9-1.10,
which names one rank only: "Rank 0 is running inconsistent collective: …").

One trap, read in the source: ``verify`` first compares the fingerprints' *lengths*, and where those differ the
other rank's "fingerprint" it prints is that length decoded as one: ``CollectiveFingerPrint(SequenceNumber=0OpType=
GATHER)`` (GATHER = 7, seven numbers long). So the other rank's op is known only when its fingerprint was printed
with tensors, or when this rank's has none either; else what is known is that its collective has another number
of tensors or dimensions (DeepSpeed#7568: rank 2's scalar ALLREDUCE against rank 3's 1-D gradient bucket).
"""

from __future__ import annotations

import re
from typing import Any

from zerodoctor.messages import crashes
from zerodoctor.signals.base import Signal
from zerodoctor.signals.view import RunView

READS = ("fatal.family",)

SIGNALS = [
    Signal("mismatch.rank", "rank", "the rank c10d names first, whose collective differs from another rank's"),
    Signal("mismatch.op", "name", "the collective the first rank called (ALLREDUCE, BROADCAST, …)"),
    Signal("mismatch.call", "count",
           "the sequence number of the first rank's collective in the process group (torch 1.13+)"),
    Signal("mismatch.tensor", "text", "the tensor of the first rank's collective: 'a scalar' or 'shape [4096]'"),
    Signal("mismatch.other_rank", "rank", "the rank whose collective differs"),
    Signal("mismatch.other_op", "name", "the collective the other rank called, where c10d printed it"),
    Signal("mismatch.other_call", "count", "the sequence number of the other rank's collective"),
    Signal("mismatch.other_tensor", "text", "the tensor of the other rank's collective"),
    Signal("mismatch.other_op_unread", "bool",
           "c10d compared the fingerprints' lengths only: the other rank's op is not printed (the name in its "
           "place is the length)"),
    Signal("mismatch.printed_other_op", "name", "what c10d printed as the other rank's op"),
]
# "Rank N is running [inconsistent ]collective: CollectiveFingerPrint(...)", the fingerprint up to its closing
# parenthesis (TensorDeviceTypes holds one level of them; 1.9-1.10 left the last one out)
_RUNNING = re.compile(r"Rank (\d+) is running (?:inconsistent )?collective: CollectiveFingerPrint\("
                      r"((?:[^()]|\([^()]*\))*)")
_SEQUENCE = re.compile(r"SequenceNumber=(\d+)")
_OP = re.compile(r"OpType=(\w+)")
_SHAPE = re.compile(r"TensorShape=\[([\d, ]*)\]")


def compute(run: RunView, values: dict[str, Any]) -> dict[str, Any]:
    if values.get("fatal.family") != "collective_mismatch":
        return {}
    message = _first_message(run)
    found = [(int(rank), body) for rank, body in _RUNNING.findall(message)]
    if not found:
        return {}
    (rank, mine), *others = found
    out = {"mismatch.rank": rank, **_fingerprint(mine, "mismatch.")}
    if others:
        other_rank, theirs = others[0]
        read = _fingerprint(theirs, "mismatch.other_")
        out["mismatch.other_rank"] = other_rank
        if "mismatch.other_tensor" in read or "mismatch.tensor" not in out:
            out.update(read)
        else:  # the length check's decoding: its op and sequence number are no collective's
            out.update({"mismatch.other_op_unread": True, "mismatch.printed_other_op": read.get("mismatch.other_op")})
    return out


def _first_message(run: RunView) -> str:
    """The earliest error whose text is c10d's mismatch (an exception, or a line that killed without one)."""
    fatal_lines = [e for e in run.events.get("log", []) if e.get("what") == "fatal"]
    errors = [e for e in (*run.events.get("exception", []), *fatal_lines)
              if crashes.BY_NAME["collective_mismatch"].pattern.search(e.get("message") or "")]
    return min(errors, key=lambda e: e["t"])["message"] if errors else ""


def _fingerprint(body: str, prefix: str) -> dict[str, Any]:
    """Op, sequence number and tensor of one printed fingerprint; the tensor only where it was printed."""
    out: dict[str, Any] = {}
    if op := _OP.search(body):
        out[f"{prefix}op"] = op.group(1)
    if sequence := _SEQUENCE.search(body):
        out[f"{prefix}call"] = int(sequence.group(1))
    if shape := _SHAPE.search(body):
        out[f"{prefix}tensor"] = f"shape [{shape.group(1)}]" if shape.group(1).strip() else "a scalar"
    return out
