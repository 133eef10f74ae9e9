"""Signals, hangs: collective timeouts (NCCL watchdog) and how the ranks ended → which collective, which ranks.

When one rank never enters a collective, every other rank waits in it until the watchdog's
timeout and reports the same SeqNum; the rank that reports an older SeqNum, or none at all,
is the one to look at. Exit codes come from ``run_end`` (the probe, or torchrun's summary).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from zerodoctor.signals.base import Signal
from zerodoctor.runview import RunView

SIGNALS = [
    Signal("hang.collective_timeouts", "events", "collective operations the NCCL watchdog timed out (one per rank)"),
    Signal("hang.collective", "name", "the collective that timed out (OpType of the most reported SeqNum)"),
    Signal("hang.seq", "SeqNum", "sequence number of that collective on its process group"),
    Signal("hang.timeout_s", "s", "the process group's timeout"),
    Signal("hang.timeout_ranks", "ranks", "ranks whose watchdog reported the timeout"),
    Signal("hang.suspect_ranks", "ranks", "ranks stuck on an older collective, or that reported none while others did"),
    Signal("hang.behind_ranks", "ranks", "ranks that timed out on an older collective (a smaller SeqNum)"),
    Signal("hang.silent_ranks", "ranks", "ranks of the job that reported no timeout while others did"),
    Signal("hang.failed_ranks", "ranks", "ranks that exited non-zero or by a signal"),
]


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    timeouts = [e for e in view.events.get("log", []) if e.get("what") == "collective_timeout"]
    out: dict[str, Any] = {"hang.collective_timeouts": len(timeouts)}
    ends = view.events.get("run_end", [])
    failed = sorted({e["rank"] for e in ends if e.get("exit_code") or e.get("signal")})
    out["hang.failed_ranks"] = failed or None
    if not timeouts:
        return out
    data = [(e["rank"], e.get("data") or {}) for e in timeouts]
    seq_votes = Counter((d.get("seq"), d.get("op")) for _, d in data)
    (seq, op), _ = seq_votes.most_common(1)[0]
    ranks = sorted({r for r, _ in data})
    out.update({"hang.collective": op, "hang.seq": seq, "hang.timeout_ranks": ranks})
    out["hang.timeout_s"] = next((d["timeout_s"] for _, d in data if d.get("timeout_s") is not None), None)
    behind = sorted({r for r, d in data if seq is not None and d.get("seq") is not None and d["seq"] < seq})
    world = values.get("run.world_size")
    silent = sorted(set(range(world)) - set(ranks)) if isinstance(world, int) and world > len(ranks) else []
    suspects = sorted(set(behind) | set(silent))
    out["hang.suspect_ranks"] = suspects or None
    out["hang.behind_ranks"], out["hang.silent_ranks"] = behind or None, silent or None
    return out
