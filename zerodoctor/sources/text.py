"""Sources, text: console-log lines → events, by running every dialect parser over each line.

A console log is mostly noise (progress bars, prints, warnings). One combined regex of every
dialect's keywords is searched on the raw bytes first; a line it misses is not even decoded,
unless a dialect is holding a multi-line message open (a wrapped OOM, a traceback box), in
which case the holders see every line until they let go. A line it hits goes to the dialects
whose keywords it holds (and to the holders), not to every dialect. Dialects come from the
``register_dialects`` hook, so a plugin can add one; all of them share one ``Context`` per
file: the run id, the rank and time of each line, and the optimizer-step counter text logs
rarely print.
"""

from __future__ import annotations

import calendar
import functools
import re
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable, Iterable, Protocol

from zerodoctor import events
from zerodoctor.events import Event
from zerodoctor.messages.deferred import deferred

# torchrun's --log-line-prefix-template / --tee ("[rank3]:", "[default3]:") and the launcher's
# per-rank prefix: the only rank a line carries before its message. Slurm's srun --label writes "%*d: " (the task
# id right-aligned to the widest, common/write_labelled_message.c _build_label) before each line a task wrote.
_RANK_PREFIX = deferred(r"^\s*\[(?:rank|default)(\d+)\]:\s?|^ *(\d{1,5}): ")
# Open MPI's mpirun --tag-output. Open MPI 1.x-4.x write "[%s,%s]<%s>:" (jobid, rank, stdout/stderr/stddiag)
# before each chunk their I/O forwarder read from a rank's pipe and after each newline in it
# (orte/mca/iof/base/iof_base_output.c, v1.10.7-v4.1.6), so a line the rank wrote in pieces carries it inside
# too ("RuntimeError[1,19]<stderr>:: NCCL …"). 5.x's PMIx holds a partial line back and tags whole lines:
# "[%s,%s]<%s>: ", "[%s,%s][host:pid]<%s>: " (--output tag-detailed), "[%s]<%s>: " (--output rank)
# (openpmix src/common/pmix_iof.c, v4.2.9 and master).
_MPI_TAG = deferred(r"\[(?:[^\[\],]+,)?(\d+)\](?:\[[^\[\]]*\])?<std(?:out|err|diag)>:")
# Colours and terminal titles a console kept (CSI "ESC[31m", OSC "ESC]0;…BEL"): the dialects read the words.
_ANSI = deferred(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_STAMP = deferred(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
_STAMP_WINDOW = 48  # a log prefix's timestamp sits at the start; never scan a whole line for one
HISTORY = 8  # raw lines a dialect looks back on, for messages whose start a later line reveals (hard-wrapped text)
TAIL = 256  # raw lines kept: where a log's last clock time is looked for, past a final traceback
# Most steps a log's silence may stand for: a resumed run's first line or a garbled number must
# not expand into millions of invented steps.
MAX_INTERVAL = 10_000


@dataclass
class Line:
    """One decoded line as the dialects see it: no newline, no launcher's rank prefix (``[rankN]:``, mpirun's tag)."""

    text: str
    number: int
    rank: int | None
    t: float
    width: int = 0  # characters the console printed on this line, prefix included: a terminal's wrap width shows
    stamped: bool = False  # ``t`` is the line's own clock time, not one made up from its place in the file


HARD_WRAP_MIN = 60  # no terminal is narrower; shorter equal lines are a coincidence


def joined(lines: list[Line], whole: Callable[[str], object] | None = None) -> str:
    """The text of a message printed over several lines.

    A terminal that hard-wraps cuts at its width, inside words and numbers ("31.7" / "5 GiB"): every line but
    the last is exactly that wide, and the pieces join as they are. Lines a program or a person wrapped at
    spaces join with a space. Equal widths can be a coincidence, so ``whole`` (does this text read as the
    complete message?) decides where it can: the likelier join first, the other if only it reads whole.
    """
    spaced = " ".join(line.text.strip() for line in lines)
    glued = "".join(line.text for line in lines).strip()
    widths = {line.width for line in lines[:-1]}
    hard_wrapped = len(lines) > 1 and len(widths) == 1 and widths.pop() >= HARD_WRAP_MIN
    order = (glued, spaced) if hard_wrapped else (spaced, glued)
    if whole is not None:
        return next((text for text in order if whole(text)), order[0])
    return order[0]

@dataclass
class Context:
    """What the dialects of one file share: run id, step counter, recent lines, run facts."""

    run: str
    step: int = 0  # last optimizer step assigned, 1-based like the probe's
    printed: int = 0  # the highest step a line printed (step=N); the clock may still be gathering its lines
    anchored: bool = False  # the log shows the run from its start (step 0 is known)
    recent: deque = field(default_factory=lambda: deque(maxlen=TAIL))
    facts: dict[str, Any] = field(default_factory=dict)
    progress_t: float | None = None  # clock time of the last stamped line that carried a step's facts
    clocked: bool = False  # a line showed a clock time: events carry times, not line numbers
    timed_s: float = 0.0  # the step times the log showed, summed (``dsblocks.CommsTable.running``)
    _last_t: float | None = None

    def last_step(self) -> int | None:
        """The last step the log showed before this line, for an event that names no step of its own.

        ``step`` counts the steps the clock handed on; a ``step=20`` line whose step is still gathering
        its throughput and timer lines is not among them yet, so an OOM right after it was put at the
        step before (10, with ``steps_per_print`` 10). None before any step.
        """
        return max(self.step, self.printed) or None

    def event(self, kind: str, line: Line, rank: int | None = None, **fields: Any) -> Event:
        """An event stamped with the line's time and rank (explicit ``rank`` wins, else the prefix's, else 0)."""
        if rank is None:
            rank = line.rank if line.rank is not None else 0
        return events.new(kind, t=line.t, run=self.run, rank=rank, **fields)

    def lookback(self) -> list[bytes]:
        """The last ``HISTORY`` raw lines, this one included, oldest first."""
        return list(islice(reversed(self.recent), HISTORY))[::-1]

    def stamp(self, text: str, number: int) -> tuple[float, bool]:
        """The line's own timestamp, else a synthetic one just after the last, else the line number;
        and whether it was the line's own."""
        t = clock(text)
        stamped = t is not None
        self.clocked = self.clocked or stamped
        if t is None:
            # keeps order among unstamped lines after a stamped one
            t = self._last_t + 1e-6 if self._last_t is not None else float(number)
        self._last_t = t
        return t, stamped

    def clock_after_progress(self) -> Event | None:
        """How long the log went on after its last stamped step: a ``log_clock`` event at the last clock
        time it shows (at the step's own time when nothing came after it: judged, and no stall).

        Only lines a dialect claimed are stamped as they pass (the rest are never decoded), so the
        log's last clock time is looked for in its last lines, which the context keeps anyway.
        """
        if self.progress_t is None:
            return None
        last = next((t for t in map(_raw_clock, reversed(self.recent)) if t is not None), None)
        if last is None:
            return None
        last = max(last, self.progress_t)
        return events.new("log", t=last, run=self.run, rank=0, source="text", what="log_clock",
                          message=f"the log goes on {last - self.progress_t:.0f} s after its last step",
                          data={"progress_t": self.progress_t, "step": self.step or None})


def clock(text: str) -> float | None:
    """The clock time a log prefix stamps at the start of ``text`` (UTC seconds; the zone is not printed)."""
    match = _STAMP.search(text, 0, _STAMP_WINDOW)
    if not match:
        return None
    y, mo, d, h, mi, s, frac = match.groups()
    return calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s))) + (float("0." + frac) if frac else 0.0)


