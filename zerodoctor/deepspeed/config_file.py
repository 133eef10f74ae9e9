"""A DeepSpeed config file's text → the dict DeepSpeed itself reads from it, for every stage that reads one.

DeepSpeed reads a config file with hjson (``DeepSpeedConfig.__init__`` in ``deepspeed/runtime/config.py``,
0.19.8 included: ``hjson.load(..., object_pairs_hook=dict_raise_error_on_duplicate_keys)``), so comments
(``//``, ``#``, ``/* */``), trailing commas and unquoted keys are accepted, and a job trains with them. A
reader of plain JSON refuses such a file: the probe detached (the rank file held only ``run_end``, and
``diagnose`` said "no findings"), ``check`` and ``fix`` exited 2. Plain JSON is read first (most configs
are; its errors are the ones users know), hjson only when that fails; a file neither reads is an error
with hjson's line and column, since that is the reader DeepSpeed refuses it with. hjson reads a number
as DeepSpeed will see it (``1.0`` is the int ``1`` there).

Light on purpose: the probe imports this inside every training process.
"""

from __future__ import annotations

import json
from typing import Any


class ConfigSyntaxError(ValueError):
    """Text DeepSpeed would not read as a config; ``line``/``column`` where known (1-based)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.line, self.column = line, column


def read(text: str) -> Any:
    """The value DeepSpeed reads from a config file holding ``text``; duplicate keys refused, as DeepSpeed does."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        plain = exc
    except RecursionError:
        raise ConfigSyntaxError("nested too deeply to be a DeepSpeed config") from None
    try:
        import hjson
    except ImportError:  # DeepSpeed requires it; without it only plain JSON is read
        raise ConfigSyntaxError(f"not valid JSON: {plain.msg}", plain.lineno, plain.colno) from None
    try:
        return hjson.loads(text, object_pairs_hook=_no_duplicates)
    except hjson.HjsonDecodeError as exc:
        raise ConfigSyntaxError(f"not valid JSON, nor the hjson DeepSpeed reads: {exc.msg}", exc.lineno,
                                exc.colno) from None
    except RecursionError:
        raise ConfigSyntaxError("nested too deeply to be a DeepSpeed config") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ConfigSyntaxError(f"duplicate key '{key}' (DeepSpeed refuses it)")
        seen[key] = value
    return seen
