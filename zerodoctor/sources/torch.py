"""Sources, text: PyTorch's console messages → ``oom`` and ``run_end`` events.

CUDA OOM, every generation of ``c10/cuda/CUDACachingAllocator.cpp``'s message: up to 1.3
``(GPU N; X total capacity; X already allocated; X free; X cached)`` ("cached" printing
``amount_cached - amount_allocated``: the reserved-but-unallocated bytes; some builds add ``; X inactive``), the
parenthesis ``(GPU N; X total
capacity; X already allocated; X free; X reserved in total by PyTorch)`` with or without the
``max_split_size_mb`` hint (as ``RuntimeError`` and as
``torch.cuda.OutOfMemoryError``), the 2.1 form ("total capacty", sic), and the 2.2+ form
("GPU N has a total capacity of X of which X is free … Of the allocated memory X is allocated
by PyTorch, [with X allocated in private pools (e.g., CUDA Graphs),] and X is reserved by
PyTorch but unallocated"), raised as ``torch.OutOfMemoryError`` since 2.4. Messages wrapped
over several lines are held per rank until complete; two ranks' glued on one line are split.
A memory cap (``torch.cuda.set_per_process_memory_fraction``) adds ``X allowed;``. torchrun's failure
summary (``torch/distributed/elastic/multiprocessing/errors/__init__.py``, ``_FAILURE_FORMAT_TEMPLATE``),
its one-line ``failed (exitcode: N) local_rank: R`` (``elastic/multiprocessing/api.py``) and DeepSpeed's
launcher ``[...] exits with return code = N`` (``launcher/launch.py``; 0.3.12-0.5.7 raised ``CalledProcessError:
… died with <Signals.SIGKILL: 9>`` instead) give each failed rank's exit code
or signal.
"""

from __future__ import annotations

import re
from dataclasses import replace

from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred
from zerodoctor.messages.oom import SIZE, oom_numbers
from zerodoctor.sources.text import Context, Line, joined

_START = deferred(r"(?:\[rank(\d+)\]:\s?)?(?:[\w.]*OutOfMemoryError: )?CUDA out of memory\.")
# A log that begins inside the message (a rotated file, a scroll-back) still shows its numbers: the request with
# the allocator's own parenthesis (1.x) or "GPU N has a total capacity" (2.1+) is no other library's words.
_HEADLESS = deferred(rf"Tried to allocate {SIZE}(?: \(GPU \d+;|\. GPU \d+ has a total capac)")
# Where each generation's numbers end: past these the message is complete.
_END = deferred(r"reserved in total by PyTorch\)|is reserved by PyTorch but unallocated|cached\)|inactive\)")
MAX_WRAPPED_LINES = 8
MAX_MESSAGE = 2000

_SUMMARY_START = ("Root Cause (first observed failure)", "Failures:")
_SUMMARY_RANK = deferred(r"^\s*rank\s*: (\d+) \(local_rank: (\d+)\)")
_SUMMARY_EXIT = deferred(r"^\s*exitcode\s*: (-?\d+) \(pid: (\d+)\)")
_SUMMARY_END = deferred(r"^\s*={10,}\s*$")
MAX_SUMMARY_LINES = 400
LAUNCHER_LINES = 8  # lines after "Killing subprocess" in which the launcher names the exit code
# Bounded numbers: an exit code or a rank past int32 is a garbled line, not an event the store refuses.
_EXITED = deferred(r"failed \(exitcode: (-?\d{1,9})\) local_rank: (\d{1,9})\b|exits with return code = (-?\d{1,9})\b"
                   r"|died with <Signals\.SIG\w+: (\d{1,2})\b")
# DeepSpeed's launcher names the command, which it built with "--local_rank={local_rank}" (launcher/launch.py, unless
# --no_local_rank): the rank, as torchrun's "local_rank: R", where a paste broke the list before its end
_LAUNCHER_COMMAND = ":sigkill_handler] ["
_ARGV_RANK = deferred(r"'--local_rank=(\d{1,9})'")


