"""Fix and resume, checkpoints: the attempts' rank files → the newest checkpoint saved before a fault began.

The probe records every ``save_checkpoint`` as a ``checkpoint`` event (its directory, tag and the
step whose weights it holds). A checkpoint saved during the fault holds its damage (one written
in an overflow streak holds the collapsed loss scaler), so only those saved *before* the fault's
first step qualify, and only those still on disk with the ``latest``-style layout DeepSpeed loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from zerodoctor.sources.names import rank_event_files


@dataclass(frozen=True)
class Saved:
    step: int
    dir: str  # what the job passed to save_checkpoint, as the job saw it (relative to its cwd)
    tag: str
    path: str

    def to_json(self) -> dict:
        return {"step": self.step, "dir": self.dir, "tag": self.tag, "path": self.path}


def saved_in(run_dir: Path) -> list[Saved]:
    """Checkpoints every rank file of ``run_dir`` recorded as saved (rank 0's record is enough: saves are
    collective)."""
    found: dict[str, Saved] = {}
    for path in rank_event_files(run_dir):
        with open(path, "rb") as f:
            for line in f:
                if b'"checkpoint"' not in line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if (event.get("kind") == "checkpoint" and event.get("op") == "save"
                        and isinstance(event.get("step"), int)):
                    found.setdefault(event["path"], Saved(event["step"], event["dir"], event["tag"], event["path"]))
    return list(found.values())


def newest_before(saved: list[Saved], fault_step: int | None, cwd: Path) -> Saved | None:
    """The newest checkpoint holding the weights of a step before ``fault_step`` (any, when it is unknown)
    that still exists (its path is read relative to the job's working directory ``cwd``)."""
    usable = [s for s in saved if (fault_step is None or s.step < fault_step) and (cwd / s.path).is_dir()]
    return max(usable, key=lambda s: s.step, default=None)
