"""Sources, text: the error a log dies of → ``exception`` events (tracebacks) and ``log`` events ``fatal``.

The layer under every other dialect: whatever else a log holds, the Python exception it ends on
(``Traceback (most recent call last):`` — or a paste cut after it — its ``File "…", line N, in f`` frames,
or rich's boxed form ``│ /path/file.py:N in f │``; then ``Type: message`` and the message's next lines), or a
line that kills a process without one (glibc's ``Segmentation fault``, CPython's ``Fatal Python error``, the
kernel's OOM killer, C++'s ``terminate called after throwing an instance of 'std::bad_alloc'``, a CUDA
kernel's ``Assertion … failed``, a NaN loss in a progress line), is read here. The events carry what the
probe's carry (type, message, frames), so ``signals/fatal.py`` judges a pasted log and a recorded run alike;
naming the family is ``messages/crashes.py``'s. A message a terminal hard-wrapped is read whole: up to
``MESSAGE_LINES`` lines after the exception line are joined to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from zerodoctor.events import Event
from zerodoctor.messages import crashes
from zerodoctor.messages.deferred import deferred
from zerodoctor.sources.text import Context, Line, keyword_search

_TRACEBACK = "Traceback (most recent call last)"
# A frame line; a paste that quoted the traceback as inline code starts its first frame with the backtick
_FRAME = deferred(rf"^[\s`]*{crashes.FRAME}")
# rich's frame "path:line in function"; a long site-packages path pushes the function onto the box's next line
_RICH_FRAME = deferred(r"^\s*│\s*(\S+\.py):(\d+)(?: in (\S+))?")
# An exception line: a dotted class name that reads as an error, then its message. Python prints it at
# column 0; consoles add prefixes (ranks, timestamps, pytest's "E   "), so any leading text up to a space.
_ERROR_CLASS = r"((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Failure|Exit))"
_EXCEPTION = deferred(rf"(?:^|\s|\]:?){_ERROR_CLASS}(?::\s?(.*))?$")
# Inside a traceback an indented line is the frame's source, unless it starts with the exception's name (pip and
# other wrappers indent the whole traceback): "    AssertionError: …" but never "    except ValueError:".
_INDENTED_EXCEPTION = deferred(rf"^\s+{_ERROR_CLASS}(?::\s(.*))?$")
_RICH_EDGE = deferred(r"^\s*[│╭╰─]")
_NOT_MESSAGE = deferred(r"^\s*(?:$|Traceback|File \"|\[?\d{4}-\d\d-\d\d|During handling|The above exception"
                        r"|[│╭╰])")
_WORD_EDGES = " \t]|\r"
_QUOTED = deferred(r"'[^']*'|\"[^\"]*\"")
MESSAGE_LINES = 4
MAX_FRAMES = 24
MAX_TRACEBACK_LINES = 400  # a traceback that never ends (a truncated paste) lets go after this many lines
MAX_MESSAGE = 1000
# Families a line may show on its own (no exception around it): killers, signals, kernel assertions; the records'
_LINE_FAMILIES = tuple(f for f in crashes.FAMILIES if f.line)
_LINE_NAMES = frozenset(f.name for f in _LINE_FAMILIES)
# What opens a traceback or an exception line, and torchrun's failure box: the dialect's own keywords
_OWN_KEYWORDS = (b"Traceback (most", b"Error", b"Exception", b'File "', b"(local_rank: ")
# A warning names a failure the run goes on after (torchvision's "Failed to load image Python extension: …
# undefined symbol"): never a fatal line.
_WARNING = deferred(r"Warning\b|\bwarn(?:ing)?\(|\[W(?:ARN(?:ING)?)?\]")
# torchrun's failure box, one entry per failed rank: "rank      : 1 (local_rank: 1)", then "exitcode  : -6
# (pid: 4242)  (SIGABRT)" and "traceback : Signal 6 (SIGABRT) received by PID 4242", which name no rank.
_BOX_RANK = deferred(r"^\s*rank\s*: (\d+) \(local_rank: \d+\)")
_BOX_FIELD = deferred(r"^\s*(?:exitcode|traceback)\s*: ")
# ProcessGroupNCCL's own lines name their rank ("[E ProcessGroupNCCL.cpp:916] [Rank 7] NCCL watchdog thread
# terminated with exception: CUDA error: …", 2.2+ "[PG ID 0 PG GUID 0(default_pg) Rank 5]"): the rank of a line whose
# prefix said none (Ray's "(RayWorkerVllm pid=5304) ", vllm#2682)
_PG_RANK = deferred(r"ProcessGroupNCCL\.cpp:\d+\] \[[^\]]*\bRank (\d+)\]")


@dataclass
class _Traceback:
    """One rank's traceback being read: its frames, then (once the exception line came) the message."""

    line: Line
    frames: list[str] = field(default_factory=list)
    type: str | None = None
    parts: list[str] = field(default_factory=list)
    lines: int = 0