class TorchDialect:
    name = "torch"
    # DeepSpeed's launcher logs "Killing subprocess N" for each child before "{cmd} exits with return code = C":
    # that keyword opens a short window instead of a lower-case one that would slow every line's prefilter. The
    # command is a list, so its line holds "] exits with return code" (a symbol first: cheap), which finds it
    # alone too, as people paste it; the window still finds it where a terminal wrapped it after the "]".
    keywords = (b"CUDA out of memory", b"Tried to allocate", b"Root Cause (first", b"Failures:", b"(exitcode: ",
                b"Killing subprocess", b"] exits with return code", b"<Signals.", _LAUNCHER_COMMAND.encode())

    def __init__(self, context: Context) -> None:
        self.context = context
        self._open: dict[int | None, list[Line]] = {}  # rank → the lines of its message being read
        self._summary_lines = -1  # -1: not in a failure summary
        self._summary_rank: int | None = None
        self._exited: set[int] = set()
        self._killing = 0
        self._argv_rank: int | None = None  # the rank in the launcher's command line being read

    @property
    def holding(self) -> bool:
        return bool(self._open) or self._summary_lines >= 0 or self._killing > 0

    def feed(self, line: Line) -> list[Event]:
        text = line.text
        if self._summary_lines >= 0 or any(s in text for s in _SUMMARY_START):
            return self._summary(line, text)
        if "Killing subprocess" in text:
            self._killing = LAUNCHER_LINES
            return []
        if self._killing:
            self._killing -= 1
        if _LAUNCHER_COMMAND in text:
            found = _ARGV_RANK.search(text)
            self._argv_rank = int(found.group(1)) if found else None
        if line.rank not in self._open and ("exitcode" in text or "return code" in text or "died with <" in text):
            return self._exited_line(line, text)
        out: list[Event] = []
        starts = "CUDA out of memory" in text or _HEADLESS.search(text) is not None
        if line.rank in self._open:
            lines = self._open[line.rank]
            if starts:  # a new message starts before the last one completed
                out += self._emit(line.rank)
            else:
                lines.append(line)
                if _END.search(joined(lines, _END.search)) or len(lines) >= MAX_WRAPPED_LINES:
                    out += self._emit(line.rank)
                return out
        if not starts:
            return out
        for rank, message in _split(text, line.rank):
            self._open[rank] = [replace(line, text=message)]
            if _END.search(message):
                out += self._emit(rank)
        return out

    def finish(self) -> list[Event]:
        out = self.let_go()
        self._summary_lines = -1
        return out

    def let_go(self) -> list[Event]:
        """The file went quiet: an OOM message held for its wrapped lines is told as it stands."""
        out: list[Event] = []
        for rank in list(self._open):
            out += self._emit(rank)
        return out

    def held_since(self) -> int | None:
        """The first line of the OOM messages ``let_go`` would tell."""
        return min((lines[0].number for lines in self._open.values()), default=None)

    def _emit(self, rank: int | None) -> list[Event]:
        lines = self._open.pop(rank)
        message = re.sub(r"\s+", " ", joined(lines, _END.search))[:MAX_MESSAGE]
        return [self.context.event("oom", lines[0], rank=rank, message=message, step=self.context.last_step(),
                                   **oom_numbers(message))]

    def _summary(self, line: Line, text: str) -> list[Event]:
        """torchrun's ``ChildFailedError`` box → one ``run_end`` per failed rank."""
        self._summary_lines += 1
        if _SUMMARY_END.match(text) and self._summary_lines > 0 or self._summary_lines > MAX_SUMMARY_LINES:
            self._summary_lines, self._summary_rank = -1, None
            return []
        match = _SUMMARY_RANK.match(text)
        if match:
            self._summary_rank = int(match.group(1))
            return []
        match = _SUMMARY_EXIT.match(text)
        if not match or self._summary_rank is None or self._summary_rank in self._exited:
            return []
        return self._ended(line, self._summary_rank, int(match.group(1)))

    def _exited_line(self, line: Line, text: str) -> list[Event]:
        """torchrun's or DeepSpeed's launcher's one line about a child that exited non-zero."""
        match = _EXITED.search(text)
        if not match:
            return []
        code, local_rank, launcher_code, signal = match.groups()
        if signal is not None:  # DeepSpeed's launcher 0.3.12-0.5.7: subprocess's CalledProcessError
            launcher_code = f"-{signal}"
        if launcher_code is not None:  # the launcher names the command: the rank is its --local_rank
            found = _ARGV_RANK.search(text)
            rank = int(found.group(1)) if found else self._argv_rank
            self._argv_rank = None
            return self._ended(line, rank if rank is not None else line.rank if line.rank is not None else 0,
                               int(launcher_code))
        return self._ended(line, int(local_rank), int(code))

    def _ended(self, line: Line, rank: int, code: int) -> list[Event]:
        if rank in self._exited or code == 0:
            return []
        self._exited.add(rank)
        # A negative exitcode is the signal that killed the rank (-6: SIGABRT from the NCCL watchdog).
        return [self.context.event("run_end", line, rank=rank, exit_code=code,
                                   signal=-code if code < 0 else None)]


def _split(text: str, rank: int | None) -> list[tuple[int | None, str]]:
    """Each OOM message on the line with its rank: two ranks' messages are often glued together."""
    starts = list(_START.finditer(text))
    if not starts:  # a message whose start the log lost: its numbers from the request on; else the bare words
        headless = _HEADLESS.search(text)
        return [(rank, text[headless.start():] if headless else text[text.find("CUDA out of memory"):])]
    out = []
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        said = match.group(1)
        out.append((int(said) if said is not None else rank, text[match.start():end]))
    return out
