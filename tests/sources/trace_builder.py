"""Traces built in tests from ranges with known overlap: Kineto's layout, events of the categories torch writes.

Built, not recorded: each test that uses one says what it proves by it (the arithmetic, a rule's logic);
real traces are under tests/fixtures/traces and the ZD302/ZD802 fixtures.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def event(cat: str, name: str, ts: float, dur: float, tid: int | str = 1, pid: int | str = 1, **args: object) -> dict:
    """One complete ("X") event; ``args`` as torch records them (``correlation``, ``In msg nelems``…)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_trace(path: Path, events: list[dict], **meta: object) -> Path:
    """A trace in Kineto's layout (metadata keys around ``traceEvents``), gzipped when the name says so."""
    text = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 3}, **meta, "traceEvents": events,
                       "traceName": str(path)}, indent=1)
    path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
    return path