def _raw_clock(data: bytes) -> float | None:
    text = data.decode("utf-8", "replace")
    return clock(unprefixed(_ANSI.sub("", text))[1])


class Dialect(Protocol):
    """One family of console messages (DeepSpeed, PyTorch, NCCL, Hugging Face, Megatron)."""

    name: str
    keywords: tuple[bytes, ...]  # a line containing none of these is not this dialect's, unless holding
    holding: bool  # True while a multi-line message is open: then it sees every line

    def feed(self, line: Line) -> list[Event]: ...

    def finish(self) -> list[Event]: ...

    # Optional: ``let_go() -> list[Event]``, what a dialect holding a crash message open tells of it when the
    # file goes quiet (``TextParser.let_go``); a dialect without it holds on until the next line or the end.
    # With it, ``held_since() -> int | None``: the number of the first line of what ``let_go`` would tell.


def dialects() -> list[type]:
    """Dialect classes from the ``register_dialects`` hook, the core's first."""
    from zerodoctor import plugins

    return plugins.collected(plugins.hook().register_dialects())


class TextParser:
    """The "text" format: every registered dialect over every line that may concern it."""

    format = "text"
    terminal = True  # a console's bytes: after a \r the line is redrawn, so an oversize line's last segment counts

    def __init__(self, run_id: str | None = None) -> None:
        self.context = Context(run=run_id or "console")
        self.dialects: list[Dialect] = [cls(self.context) for cls in dialects()]
        # The regex engine tries the keywords only where a line holds one of their first characters:
        # keywords that start with an upper-case letter or a symbol keep it cheap, and factored into a
        # trie it tries only those sharing the letter it stands on (99 keywords: 1.6 µs per ordinary
        # 110-byte line, where one flat alternation took 3.1 µs; bench/rawlog.py).
        pattern, self._owners = _routing(tuple(d.keywords for d in self.dialects))
        self._hit, self._each = pattern.search, pattern.finditer
        self._remember = self.context.recent.append
        self._holders: list[Dialect] = []
        self._number = 0
        self._tag_space = True  # mpirun's tags end in a space (5.x) until a line shows one that does not (4.x)

    def feed(self, data: bytes) -> list[Event]:
        self._number += 1
        self._remember(data)
        hit = self._hit(data)
        if hit is not None:
            owners, mask = self._owners, 0
            for match in self._each(data, hit.start()):
                mask |= owners[match.group()]
            targets = [d for i, d in enumerate(self.dialects) if mask >> i & 1 or d.holding]
        elif self._holders:
            targets = self._holders
        else:
            return []
        line = self._line(data)
        out: list[Event] = []
        for dialect in targets:
            out += dialect.feed(line)
        self._holders = [d for d in targets if d.holding]  # a dialect not fed this line kept its state
        return out

    @property
    def clockless(self) -> bool:
        """No line read so far showed a clock time: events are ordered by line number, which is no time."""
        return not self.context.clocked

    def held_lines(self) -> int:
        """How many of the last lines fed hold what ``let_go`` would tell (0: nothing): a tail stores it with
        its offset, and a reader that starts there feeds those lines again (``replay``) to hold it again."""
        starts = [since() for d in self._holders if (since := getattr(d, "held_since", None)) is not None]
        first = min((s for s in starts if s is not None), default=None)
        return 0 if first is None else self._number - first + 1

    def replay(self, lines: list[bytes]) -> None:
        """Feed lines stored before (``held_lines``) so their held message is held again; their events,
        stored with them, are dropped, and only what ends up held is told later."""
        for data in lines:
            self.feed(data)

    def let_go(self) -> list[Event]:
        """The file went quiet (``pipeline/tail.py``): the crash messages held open for lines that may still
        come are told as they stand, so a run that died on one is judged on it live, as ``diagnose`` judges
        the file. Everything else held (a config dump, a step gathering its lines) waits for the next line."""
        out: list[Event] = []
        for dialect in self._holders:
            let_go = getattr(dialect, "let_go", None)
            if let_go is not None:
                out += let_go()
        self._holders = [d for d in self._holders if d.holding]
        return out

    def finish(self) -> list[Event]:
        out: list[Event] = []
        for dialect in self.dialects:
            out += dialect.finish()
        self._holders = []
        went_on = self.context.clock_after_progress()
        return out + [went_on] if went_on is not None else out

    def _line(self, data: bytes) -> Line:
        text = data.decode("utf-8", "replace").rstrip("\r\n")
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        width = len(text)
        if self._tag_space and ">:" in text and (tag := _MPI_TAG.match(text)) and not text.startswith(" ", tag.end()):
            self._tag_space = False  # a tag with no space after it: Open MPI 4.x's, whose tags never end in one
        rank, text = unprefixed(text, self._tag_space)
        t, stamped = self.context.stamp(text, self._number)
        return Line(text, self._number, rank, t, width, stamped)