class FatalDialect:
    name = "fatal"
    # Its own, then the line families' (messages/crashes.py), each once
    keywords = tuple(dict.fromkeys((*_OWN_KEYWORDS, *(k for f in _LINE_FAMILIES for k in f.keywords))))

    def __init__(self, context: Context) -> None:
        self.context = context
        self._mine = keyword_search(self.keywords)
        self._open: dict[int | None, _Traceback] = {}
        self._said: set[tuple[int, str]] = set()  # (rank, family) of fatal lines already reported
        self._named: set[str] = set()  # families already reported from a named rank
        self._box_rank: int | None = None  # the rank of the failure box's entry being read

    @property
    def holding(self) -> bool:
        return bool(self._open)

    def feed(self, line: Line) -> list[Event]:
        text = line.text
        open_tb = self._open.get(line.rank)
        if open_tb is not None:
            return self._continue(open_tb, line, text)
        if self._mine(text) is None:  # another dialect's line (every line of a dense DeepSpeed log): no family there
            return []
        if _TRACEBACK in text:
            self._open[line.rank] = _Traceback(line)
            return []
        if _FRAME.match(text):  # a traceback pasted from its first frame on, without its head line
            return self._continue(self._open.setdefault(line.rank, _Traceback(line)), line, text)
        match = _EXCEPTION.search(text)
        if (match and crashes.is_fault(match.group(1))
                and not text.lstrip().startswith(("warnings.warn", "Exception ignored"))):
            tb = self._open[line.rank] = _Traceback(line)
            return self._exception_line(tb, line, match)
        return self._fatal_line(line, text)

    def finish(self) -> list[Event]:
        out: list[Event] = []
        for rank in list(self._open):
            out += self._close(rank)
        return out

    def let_go(self) -> list[Event]:
        """The file went quiet: a traceback held for lines that may still come is told as it stands (a run
        that dies on it writes nothing after it)."""
        return self.finish()

    def held_since(self) -> int | None:
        """The first line of the tracebacks ``let_go`` would tell."""
        return min((tb.line.number for tb in self._open.values()), default=None)

    def _continue(self, tb: _Traceback, line: Line, text: str) -> list[Event]:
        tb.lines += 1
        if tb.type is not None:  # reading the message's next lines
            if _NOT_MESSAGE.match(text) or len(tb.parts) > MESSAGE_LINES:
                return self._close(line.rank) + self.feed(line)
            tb.parts.append(text.strip())
            return []
        frame = _FRAME.match(text) or _RICH_FRAME.match(text)
        if frame:
            path, number, function = frame.groups()
            function = function or "?"
            tb.frames = [*tb.frames, f'File "{path}", line {number}, in {function}'][-MAX_FRAMES:]
            return []
        match = _INDENTED_EXCEPTION.match(text)
        if match:
            return self._exception_line(tb, line, match)
        if _RICH_EDGE.match(text) or text.startswith((" ", "\t")) or not text.strip():
            if tb.lines > MAX_TRACEBACK_LINES:
                return self._close(line.rank)
            return []  # a frame's source line, rich's box, or a blank line inside the box
        match = _EXCEPTION.search(text)
        if match:
            return self._exception_line(tb, line, match)
        # a line that ends the traceback without an exception line (a paste cut short): the frames alone
        return self._close(line.rank) + self.feed(line)

    def _exception_line(self, tb: _Traceback, line: Line, match: re.Match) -> list[Event]:
        tb.type = match.group(1)
        tb.parts = [(match.group(2) or "").strip()]
        tb.line = line
        if not crashes.is_fault(tb.type):
            del self._open[line.rank]
        return []

    def _named_families(self) -> set[str]:
        """The families already shown on a named rank: its fatal lines, its tracebacks read or still being read."""
        read = {crashes.classify(f"{tb.type}: {_message(tb.parts)}") for rank, tb in self._open.items()
                if rank is not None and tb.type is not None}
        return self._named | read

    def _close(self, rank: int | None) -> list[Event]:
        tb = self._open.pop(rank)
        if tb.type is None:
            return []
        message = _message(tb.parts)
        if rank is not None:
            self._named.add(crashes.classify(f"{tb.type}: {message}") or crashes.UNKNOWN)
        return [self.context.event("exception", tb.line, type=tb.type, message=message[:MAX_MESSAGE],
                                   traceback=tb.frames or None, step=self.context.last_step())]

    def _fatal_line(self, line: Line, text: str) -> list[Event]:
        """A line that kills without a traceback: reported once per rank and family."""
        if _WARNING.search(text):
            return []
        box = _BOX_RANK.match(text)
        if box:
            self._box_rank = int(box.group(1))
            return []
        family = crashes.classify(text)
        if family not in _LINE_NAMES:
            family = next((f.name for f in _LINE_FAMILIES if f.alone and f.alone.search(text)), None)
        if family is None:
            return []
        rank = self._box_rank if self._box_rank is not None and _BOX_FIELD.match(text) else line.rank
        tagged = _PG_RANK.search(text) if rank is None else None
        rank = int(tagged.group(1)) if tagged else rank
        if rank is None and family in self._named_families():
            return []  # a named rank's crash echoed unprefixed (C++'s "terminate called" / "what():"): no rank 0's
        named = rank is not None
        rank = rank if rank is not None else 0  # as context.event names it
        if (rank, family) in self._said:
            return []
        self._said.add((rank, family))
        if named:
            self._named.add(family)
        return [self.context.event("log", line, rank=rank, message=_from_failure(text, family)[:MAX_MESSAGE],
                                   source=self.name, level="ERROR", what="fatal", data={"family": family},
                                   step=self.context.last_step())]


