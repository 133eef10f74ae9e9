"""Sources, text: Hugging Face Trainer and Accelerate messages → ``step`` and ``log`` events.

Templates: ``transformers/trainer.py`` (the log dicts ``{'loss': …, 'grad_norm': …,
'learning_rate': …, 'epoch': …}`` and the ``***** Running training *****`` header),
``transformers/integrations/deepspeed.py`` (``Please correct the following DeepSpeed config
values that mismatch TrainingArguments values:`` with ``- ds X=A vs hf Y=B`` lines) and
``accelerate/accelerator.py`` (``Updating DeepSpeed's gradient accumulation steps to X from Y.``,
logged at INFO while the effective batch silently changes, and ``_prepare_deepspeed``'s refusal when
no data loader and no integer ``train_micro_batch_size_per_gpu`` says the batch). Mismatched batch
values are a batch fault of their own (``hf_batch_mismatch``), the others a config one.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.deepspeed.defaults import BATCH_KEYS, GRAD_ACCUM, MICRO_BATCH, TRAIN_BATCH
from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.messages.numbers import NUM
from zerodoctor.sources.text import Context, Line

_PAIR = deferred(rf"'(\w+)': (nan|-?inf|{NUM})")
_TQDM_STEP = deferred(r"\|\s*(\d+)/(\d+) \[")
_ACCUM = deferred(r"Updating DeepSpeed's gradient accumulation steps to (\d+) from (\d+)")
# Older Trainers name a derived value "hf train_batch_size (calculated)=4": the hf key may hold a space.
# A paste may end mid-row ("- ds gradient_accumulation_steps=4 vs hf gradient_accumulation_steps"): the hf value
# is then unknown, the contradiction still said.
_MISMATCH = deferred(r"^\W*- ds (\S+?)=(.*?) vs hf (.+?)(?:=(.*?))?\s*$")
# The header wrapped before its last words ("… mismatch" / "TrainingArguments values:").
_MISMATCH_HEAD_END = deferred(r"^\s*TrainingArguments values:\s*$")
# accelerate/accelerator.py _prepare_deepspeed: no data loader passed (0.12+), or one whose batch_size is None
# (a batch_sampler; 0.20+ words it on its own)
_NO_BATCH = ("requires you to pass at least one of training or evaluation dataloaders", "has `None` as batch size")
_HEADER_ROW = deferred(r"\s{2}([A-Z][\w .&(),-]*?) = ([\d,]+)\s*$")
_HEADER = {"Instantaneous batch size per device": MICRO_BATCH,
           "Total train batch size (w. parallel, distributed & accumulation)": TRAIN_BATCH,
           "Gradient Accumulation steps": GRAD_ACCUM,
           "Total optimization steps": "max_steps", "Number of trainable parameters": "params"}
MAX_BLOCK_LINES = 64


class HuggingFaceDialect:
    name = "hf"
    keywords = (b"{'", b"Updating DeepSpeed's", b"Please correct the following DeepSpeed", b"***** Running training",
                b"`None`",
                b"When using DeepSpeed")

    def __init__(self, context: Context) -> None:
        self.context = context
        self._block: str | None = None  # "mismatch" or "header" while one is open
        self._block_line: Line | None = None
        self._rows: list[Any] = []
        self._block_lines = 0

    @property
    def holding(self) -> bool:
        return self._block is not None

    def feed(self, line: Line) -> list[Event]:
        text = line.text
        if self._block is not None:
            taken = self._block_row(text)
            if taken:
                return []
            out = self._close()
            return out + self.feed(line)
        if "{'" in text:
            return self._log_dict(line, text)
        if "Updating DeepSpeed's" in text:
            match = _ACCUM.search(text)
            if match:
                to, was = int(match.group(1)), int(match.group(2))
                return [self.context.event("log", line, message=match.group(0), source=self.name, level="INFO",
                                           what="grad_accum_update", data={"from": was, "to": to})]
        said = next((phrase for phrase in _NO_BATCH if phrase in text), None)
        if said is not None:
            return [self.context.event("log", line, message=said, source=self.name, level="ERROR",
                                       what="accelerate_batch_unknown")]
        if "Please correct the following DeepSpeed" in text:
            self._open("mismatch", line)
        elif "***** Running training" in text:
            self._open("header", line)
        return []

    def finish(self) -> list[Event]:
        return self._close() if self._block else []

    def _open(self, block: str, line: Line) -> None:
        self._block, self._block_line, self._rows, self._block_lines = block, line, [], 0

    def _block_row(self, text: str) -> bool:
        self._block_lines += 1
        if self._block_lines > MAX_BLOCK_LINES:
            return False
        match = _MISMATCH.match(text) if self._block == "mismatch" else _HEADER_ROW.search(text)
        if match:
            self._rows.append(match.groups())
            return True
        if self._block == "mismatch" and not self._rows and _MISMATCH_HEAD_END.match(text):
            return True
        return self._block == "header" and not self._rows  # the header's first rows may be other settings

    def _close(self) -> list[Event]:
        block, line, rows = self._block, self._block_line, self._rows
        self._block = None
        assert line is not None
        if block == "mismatch" and rows:
            # Both sides printing the same value differ in type: the config holds the number as a string.
            quoted = {d: dv for d, dv, _, hv in rows if hv is not None and dv.strip() == hv.strip()}
            out = [self.context.event("log", line, message="DeepSpeed config values the Trainer reads as strings: "
                                      + ", ".join(f"{k}={v}" for k, v in quoted.items()), source=self.name,
                                      level="ERROR", what="hf_string_value", data={"values": quoted})] if quoted else []
            rows = [r for r in rows if r[0] not in quoted]
            for what, kept in (("hf_batch_mismatch", [r for r in rows if r[0] in BATCH_KEYS]),
                               ("hf_config_mismatch", [r for r in rows if r[0] not in BATCH_KEYS])):
                if not kept:
                    continue
                data = {"mismatches": [{"ds_key": d, "ds_value": dv, "hf_key": h, "hf_value": hv}
                                       for d, dv, h, hv in kept]}
                message = "DeepSpeed config values mismatch TrainingArguments: " + "; ".join(
                    f"ds {d}={dv} vs hf {h}" + (f"={hv}" if hv is not None else "") for d, dv, h, hv in kept)
                out.append(self.context.event("log", line, message=message, source=self.name, level="ERROR",
                                              what=what, data=data))
            return out
        if block == "header":
            data = {_HEADER[k]: int(v.replace(",", "")) for k, v in rows if k in _HEADER}
            micro, accum, total = (data.get(k) for k in (MICRO_BATCH, GRAD_ACCUM, TRAIN_BATCH))
            if micro and accum and total and total % (micro * accum) == 0:
                data["world_size"] = total // (micro * accum)
            if data:
                return [self.context.event("log", line, message="***** Running training *****", source=self.name,
                                           level="INFO", what="trainer_batch", data=data)]
        return []

    def _log_dict(self, line: Line, text: str) -> list[Event]:
        at = text.rfind("{'")
        pairs = dict(_PAIR.findall(text, at))
        if "loss" not in pairs or any(k.startswith(("eval_", "train_")) for k in pairs):
            return []
        # Trainer's tqdm bar, when glued to the dict, says which optimizer step this is.
        bars = _TQDM_STEP.findall(text, 0, at)
        step = int(bars[-1][0]) if bars else self.context.step + 1
        self.context.step = max(self.context.step, step)
        fields = {"loss": float(pairs["loss"]), "grad_norm": _float(pairs.get("grad_norm")),
                  "lr": _float(pairs.get("learning_rate"))}
        return [self.context.event("step", line, step=step, **fields)]


def _float(value: str | None) -> float | None:
    return float(value) if value is not None else None
