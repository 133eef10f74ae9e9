"""Signals, store-based barrier: a new process group's barrier still waiting (``store_barrier_wait``) → which ranks
wait, how many processes it counted of how many, and what that count means.

torch's ``_store_based_barrier`` (``init_process_group`` and ``new_group``) counts the processes that added the
group's key to the store and waits until the count equals the world size. A count above it never comes down: more
processes share the store than the group holds (another job on the same MASTER_ADDR:MASTER_PORT, or a store an
earlier run left with its key already counted), and the ranks wait until the timeout. A count below it is processes
that have not called ``init_process_group`` or ``new_group``. A rank whose barrier completed is not waiting; one whose
barrier timed out is the timeout's (``hang.timeout_verdict``, ZD701).
"""

from __future__ import annotations

from typing import Any

from zerodoctor.signals.base import Signal, verdict
from zerodoctor.signals.view import RunView

READS = ()
_COMES_WITH = ("barrier.waiting_ranks", "barrier.joined", "barrier.world_size")

SIGNALS = [
    Signal("barrier.waiting", "ranks", "ranks still waiting in a new process group's store-based barrier, its timeout "
                                       "not reached", label="ranks waiting in the store-based barrier"),
    Signal("barrier.waiting_ranks", "ranks", "the ranks still waiting in the store-based barrier"),
    Signal("barrier.world_size", "ranks", "processes the waiting barrier waits for (world_size)",
           label="processes the barrier waits for"),
    Signal("barrier.joined", "ranks", "processes the waiting barrier has counted (worker_count, num_workers_joined)",
           label="processes the barrier counted"),
    Signal("barrier.waited_s", "s", "the longest wait a waiting rank's last line states (torch 2.2+ says it)",
           label="time waited in the barrier"),
    Signal("barrier.timeout_s", "s", "the barrier's timeout"),
    verdict("barrier.wait_verdict", "what the waiting barrier's count says: crowded (more processes than the group "
            "holds share its store) or short (processes have not arrived)", ("crowded", "short"),
            {"crowded": _COMES_WITH, "short": _COMES_WITH}),
]


def compute(view: RunView, values: dict[str, Any]) -> dict[str, Any]:
    logs = view.events.get("log", [])
    waits: dict[tuple[int, str], dict[str, Any]] = {}
    for e in logs:
        data = e.get("data") or {}
        if e.get("what") == "store_barrier_wait":
            waits[(e["rank"], data["key"])] = {**data, "t": e["t"]}
        elif e.get("what") == "store_barrier_done":
            waits.pop((e["rank"], data["key"]), None)
    timed_out = {e["rank"] for e in logs if e.get("what") == "collective_timeout"
                 and (e.get("data") or {}).get("op") == "store_based_barrier"}
    waiting = {rank: w for (rank, _), w in waits.items() if rank not in timed_out}
    out: dict[str, Any] = {"barrier.waiting": len(waiting)}
    if not waiting:
        return out
    latest = max(waiting.values(), key=lambda w: w["t"])
    world, joined = latest["world_size"], latest["joined"]
    stated = [w["waited_s"] for w in waiting.values() if w.get("waited_s") is not None]
    out.update({"barrier.waiting_ranks": sorted(waiting), "barrier.world_size": world, "barrier.joined": joined,
                "barrier.waited_s": max(stated, default=None), "barrier.timeout_s": latest.get("timeout_s"),
                "barrier.wait_verdict": "crowded" if joined > world else "short" if joined < world else None})
    return out
