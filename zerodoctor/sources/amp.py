"""Sources, text: loss scalers outside DeepSpeed (apex, fairseq) → ``log`` events ``amp_overflow`` / ``amp_min_scale``.

The messages, from their sources: apex's ``amp/scaler.py`` ``Gradient overflow.  Skipping step, loss scaler N
reducing loss scale to S`` (NVIDIA's DeepLearningExamples print ``Rank R :: Gradient overflow.  Skipping step,
reducing loss scale to S``), apex's older ``fp16_utils`` ``OVERFLOW! Skipping step. Attempted loss scale: A,
reducing to S`` (DeepSpeed's own wording has a ``[deepspeed]`` tag and is ``sources/deepspeed.py``'s), fairseq's
``trainer.py`` ``overflow detected, setting loss scale to: S`` (behind ``| WARNING:`` before 0.10, ``NOTE:`` after)
and its ``FloatingPointError: Minimum loss scale reached (M).``. torch.cuda.amp's GradScaler prints nothing.
"""

from __future__ import annotations


from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.messages.numbers import NUM
from zerodoctor.sources.text import Context, Line

_FORMS = (
    ("apex", deferred(rf"Gradient overflow\.\s+Skipping step,(?: loss scaler \d+)? reducing loss scale to ({NUM})")),
    ("apex", deferred(rf"(?<!\] )OVERFLOW! Skipping step\. Attempted loss scale: {NUM}, reducing to ({NUM})")),
    # fairseq/trainer.py: "| WARNING: overflow detected, setting loss scale to: X", since 0.10 "NOTE: gradient
    # overflow detected, ignoring gradient, setting loss scale to: X"
    ("fairseq", deferred(rf"overflow detected, (?:ignoring gradient, )?setting loss scale to:? ({NUM})")),
)
_MIN_REACHED = deferred(rf"Minimum loss scale reached \(({NUM})\)")
_DLE_RANK = deferred(r"Rank (\d+) :: Gradient overflow")


class AmpScalerDialect:
    name = "amp"
    keywords = (b"Gradient overflow.", b"OVERFLOW! Skipping", b"WARNING: overflow detected", b"NOTE: overflow detected",
                b"NOTE: gradient overflow detected", b"Minimum loss scale")
    holding = False

    def __init__(self, context: Context) -> None:
        self.context = context

    def feed(self, line: Line) -> list[Event]:
        text = line.text
        match = _MIN_REACHED.search(text)
        if match:
            return [self.context.event("log", line, message=match.group(0), source=self.name, level="ERROR",
                                       what="amp_min_scale", data={"scaler": "fairseq",
                                                                   "min_scale": float(match.group(1))})]
        for scaler, pattern in _FORMS:
            match = pattern.search(text)
            if match:
                said = _DLE_RANK.search(text)
                return [self.context.event("log", line, rank=int(said.group(1)) if said else None,
                                           message=match.group(0), source=self.name, level="WARNING",
                                           what="amp_overflow", data={"scaler": scaler,
                                                                      "scale": float(match.group(1))})]
        return []

    def finish(self) -> list[Event]:
        return []
