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

from typing import Any

from zerodoctor.messages import crashes
from zerodoctor.messages.deferred import deferred
from zerodoctor.signals.base import Signal, verdict
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
    Signal("mismatch.first", "records", "the first rank's collective: rank, op, call (its sequence number), tensor"),
    Signal("mismatch.other", "records", "the other rank's collective, where c10d printed it: rank, op, call, tensor"),
    verdict("mismatch.other_known", "what c10d's message says of the other rank's collective: named (its op "
            "printed), unread (only that its fingerprint's length differs), alone (no other rank named: torch "
            "1.9-1.10), unnamed (no fingerprint read at all)", ("named", "unread", "alone", "unnamed"),
            {"named": ("mismatch.first", "mismatch.other"), "unread": ("mismatch.first", "mismatch.other_rank"),
             "alone": ("mismatch.first",)}),
]
# "Rank N is running [inconsistent ]collective: CollectiveFingerPrint(...)", the fingerprint up to its closing
# parenthesis (TensorDeviceTypes holds one level of them; 1.9-1.10 left the last one out)
_RUNNING = deferred(r"Rank (\d+) is running (?:inconsistent )?collective: CollectiveFingerPrint\("
                    r"((?:[^()]|\([^()]*\))*)")
_SEQUENCE = deferred(r"SequenceNumber=(\d+)")
_OP = deferred(r"OpType=(\w+)")
_SHAPE = deferred(r"TensorShape=\[([\d, ]*)\]")


def compute(run: RunView, values: dict[str, Any]) -> dict[str, Any]:
    if values.get("fatal.family") != "collective_mismatch":
        return {}
    message = _first_message(run)
    found = [(int(rank), body) for rank, body in _RUNNING.findall(message)]
    if not found:
        return {"mismatch.other_known": "unnamed"}
    (rank, mine), *others = found
    out = {"mismatch.rank": rank, **_fingerprint(mine, "mismatch."), "mismatch.other_known": "alone"}
    if others:
        other_rank, theirs = others[0]
        read = _fingerprint(theirs, "mismatch.other_")
        out["mismatch.other_rank"] = other_rank
        if "mismatch.other_tensor" in read or "mismatch.tensor" not in out:
            out.update(read)
            out["mismatch.other_known"] = "named" if "mismatch.other_op" in read else "alone"
        else:  # the length check's decoding: its op and sequence number are no collective's
            out.update({"mismatch.other_op_unread": True, "mismatch.printed_other_op": read.get("mismatch.other_op"),
                        "mismatch.other_known": "unread"})
    out["mismatch.first"] = _record(out, "mismatch.")
    if out["mismatch.other_known"] == "named":
        out["mismatch.other"] = _record(out, "mismatch.other_")
    return out


def _record(out: dict[str, Any], prefix: str) -> dict[str, Any]:
    """One rank's collective as the record the rules' phrases word (rules/phrases.yaml, mismatch-call)."""
    fields = {"rank": out.get(f"{prefix}rank"), "op": out.get(f"{prefix}op"), "call": out.get(f"{prefix}call"),
              "tensor": out.get(f"{prefix}tensor")}
    return {k: v for k, v in fields.items() if v is not None}


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
