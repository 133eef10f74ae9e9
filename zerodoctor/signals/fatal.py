"""Signals, fatal: the error each rank died of → the run's root cause, its family, where it was raised.

Reads ``exception`` events (the probe's, or a console log's tracebacks), ``log`` events ``fatal``
(a line that kills without a traceback) and ``run_end`` (a rank killed by a signal). An exception
after which its rank still stepped was survived and is not fatal; one on a rank where a known crash
signature fired (``log`` ``crash``) is told by that signature's rule. Among the fatal errors the root is
the most specific family (``messages/crashes.py``: an illegal memory access on one rank before the
NCCL errors it causes on the others), then the earliest. ``fatal.family`` is always set ("none" when
nothing fatal was seen), so the crash rules are judged on every run.
"""

from __future__ import annotations

import re
from typing import Any

from zerodoctor.messages import crashes
from zerodoctor.messages.deferred import deferred
from zerodoctor.signals.view import RunView
from zerodoctor.signals.base import Signal

NONE = "none"
_FRAME = deferred(crashes.FRAME)
# Where a library's code lives: the frame past which a user's call went into torch, DeepSpeed, HF.
_LIBRARIES = ("torch", "deepspeed", "transformers", "accelerate", "peft", "trl", "apex", "megatron", "lightning",
              "pytorch_lightning", "fairseq", "colossalai", "bitsandbytes", "flash_attn", "triton", "vllm")
_SITE = deferred(r"[/\\](?:site|dist)-packages[/\\]|[/\\]lib[/\\]python\d[\d.]*[/\\]|^<frozen ")
_INSTALLED = deferred(r"[/\\](?:site|dist)-packages[/\\](\w+)")  # any other installed package, by its top name
_USER_CODE = "user code"
SURVIVABLE = {"nonfinite_loss"}  # counted on every rank that showed it, stepping on or not
ABORT = 6
SIGNAL_FAMILIES = ("native_crash", "process_aborted", crashes.TEARDOWN_CRASH)

READS = ()

SIGNALS = [
    Signal("fatal.family", "family", "crash family"),
    Signal("fatal.seen", "bool", "the log shows a fatal error of a rank's own (a flag: gates a rule, never shown)"),
    Signal("fatal.ranks", "ranks", "ranks that died of the crash family"),
    Signal("fatal.root_ranks", "ranks", "the ranks that died of the root cause's family"),
    Signal("fatal.rank", "rank", "the rank where the root fatal error was seen first"),
    Signal("fatal.step", "step", "optimizer step during which the root fatal error happened"),
    Signal("fatal.type", "name", "exception class of the root fatal error"),
    Signal("fatal.message", "text", "error"),
    Signal("fatal.error", "text", "the root fatal error as its log line reads: 'Type: message', or the message "
           "alone where no exception class was printed", label="error"),
    Signal("fatal.frame", "frame", "raised in (innermost frame of the user's code)"),
    Signal("fatal.library_frame", "frame", "entered the library at (where it raised, when no frame is the user's)"),
    Signal("fatal.raised_in", "frame", "raised at (the innermost frame, the library's or the user's)"),
    Signal("fatal.raised_library", "name",
           "the library whose code raised the root fatal error (deepspeed, torch …, or user code)"),
    Signal("fatal.signal", "name", "the signal that killed the root rank (SIGSEGV, SIGABRT, …), when one did"),
    Signal("fatal.module", "name", "the module a missing-module error names"),
    Signal("fatal.library", "name", "the shared library a missing-library error names"),
    Signal("fatal.gpu_arch", "arch", "the GPU architecture nvcc refused (compute_86 …)"),
    *(Signal(f"fatal.{f.name}", "ranks", f"ranks that showed {f.name.replace('_', ' ')}") for f in crashes.FAMILIES),
]
_MODULE = deferred(r"No module named '?([\w.]+)|cannot import name '(\w+)'")
_LIBRARY = deferred(r"([\w+-][\w.+-]*\.so(?:\.[\d.]*\d)?)\b|undefined symbol: (\w+)")
_SIGNAL_NAME = deferred(r"\b(SIG(?:SEGV|ABRT|BUS|FPE|ILL))\b")
_ARCH = deferred(r"'(compute_\d+\w?)'")
MESSAGE_CHARS = 300


