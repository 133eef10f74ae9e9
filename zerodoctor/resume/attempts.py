"""Fix and resume, attempts: what each attempt ran with and why → ``runs/<id>/resume.json`` and ``attempt-K/``.

Every attempt is a run directory of its own, ``runs/<id>/attempt-K/`` (rank files, console log,
``meta.json``), with run id ``<id>.attempt-K`` so that a store fed all of them keeps their steps
apart. A relaunched attempt also holds ``fix.json`` (the merge patch applied, which the probe reads
to keep the patched values across the checkpoint load) and ``fix.diff``. ``resume.json`` beside them
is the audit trail: the policy the user gave, then per attempt its command, config, the fix and the
findings that caused it, the checkpoint it resumed from, its exit status and what was decided. It is
rewritten atomically after every decision, so ``run --fix-and-resume --append`` can pick up where a
killed wrapper stopped.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

TRAIL = "resume.json"


def attempt_dir(run_dir: Path, number: int) -> Path:
    """``attempt-<K>``, the name ``sources.attempt_dirs`` reads back (diagnose and watch read every attempt)."""
    return run_dir / f"attempt-{number}"


def load(run_dir: Path) -> dict[str, Any] | None:
    try:
        trail = json.loads((run_dir / TRAIL).read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ValueError(f"{run_dir / TRAIL}: not the audit trail of a fix-and-resume run: {exc}") from None
    return trail if isinstance(trail, dict) else None


def save(run_dir: Path, trail: dict[str, Any], mode: int) -> None:
    write_private(run_dir / TRAIL, json.dumps(trail, indent=2) + "\n", mode)


def write_private(path: Path, text: str, mode: int) -> None:
    """Write atomically with the run directory's file mode (the trail quotes the command and the config)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