def _message(parts: list[str]) -> str:
    """The exception's message: its first line, unless the family shows only in the lines after it.

    Python prints a message's own newlines, so the lines after the exception line may be its rest (CUDA's
    "CUDA kernel errors might be asynchronously reported…", transformers' "Failed to import … because of the
    following error" and the error on the next line) or the next thing the console printed. The first line
    is the message unless it is empty or names no family while the lines joined do: joined with a space
    (a message of several lines) or with nothing (a line a terminal hard-wrapped at its width).
    """
    first = next((p for p in parts if p), "")
    if not crashes.classify(first):
        first = next((j for j in (" ".join(p for p in parts if p), "".join(parts)) if crashes.classify(j)), first)
    return first.rstrip(":")


def _from_failure(text: str, family: str) -> str:
    """The line from the word that holds the failure on: a progress bar or a log prefix glued before it goes.

    A failure quoted inside the line (NCCL's ``NCCL WARN Cuda failure 700 'an illegal memory access was
    encountered'``) is the quoted words: from the family's word on, the line would keep the closing quote only.
    """
    match = crashes.BY_NAME[family].pattern.search(text) if family in crashes.BY_NAME else None
    start = match.start() if match else 0
    while start > 0 and text[start - 1] not in _WORD_EDGES:
        start -= 1
    if match:
        quoted = next((q for q in _QUOTED.finditer(text) if q.start() < start and match.end() < q.end()), None)
        if quoted:
            return quoted.group()[1:-1].strip()
    return text[start:].strip()