def compute(run: RunView, values: dict[str, Any]) -> dict[str, Any]:
    seen = _errors(run)
    # A rank whose crash a known signature names (sources/crashes.py: ZD6xx rules) is that rule's to tell.
    explained = {e["rank"] for e in run.events.get("log", []) if e.get("what") == "crash"}
    # A NaN loss is a fault even where the run stepped on after it (an evaluation's NaN, a loop that never stops).
    errors = [e for e in seen if not e["survived"] and e["rank"] not in explained]
    out: dict[str, Any] = {f"fatal.{f.name}": len({e["rank"] for e in (seen if f.name in SURVIVABLE else errors)
                                                   if e["family"] == f.name})
                           for f in crashes.FAMILIES}
    if not errors:
        return {**out, "fatal.family": NONE, "fatal.seen": False, "fatal.ranks": 0}
    root = min(errors, key=lambda e: (crashes.rank_of(e["family"]), e["t"]))
    ranks = sorted({e["rank"] for e in errors if e["family"] == root["family"]})
    message = root.get("message") or ""
    out.update({"fatal.family": root["family"], "fatal.seen": True, "fatal.ranks": len(ranks),
                "fatal.root_ranks": ranks, "fatal.rank": root["rank"], "fatal.step": root.get("step"),
                "fatal.type": root.get("type"),
                "fatal.message": _cut(message) or None, "fatal.error": _error(root.get("type"), _cut(message)),
                "fatal.signal": root.get("signal"),
                **_frames(root.get("traceback") or [])})
    named = _SIGNAL_NAME.search(message)
    if named and root["family"] in SIGNAL_FAMILIES and not out.get("fatal.signal"):
        out["fatal.signal"] = named.group(1)
    named = _ARCH.search(message)
    if named and root["family"] == "nvcc_arch_unsupported":
        out["fatal.gpu_arch"] = named.group(1)
    named = _MODULE.search(message)
    if named and root["family"] == "missing_module":
        out["fatal.module"] = named.group(1) or named.group(2)
    named = _LIBRARY.search(message)
    if named and root["family"] == "missing_shared_library":
        out["fatal.library"] = named.group(1) or named.group(2)
    return out


def _error(type_: str | None, message: str) -> str | None:
    """``TypeError: bad operand``: one field for the fallback's words, which would otherwise need a clause for the
    class and one for the message (a fatal log line has no class; a bare exception, no message)."""
    return ": ".join(part for part in (type_, message) if part) or None


def _cut(message: str) -> str:
    """The message, at most MESSAGE_CHARS long: cut after a whole word and marked (…), so no number or name is
    left half (c10d's fingerprint cut at "pi" of "pinned_memory")."""
    if len(message) <= MESSAGE_CHARS:
        return message
    head = message[:MESSAGE_CHARS]
    if not message[MESSAGE_CHARS].isspace() and " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:") + "…"


def _errors(run: RunView) -> list[dict[str, Any]]:
    """Each error as ``{family, rank, t, step, type, message, traceback, signal, survived}``: survived when its
    rank stepped after it."""
    last_step_t = {rank: r.get("last_t") for rank, r in run.per_rank.items()}
    out: list[dict[str, Any]] = []

    def survived(e: dict[str, Any]) -> bool:
        return last_step_t.get(e["rank"]) is not None and last_step_t[e["rank"]] > e["t"]

    for e in run.events.get("exception", []):
        if crashes.is_fault(e.get("type") or ""):
            text = f"{e.get('type') or ''}: {e.get('message') or ''}"
            out.append({**e, "family": crashes.classify(text) or crashes.UNKNOWN, "survived": survived(e)})
    for e in run.events.get("log", []):
        if e.get("what") == "fatal":
            out.append({**e, "family": (e.get("data") or {}).get("family") or crashes.UNKNOWN, "type": None,
                        "survived": survived(e)})
    for e in run.events.get("run_end", []):
        number = crashes.signal_of(e.get("exit_code"), e.get("signal"))
        if number in crashes.FAULT_SIGNALS:  # SIGKILL is signals/crashes.py's
            family = "process_aborted" if number == ABORT else "native_crash"
            out.append({**e, "family": family, "signal": crashes.SIGNAL_NAMES[number], "survived": False,
                        "message": f"killed by {crashes.SIGNAL_NAMES[number]} (exit code {e.get('exit_code')})"})
    return out


def _frames(traceback: list[str]) -> dict[str, str]:
    """The innermost frame of the user's code, the library frame its call went into, and the innermost frame
    of all (where the error was raised: the library's own line when a library raised it)."""
    frames = [m.groups() for m in map(_FRAME.search, traceback) if m]
    user = [i for i, (path, _, _) in enumerate(frames) if not _SITE.search(path) and _library(path) is None]
    out: dict[str, str] = {}
    if frames:
        path, line, function = frames[-1]
        inside = _library(path)
        out["fatal.raised_in"] = f"{inside or _short(path)}:{line} in {function}"
        installed = _INSTALLED.search(path)
        out["fatal.raised_library"] = (inside.split("/", 1)[0] if inside else installed.group(1) if installed
                                       else _USER_CODE)
    if user:
        path, line, function = frames[user[-1]]
        out["fatal.frame"] = f"{_short(path)}:{line} in {function}"
        entered = next((f for f in frames[user[-1] + 1:] if _library(f[0])), None)
        if entered:
            path, line, function = entered
            out["fatal.library_frame"] = f"{_library(path)}:{line} in {function}"
    elif frames:  # no frame is the user's (a launcher's own crash): the library line that raised
        out["fatal.library_frame"] = out["fatal.raised_in"]
    return out


def _library(path: str) -> str | None:
    """``deepspeed/runtime/engine.py`` for a path inside an installed library, else ``None``."""
    parts = re.split(r"[/\\]", path)
    for i, part in enumerate(parts[:-1]):
        if part in _LIBRARIES and (i == 0 or parts[i - 1] in ("site-packages", "dist-packages") or _SITE.search(path)):
            return "/".join(parts[i:])
    return None


def _short(path: str) -> str:
    """The last two parts of a path: enough to find the file, short enough to read."""
    return "/".join(re.split(r"[/\\]", path)[-2:])
