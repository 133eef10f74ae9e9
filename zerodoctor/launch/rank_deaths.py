"""After the job: a rank that could not say it ended → the events of how it died.

A rank killed by a signal writes no ``run_end``: SIGKILL (the kernel's OOM killer) runs no code at all,
and SIGSEGV/SIGABRT run only CPython's fault handler, which the probe points at ``rank-<r>.fault``
(``probe/crash.py``). The wrapper, once the job ended, reads what is left: that file (``Fatal Python
error: Segmentation fault`` and the stacks, most recent call first), else the launcher's own words in
``console.log`` (torchrun's failure summary ``exitcode : -9``, its one-line ``failed (exitcode: -11)``,
DeepSpeed's launcher ``exits with return code = -9``), read by the same text parser ``diagnose`` uses,
else the job's exit status. The wrapper's own status says little: torchrun exits 1 whatever killed a child.

A rank can also die after it said it ended: the probe writes ``run_end`` at exit, and a process group
still alive in interpreter teardown can abort there (gloo's and NCCL's workers destroyed after Python
stopped: "terminate called without an active exception", pytorch#179291). Training finished; the job
still exits non-zero. ``teardown_events`` tells that death apart from one mid-training.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from zerodoctor.messages import crashes


CONSOLE_TAIL = 1 << 20  # the launcher's summary is the log's last words
_FAULT = re.compile(r"^Fatal Python error: (.+)$", re.M)
_FAULT_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+) in (\S+)', re.M)
_FAULT_SIGNALS = {"Segmentation fault": 11, "Aborted": 6, "Bus error": 7, "Floating-point exception": 8,
                  "Floating point exception": 8, "Illegal instruction": 4}


def closing_events(run_dir: Path, rank: int, fault_file: Path) -> list[dict[str, Any]]:
    """Fields of the events that close a rank's file: an ``exception`` from its fault file, and its ``run_end``."""
    out: list[dict[str, Any]] = []
    fault = fault_file.read_text(errors="replace") if fault_file.is_file() else ""
    said = _FAULT.search(fault)
    if said:
        frames = _current_thread_frames(fault[said.end():])
        out.append({"kind": "exception", "type": "Fatal Python error", "message": said.group(1).strip(),
                    "traceback": frames or None})
        number = _FAULT_SIGNALS.get(said.group(1).strip())
        if number is not None:
            return [*out, {"kind": "run_end", "exit_code": -number, "signal": number}]
    code = _launcher_exit_code(run_dir / "console.log", rank)
    if code is not None:
        return [*out, {"kind": "run_end", "exit_code": code, "signal": -code if code < 0 else None}]
    return out


def teardown_events(run_dir: Path, rank: int, fault_file: Path) -> list[dict[str, Any]]:
    """For a rank that wrote its ``run_end``: a ``log`` ``fatal`` event (family ``teardown_crash``) when a
    fatal signal killed it afterwards, as its fault file or the launcher says; else nothing."""
    said = _FAULT.search(fault_file.read_text(errors="replace")) if fault_file.is_file() else None
    number = _FAULT_SIGNALS.get(said.group(1).strip()) if said else None
    if number is None:
        number = crashes.signal_of(_launcher_exit_code(run_dir / "console.log", rank), None)
    if number not in crashes.FAULT_SIGNALS:
        return []
    name = crashes.SIGNAL_NAMES[number]
    return [{"kind": "log", "what": "fatal", "level": "ERROR", "source": "run",
             "message": f"killed by {name} after the script returned, in interpreter teardown",
             "data": {"family": crashes.TEARDOWN_CRASH, "signal": number}}]


def _current_thread_frames(text: str) -> list[str]:
    """The crashing thread's frames, outermost first as a traceback lists them (the fault handler prints
    ``Current thread 0x…`` most recent call first; other threads after a blank line)."""
    block = text.split("\nCurrent thread", 1)[-1] if "\nCurrent thread" in text else text
    block = block.split("\n\n", 1)[0]
    frames = [f'  File "{path}", line {line}, in {function}' for path, line, function in _FAULT_FRAME.findall(block)]
    return frames[::-1]


def _launcher_exit_code(console: Path, rank: int) -> int | None:
    """The exit code the launcher reported for ``rank`` in the console's last MiB, if it did."""
    if not console.is_file():
        return None
    from zerodoctor.sources.text import TextParser  # the text dialects load only when a rank died hard

    with open(console, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - CONSOLE_TAIL))
        tail = f.read().split(b"\n")
    parser = TextParser("run")
    ends = [e for line in tail for e in parser.feed(line + b"\n")] + parser.finish()
    codes = [e.get("exit_code") for e in ends if e.get("kind") == "run_end" and e.get("rank") == rank]
    return next((c for c in codes if c is not None), None)