@functools.lru_cache(maxsize=8)
def _routing(keywords: tuple[tuple[bytes, ...], ...]) -> tuple[re.Pattern, dict[bytes, int]]:
    """The prefilter over every dialect's ``keywords``, and which dialects each keyword found concerns.

    A line goes only to the dialects whose keywords it holds (and to those holding a message open).
    The keywords found do not overlap: each one found also stands for every keyword that may start
    inside it — a prefix or a substring of it (the trie's longest match hides them), or a keyword that
    begins with one of its tails (the line may go on as that keyword does). Bit i of a mask is the i-th
    dialect. Built once per set of dialects, not per file.
    """
    owners: dict[bytes, int] = {}  # keyword → the dialects that list it
    for i, own in enumerate(keywords):
        for word in own:
            owners[word] = owners.get(word, 0) | 1 << i
    by_first: dict[int, list[tuple[bytes, int]]] = {}
    for word, mask in owners.items():
        by_first.setdefault(word[0], []).append((word, mask))
    routes = {}
    for found in owners:
        mask = 0
        for j in range(len(found)):
            tail = found[j:]
            for word, bits in by_first.get(tail[0], ()):
                if word.startswith(tail) or tail.startswith(word):
                    mask |= bits
        routes[found] = mask
    return re.compile(trie_pattern(owners)), routes


