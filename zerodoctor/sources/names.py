"""Sources, names: a file name → whether a source pattern stands for it (``rank-<r>.jsonl``, never a copy beside it).

Source patterns are fnmatch globs, and a glob's ``*`` matches any text: ``rank-*.jsonl`` also matches
``rank-0.1.jsonl`` or an editor's ``rank-0.old.jsonl``, a copy of rank 0's events that, read as a rank's
file, counts every step twice. So a pattern that starts with ``rank-*`` means a rank's number there: the
decimal the probe writes (``probe/writer.py``), nothing else. The glob itself stays as declared: it is
also what ``watch`` wakes up on, where a stray name costs a wake-up and nothing more.
"""

from __future__ import annotations


from fnmatch import fnmatchcase
from pathlib import Path

from zerodoctor.messages.deferred import deferred

RANK = "rank-*"  # at the start of a source pattern, the ``*`` is a rank's number
RANK_EVENTS = "rank-*.jsonl"  # the probe's events, one file per rank
WRAPPER_EVENTS = "wrapper.jsonl"  # what ``zerodoctor run`` saw of the job from outside (launch/build_lock.py)
_NUMBER = deferred(r"0|[1-9][0-9]*")  # as ``f"rank-{rank}"`` writes it: rank-01 would be a copy of rank-1 too


def named_by(name: str, pattern: str) -> bool:
    """Whether ``name`` is one of the files ``pattern`` stands for: it matches the glob and, where the
    pattern starts with ``rank-*``, what stands for the ``*`` is a rank's number."""
    if not fnmatchcase(name, pattern):
        return False
    if not pattern.startswith(RANK):
        return True
    start, rest = len(RANK) - 1, pattern[len(RANK):]
    return any(_NUMBER.fullmatch(name, start, end) and fnmatchcase(name[end:], rest)
               for end in range(start + 1, len(name) + 1))


def rank_event_files(directory: Path) -> list[Path]:
    """The probe's event files of a run directory, in name order (``rank-<r>.jsonl``, copies beside them left out)."""
    return sorted(path for path in directory.glob(RANK_EVENTS) if named_by(path.name, RANK_EVENTS))


def rank_of(name: str) -> int | None:
    """The rank whose own event file ``name`` is (``rank-3.jsonl`` → 3); None for any other file."""
    if not named_by(name, RANK_EVENTS):
        return None
    return int(name[len(RANK) - 1:-len(".jsonl")])


_ATTEMPT = deferred(r"(.+)\.attempt-([1-9][0-9]*)")


def attempt_run_id(run_id: str, number: int) -> str:
    """``<id>.attempt-K``: the run id of attempt K of a ``run --fix-and-resume`` run (``resume/``), also what
    ``batches.run_id_for`` names a file under ``<id>/attempt-K/``."""
    return f"{run_id}.attempt-{number}"


def attempt_of(run_id: str) -> tuple[str, int] | None:
    """``("<id>", K)`` for an attempt's run id (``attempt_run_id``); None for any other run."""
    match = _ATTEMPT.fullmatch(run_id)
    return (match[1], int(match[2])) if match else None
