"""Probe, privacy: argv and configs → copies with secret values redacted; a run directory's mode → its files'.

What the probe and the wrapper write lands in a shared ``runs/`` and gets pasted into issues:
a ``--hf_token`` on the command line or ``comet.api_key`` in the DeepSpeed config must not.
A flag or key is secret-shaped when its name contains token, key, password, passwd, secret or
credential. Numbers are kept (``--max_new_tokens 128`` is no credential), strings replaced.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"
RUN_DIR_MODE = 0o700  # the run directory; its files get the same bits without execute (0600)
_SECRET = re.compile(r"token|key|passw(?:or)?d|secret|credential", re.IGNORECASE)
_ENV_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)  # ``env HF_TOKEN=... python train.py``


def secret_name(name: str) -> bool:
    return bool(_SECRET.search(name))


def redact_argv(argv: list[str]) -> list[str]:
    """``--hf_token X``, ``--api-key=X`` and ``HF_TOKEN=X`` with X replaced; everything else as given."""
    out: list[str] = []
    secret_next = False
    for arg in argv:
        if secret_next and not arg.startswith("--"):
            out.append(_redacted(arg))
            secret_next = False
            continue
        secret_next = False
        if arg.startswith("-"):
            flag, eq, value = arg.partition("=")
            if secret_name(flag):
                if eq:
                    arg = f"{flag}={_redacted(value)}"
                else:
                    secret_next = True
        elif (match := _ENV_ASSIGNMENT.fullmatch(arg)) and secret_name(match[1]):
            arg = f"{match[1]}={_redacted(match[2])}"
        out.append(arg)
    return out


def redact_config(value: Any, key: str = "") -> Any:
    """A copy of a config (any nesting) with the string values of secret-shaped keys replaced."""
    if isinstance(value, dict):
        return {k: redact_config(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_config(v, key) for v in value]
    if isinstance(value, str) and secret_name(key):
        return _redacted(value)
    return value


def _redacted(value: str) -> str:
    try:
        float(value)
    except ValueError:
        return REDACTED if value else value
    return value


def file_mode(run_dir: Path | str) -> int:
    """The mode for files in ``run_dir``: its own permission bits without execute (0700 → 0600, 0750 → 0640)."""
    return Path(run_dir).stat().st_mode & 0o666
