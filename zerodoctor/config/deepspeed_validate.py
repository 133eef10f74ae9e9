"""Config check: a DeepSpeed config and a world size → DeepSpeed's own verdict on it.

Runs the installed DeepSpeed's ``DeepSpeedConfig`` parser, the same code
``deepspeed.initialize`` runs first, so what it rejects here it rejects at launch. DeepSpeed
takes the world size from ``torch.distributed``, which a static check has not started; the
subclass below sets it just before DeepSpeed's batch arithmetic reads it. Imported lazily:
DeepSpeed (and torch) cost seconds to import and may be absent on a login node.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import logging
import os
from dataclasses import dataclass
from typing import Any

from zerodoctor.deepspeed.defaults import BATCH_KEYS


# DeepSpeed's pydantic models by the config section they validate, to name the key as the user wrote it.
SECTIONS = {"DeepSpeedZeroConfig": "zero_optimization", "DeepSpeedFP16Config": "fp16", "DeepSpeedBF16Config": "bf16"}


@dataclass(frozen=True)
class Verdict:
    """What DeepSpeed said: accepted (with the batch values it derived) or the error it raised."""

    version: str
    world_size: int
    accepted: bool
    error: str | None = None
    derived: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}

    def sentence(self, what: str = "the config") -> str:
        """``DeepSpeed 0.19.8 accepts the config at world size 4`` (or rejects it, with the error)."""
        verb = "accepts" if self.accepted else "rejects"
        head = f"DeepSpeed {self.version} {verb} {what} at world size {self.world_size}"
        return head if self.accepted else f"{head}: {self.error or ''}"


def available() -> bool:
    return importlib.util.find_spec("deepspeed") is not None


def import_deepspeed():  # noqa: ANN201 - the deepspeed module
    """Import DeepSpeed quietly, without probing for an accelerator: parsing and estimating need none."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)  # its INFO lines would drown the report
    return deepspeed


def validate(config: dict[str, Any], world_size: int) -> Verdict | None:
    """DeepSpeed's verdict on ``config`` at ``world_size`` ranks; ``None`` when DeepSpeed is not installed."""
    if not available():
        return None
    deepspeed = import_deepspeed()
    from deepspeed.runtime.config import DeepSpeedConfig

    class _AtWorldSize(DeepSpeedConfig):
        def _configure_train_batch_size(self) -> None:
            self.world_size = world_size
            super()._configure_train_batch_size()

    try:
        parsed = _AtWorldSize(copy.deepcopy(config))
    except Exception as exc:  # noqa: BLE001 - DeepSpeed raises AssertionError, ValueError, pydantic errors…
        return Verdict(deepspeed.__version__, world_size, False, error=_one_line(exc))
    derived = {k: getattr(parsed, k) for k in BATCH_KEYS}
    return Verdict(deepspeed.__version__, world_size, True, derived=derived)


def _one_line(exc: Exception) -> str:
    """The error as one line; pydantic's unknown-key errors get the key's path and a did-you-mean."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and hasattr(exc, "title"):
        parts = []
        for e in errors(include_url=False):
            where = ".".join(map(str, e["loc"]))
            text = f"{SECTIONS[exc.title]}.{where}" if exc.title in SECTIONS else f"{exc.title}: {where}"
            text += f": {e['msg']}"
            if e["type"] == "extra_forbidden":
                hint = _closest(exc.title, e["loc"])
                text += f" (did you mean '{hint}'?)" if hint else ""
            parts.append(text)
        return "; ".join(parts)
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _closest(model_name: str, loc: tuple) -> str | None:
    """Closest field (or alias) to the last key of ``loc`` in the DeepSpeed model named ``model_name``."""
    from deepspeed.runtime.config_utils import DeepSpeedConfigModel

    pending, models = [DeepSpeedConfigModel], {}
    while pending:  # every subclass, however deep, keyed by class name
        cls = pending.pop()
        models[cls.__name__] = cls
        pending += cls.__subclasses__()
    model = models.get(model_name)
    for key in loc[:-1]:  # an error inside a nested model (zero_optimization.offload_param.devic)
        field = model.model_fields.get(str(key)) if model else None
        model = next((a for a in getattr(field.annotation, "__args__", (field.annotation,)) if isinstance(a, type)
                      and issubclass(a, DeepSpeedConfigModel)), None) if field else None
    if model is None:
        return None
    key = str(loc[-1])
    names = [n for name, f in model.model_fields.items() for n in (name, f.alias) if n]
    match = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return match[0] if match else None
