"""Activation memory of a transformer per micro-batch: what the memory plan adds to model states when the model's
shape is known, so that it can say whether a micro-batch fits and which is the largest that does.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023, arXiv 2205.05198),
§4 and Table 2: one transformer layer of hidden size h and a attention heads keeps, for s tokens of b samples in
16-bit without recomputation,

    s·b·h·(34 + 5·a·s/h) bytes

(34·s·b·h for the linear layers, layer norms and dropout masks; 5·a·s²·b for the attention scores, their softmax
and its dropout). With full activation checkpointing a layer keeps only its input, 2·s·b·h bytes, and the backward
pass rebuilds one layer's full activations at a time on top of them (Table 2's "full recompute" row, plus that
layer). DeepSpeed's ``cpu_checkpointing`` moves the kept inputs to host memory, leaving the one rebuilt layer.

Beside the layers the loss keeps the logits in fp32, 4·s·b·v bytes for a vocabulary of v, counted when the
vocabulary is known. Not counted: the embeddings' dropout mask and the final layer norm (s·b·h each, under one
layer's 34), tensor or sequence parallelism (zerodoctor plans data parallel ZeRO), and flash attention, which
never stores the a·s² scores (the formula is then an overestimate by that term).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zerodoctor.deepspeed.steptime import MARKS, Figure

CHECKPOINTING = ("none", "full", "full, kept on the host")


@dataclass(frozen=True)
class Shape:
    """A transformer's shape as its config states it; ``source`` names the file."""

    hidden: int
    layers: int
    heads: int
    vocab: int | None = None
    source: str = ""


@dataclass(frozen=True)
class Workload:
    """What one GPU's activations depend on besides the shape: tokens per sample, the configured micro-batch and
    checkpointing, each marked as ``steptime`` marks its inputs (``mark``: the least certain of them)."""

    shape: Shape
    seq_len: Figure
    micro_batch: Figure
    checkpointing: Figure  # value: an index into CHECKPOINTING

    @property
    def mode(self) -> str:
        return CHECKPOINTING[int(self.checkpointing.value)]

    @property
    def mark(self) -> str:
        """The least certain input's mark (``worst`` would pass over checkpointing "none", whose value is 0)."""
        marks = {self.seq_len.mark, self.micro_batch.mark, self.checkpointing.mark}
        return next(m for m in reversed(MARKS) if m in marks)

    def bytes_at(self, micro_batch: int) -> float:
        return activation_bytes(self.shape, int(self.seq_len.value), micro_batch, self.mode)


def layer_bytes(shape: Shape, seq_len: int, micro_batch: int) -> float:
    """One layer's activations without recomputation: s·b·h·(34 + 5·a·s/h) bytes (Korthikanti et al., Table 2)."""
    s, b, h, a = seq_len, micro_batch, shape.hidden, shape.heads
    return s * b * h * (34 + 5 * a * s / h)


def activation_bytes(shape: Shape, seq_len: int, micro_batch: int, checkpointing: str = "none") -> float:
    """Bytes of activations one GPU holds at the peak of a micro-step's backward (see the module doc)."""
    if checkpointing not in CHECKPOINTING:
        raise ValueError(f"checkpointing must be one of {CHECKPOINTING}, not {checkpointing!r}")
    s, b, h, layers = seq_len, micro_batch, shape.hidden, shape.layers
    full = layer_bytes(shape, s, b)
    if checkpointing == "none":
        kept = layers * full
    else:
        kept = (layers * 2 * s * b * h if checkpointing == "full" else 0.0) + full
    return kept + (4 * s * b * shape.vocab if shape.vocab else 0.0)


def checkpointing_of(config: dict[str, Any]) -> str | None:
    """What a DeepSpeed config's ``activation_checkpointing`` section says: "full" (a section is there: the model
    checkpoints its layers through ``deepspeed.checkpointing``), "full, kept on the host" (``cpu_checkpointing``),
    or None when the config has no section and so says nothing."""
    section = config.get("activation_checkpointing")
    if not isinstance(section, dict):
        return None
    return CHECKPOINTING[2] if section.get("cpu_checkpointing") is True else CHECKPOINTING[1]
