"""Signals, crashes: how the run stopped → known crash signatures, SIGKILLed ranks, a stall on the JIT build lock.

The signatures are ``messages/signatures.py``'s, read by ``sources/crashes.py`` (``log`` events ``crash``); kills
and error exits from ``run_end`` (the probe, torchrun's summary and one-line failure, DeepSpeed's launcher): a
positive exit code is the status a rank's program chose (Python's 1 for an uncaught exception, argparse's 2), not a
signal.
A rank whose last ``extension`` event says ``Using … as PyTorch extensions root`` and which logged nothing after it is
waiting on ``torch/utils/file_baton.py``'s lock: a rank that builds prints "Emitting ninja build file"
right away, one that loads a cached build prints "Loading extension module" — only a waiter is silent.
"""

from __future__ import annotations

from typing import Any

from zerodoctor.messages.crashes import signal_of
from zerodoctor.messages.signatures import SIGNATURES
from zerodoctor.signals.view import RunView
from zerodoctor.signals.base import Signal

SIGKILL = 9
# A run the user or the scheduler stopped: its ranks' exit statuses are no fault (Ctrl-C, torchrun's SIGTERM)
_STOPPED = ("KeyboardInterrupt", "SignalException")
SIGNATURE_NAMES = [s.name for s in SIGNATURES]

READS = ()

SIGNALS = [
    *(Signal(f"crash.{name}", "ranks", f"how many ranks printed the '{name}' crash signature")
      for name in SIGNATURE_NAMES),
    *(Signal(f"crash.ranks_{name}", "ranks", f"the ranks that printed the '{name}' crash signature")
      for name in SIGNATURE_NAMES),
    Signal("crash.saved_world_size", "ranks", "data-parallel world size the ZeRO checkpoint was saved with"),
    Signal("crash.resume_world_size", "ranks", "data-parallel world size that tried to load the checkpoint"),
    Signal("crash.missing_header", "name", "the CUDA header the op build could not find"),
    Signal("crash.swap_buffers_wanted", "buffers", "swap buffers the parameter swapper asked for"),
    Signal("crash.sigkilled", "ranks",
           "how many ranks were killed by SIGKILL (exit code -9); unknown where the run shows no rank's exit"),
    Signal("crash.host_killed", "ranks",
           "how many ranks were killed for host memory: SIGKILL, or Ray's memory monitor"),
    Signal("crash.ranks_host_killed", "ranks", "those ranks"),
    Signal("crash.ray_killed", "ranks",
           "how many ranks Ray's memory monitor killed; no count where it never spoke (the run may not be Ray's)"),
    Signal("crash.killed_from_outside", "bool",
           "a rank was killed from outside: by SIGKILL, or by Ray's memory monitor"),
    Signal("crash.error_exits", "ranks",
           "how many ranks exited with an error status (an exit code above 0, no signal) in a run nobody stopped"),
    Signal("crash.ranks_error_exits", "ranks", "those ranks"),
    Signal("crash.error_exit_code", "code", "the exit status of the first rank that exited with an error"),
    Signal("crash.extension_lock_waiters", "ranks",
           "how many ranks' logs end waiting for another process's JIT build of an op"),
    Signal("crash.ranks_extension_lock_waiters", "ranks", "the ranks waiting on the JIT build lock"),
    Signal("crash.extension_lock", "text", "the stale JIT build lock file the wrapper found while the job was "
                                           "silent (``zerodoctor run``)", label="stale build lock"),
]


def compute(run: RunView, values: dict[str, Any]) -> dict[str, Any]:
    logs = run.events.get("log", [])
    seen: dict[str, set[int]] = {name: set() for name in SIGNATURE_NAMES}
    out: dict[str, Any] = {}
    for log in logs:
        data = log.get("data") or {}
        if log.get("what") != "crash" or data.get("signature") not in seen:
            continue
        seen[data["signature"]].add(log["rank"])
        if "saved_world_size" in data:
            out["crash.saved_world_size"], out["crash.resume_world_size"] = data["saved_world_size"], data["world_size"]
        out["crash.missing_header"] = out.get("crash.missing_header") or data.get("header")
        out["crash.swap_buffers_wanted"] = out.get("crash.swap_buffers_wanted") or data.get("wanted_buffers")
    ended = run.events.get("run_end", [])
    killed = {e["rank"] for e in ended if e.get("signal") == SIGKILL or e.get("exit_code") == -SIGKILL}
    out["crash.sigkilled"] = len(killed) if ended else None  # a log that shows no exit counts no kills, not zero
    seen["host_killed"] = killed | seen["ray_memory_monitor_kill"]
    out["crash.ray_killed"] = len(seen["ray_memory_monitor_kill"]) or None
    out["crash.killed_from_outside"] = bool(seen["host_killed"])
    seen["error_exits"] = _error_exits(run, ended)
    out["crash.error_exit_code"] = next((e["exit_code"] for e in ended if e["rank"] in seen["error_exits"]), None)
    seen["extension_lock_waiters"] = _lock_waiters(run)
    out["crash.extension_lock"] = next((e["data"]["lock"] for e in reversed(run.events.get("log", []))
                                        if e.get("what") == "extension" and "lock" in (e.get("data") or {})), None)
    for name, ranks in seen.items():
        out[f"crash.{name}"] = len(ranks)
        out[f"crash.ranks_{name}"] = sorted(ranks) or None
    return out


def _error_exits(run: RunView, ended: list[dict[str, Any]]) -> set[int]:
    """Ranks whose exit code is a status above 0, not a signal; none where the user or the scheduler stopped the run."""
    if any(str(e.get("type") or "").endswith(_STOPPED) for e in run.events.get("exception", [])):
        return set()
    return {e["rank"] for e in ended
            if (e.get("exit_code") or 0) > 0 and signal_of(e.get("exit_code"), e.get("signal")) is None}


def _lock_waiters(run: RunView) -> set[int]:
    """Ranks caught waiting on the build lock (a stack dump in file_baton's wait, or the wrapper's sighting of a
    silent job and a stale lock: launch/build_lock.py), or whose last word was the extensions root."""
    last: dict[int, tuple[float, str]] = {}
    waiting: set[int] = set()
    for log in run.events.get("log", []):
        if log.get("what") == "extension":
            state = (log.get("data") or {}).get("state")
            if state == "waiting":
                waiting.add(log["rank"])
            last[log["rank"]] = (log["t"], state)
    later = [e["t"] for kind in ("exception", "oom", "run_end") for e in run.events.get(kind, [])]
    later += [e["t"] for e in run.events.get("log", []) if e.get("what") != "extension"]
    # a rank that stepped got past it
    later += [r["last_t"] for r in run.per_rank.values() if r.get("last_t") is not None]
    latest = max(later, default=float("-inf"))
    return waiting | {rank for rank, (t, state) in last.items() if state == "root" and t >= latest}