@functools.lru_cache(maxsize=32)
def keyword_search(words: tuple[bytes, ...]) -> Callable[[str], re.Match | None]:
    """``search`` for any of a dialect's ``words`` in a decoded line: built once per set of words, not once
    per file read (building the trie is ~2,000 Python calls; a watch opens files for days)."""
    return re.compile(trie_pattern(words).decode()).search


def trie_pattern(words: Iterable[bytes]) -> bytes:
    """One regex matching any of ``words``, factored by shared prefixes (``ab|ac`` → ``a(?:b|c)``).

    Python's regex engine tries a flat alternation's branches one by one at every position; a trie
    tries at each position only the branches that share the byte it stands on.
    """
    trie: dict = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[None] = {}  # a word ends here

    def build(node: dict) -> bytes:
        branches = [re.escape(bytes([byte])) + build(child) for byte, child in sorted(
            (k, v) for k, v in node.items() if k is not None)]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        return b"(?:" + body + b")?" if None in node else body

    return build(trie)


def strip_prefix(raw: bytes) -> tuple[int | None, str]:
    """``(rank, text)`` of a raw line from ``Context.lookback()``, for dialects that look back."""
    return unprefixed(raw.decode("utf-8", "replace").rstrip("\r\n"))


def unprefixed(text: str, tag_space: bool = True) -> tuple[int | None, str]:
    """``(rank, text)`` of a decoded line without the rank prefix a launcher wrote before it (None: no prefix).

    mpirun's tag is taken out wherever it is: inside a line it only marks where its forwarder's read began (4.x
    writes no space there). ``tag_space``: a space right after a leading tag is the tag's, as Open MPI 5.x writes
    it, not the line's indentation (a traceback's frames, a header's rows), as under 4.x.
    """
    match = _RANK_PREFIX.match(text)
    if match and match.group(2) is not None:  # srun's label; torch's own "[rank3]:" after it names the rank
        text = text[match.end():]
        inner = _RANK_PREFIX.match(text)
        if inner and inner.group(1) is not None:
            return int(inner.group(1)), text[inner.end():]
        return int(match.group(2)), text
    if match:
        return int(match.group(1)), text[match.end():]
    if ">:" not in text:
        return None, text
    rank, match = None, _MPI_TAG.match(text)
    if match:
        rank, text = int(match.group(1)), text[match.end():]
        if tag_space:
            text = text.removeprefix(" ")
    return rank, _MPI_TAG.sub("", text)
