"""Sources: a file → its batches (``Batch``), read with the parser of its format.

A parser turns one line into zero or more events (``feed``) and may hold state across
lines (a wrapped message, a traceback), released by ``finish`` at end of input. Parsers
come from the ``register_parsers`` hook by format name; ``detect_format`` picks one from
the content, ``run_files`` the files of a run directory (``register_sources``).
"""

from __future__ import annotations

import json
import operator
from contextlib import nullcontext
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Protocol

from zerodoctor import plugins
from zerodoctor.events import Event, StepRecord, step_record
from zerodoctor.events.columns import Columns
from zerodoctor.sources.chrome_trace import is_trace_file, looks_like_trace, traces_in
from zerodoctor.sources.csv_monitor import is_monitor_file, monitor_file
from zerodoctor.sources.tensorboard_events import is_tfevents_file, looks_like_tfevents, tfevents_in
from zerodoctor.sources.flight_recorder import dumps_in, is_dump_file
from zerodoctor.sources.lines import CHUNK, MAX_LINE_BYTES, Block, read_blocks
from zerodoctor.sources.names import WRAPPER_EVENTS, named_by
from zerodoctor.sources.readable import open_log
from zerodoctor.sources.rejects import BadLine, Rejected

SNIFF_BYTES = 64 * 1024
BATCH_LINES = 20_000  # lines a batch holds at most: what a reader hands on at once, stored or folded
# Ranks a batch's steps claim at most: each is a chunk to store and a rank to fold, so a file whose lines claim
# 20,000 ranks made one batch ~100 times the cost of one rank's 20,000 lines, and every other file waited for it.
BATCH_RANKS = 4_000
_RANK_LINES = 1_000  # lines parsed between two counts of a batch's ranks
_run_of = operator.attrgetter("run")
_run_rank = operator.attrgetter("run", "rank")


class Parser(Protocol):
    """Yields event dicts; a step may come as a dict or already as a ``StepRecord``.

    ``feed`` takes one line, its newline included (none on an unterminated last line). A
    parser that holds no state across lines may also have ``feed_lines(lines)``: many lines
    without their newline → ``(steps, others)``: one ``StepRecord`` for each step line, in
    order, and ``(index, event)`` for every other line in order, its event when it took the line
    (another kind), ``None`` when it left it for ``feed`` (a line it cannot judge). Per line it
    costs the decoding and little else, where ``feed`` costs a Python call and the batch's
    bookkeeping.
    """

    format: str

    def feed(self, data: bytes) -> tuple[Event | StepRecord, ...] | list[Event | StepRecord]: ...

    def finish(self) -> tuple[Event | StepRecord, ...] | list[Event | StepRecord]: ...


def parsers(run_id: str | None = None, path: Path | None = None) -> dict[str, Callable[[], Parser]]:
    """Makers of a parser for one file (``run_id``'s ``path``) by format name, the core's and every plugin's."""
    return plugins.merged(plugins.hook().register_parsers(run_id=run_id, path=path))


def run_files(directory: Path) -> list[tuple[Path, str]]:
    """The files of a run directory to read: those of the first source pattern that matches any.

    Rank event files win over ``console.log``: reading both would count every step twice. The wrapper's own
    events (``wrapper.jsonl``) are read beside either. A
    fix-and-resume run's directory holds its attempts, each a run directory: their files, each
    attempt its own run (``<id>.attempt-K``). A file the glob finds that is none of its pattern's files
    (``names.named_by``: ``rank-0.1.jsonl``, a copy beside rank 0's) is not read (``strays``).
    """
    known = parsers()
    # what the wrapper saw of the job from outside (a silent wait on a stale build lock) counts no step: read
    # beside rank files and console alike
    beside = [(directory / WRAPPER_EVENTS, "jsonl")] if (directory / WRAPPER_EVENTS).is_file() else []
    for pattern, fmt in source_patterns():
        found = [path for path in sorted(directory.glob(pattern)) if named_by(path.name, pattern)]
        if found and fmt in known and pattern != WRAPPER_EVENTS:
            return [(path, fmt) for path in found] + beside
    if attempts := attempt_dirs(directory):  # one run's attempts, each its own run directory
        return [file for attempt in attempts for file in run_files(attempt)]
    # dumps under any TORCH_FR_DUMP_TEMP_FILE prefix: known by their first bytes
    if "flight-recorder" in known and (dumps := dumps_in(directory)):
        return [(path, "flight-recorder") for path in dumps]
    # a folder of profiler traces (TensorBoard's plugin folder): known by content
    if "chrome-trace" in known and (traces := traces_in(directory)):
        return [(path, "chrome-trace") for path in traces]
    # DeepSpeed Monitor's CSV files, here or in its <job_name> folder: one source
    if "csv-monitor" in known and (monitor := monitor_file(directory)) is not None:
        return [(monitor, "csv-monitor")]
    # ... or its TensorBoard event files (one per launch), known by content
    if "tensorboard" in known and (events := tfevents_in(directory)):
        return [(path, "tensorboard") for path in events]
    return []


def strays(directory: Path) -> list[Path]:
    """Files of a run directory (or of its attempts) that a source pattern's glob finds but no pattern
    stands for (``names.named_by``): ``run_files`` leaves them unread, and ``diagnose`` says so."""
    patterns = [pattern for pattern, _ in source_patterns()]
    found = {path for d in (directory, *attempt_dirs(directory)) for pattern in patterns for path in d.glob(pattern)}
    return sorted(path for path in found if not any(named_by(path.name, pattern) for pattern in patterns))


ATTEMPT_DIRS = "attempt-[0-9]*"  # `run --fix-and-resume` keeps each attempt of a run in one (zerodoctor/resume/)


def attempt_dirs(directory: Path) -> list[Path]:
    """The attempt directories of a fix-and-resume run, in attempt order."""
    found = [d for d in directory.glob(ATTEMPT_DIRS) if d.is_dir() and d.name.split("-", 1)[1].isdigit()]
    return sorted(found, key=lambda d: int(d.name.split("-", 1)[1]))


def source_patterns() -> list[tuple[str, str]]:
    """``(glob, format)`` of the files a run directory may hold, preferred first."""
    return plugins.collected(plugins.hook().register_sources())


def run_id_for(path: Path) -> str:
    """A run directory's file belongs to the run the directory names; a loose file names its own.

    A flight recorder dump, whatever its prefix, or a profiler trace is one rank's file of the run its
    directory holds.
    """
    in_run = any(named_by(path.name, p) for p, _ in source_patterns()) or is_dump_file(path) or is_trace_file(path)
    if not in_run:
        return path.parent.name if is_monitor_file(path) or is_tfevents_file(path) else path.stem
    if fnmatch(path.parent.name, ATTEMPT_DIRS):  # <id>/attempt-K/: the run id the probe writes, <id>.attempt-K
        return f"{path.parent.parent.name}.{path.parent.name}"
    return path.parent.name


class UnsupportedFormat(ValueError):
    """The input is readable but no registered parser handles its format."""


@dataclass
class Batch:
    """Events and rejects read from one file, up to byte offset ``end`` (exclusive).

    Step events, nearly all of a run, are ``steps`` (``StepRecord``s) while the batch is read,
    and ``columns`` once it is sealed (one ``Columns`` per run: what the store writes, and what a
    read-ahead worker sends back); ``events`` holds every other kind. ``event_lines[i]`` /
    ``step_lines[i]`` is the line ``events[i]`` / ``steps[i]`` was parsed from (its last line, for
    an event spanning several; a sealed row keeps its own): a store that refuses one event
    quarantines that line, not the batch.
    """

    events: list[Event] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    end: int = 0
    last_line: int = 0
    event_lines: list[int] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    step_lines: list[int] = field(default_factory=list)
    columns: dict[str, Columns] = field(default_factory=dict)  # sealed steps, per run (``seal``)
    # How many of the lines before ``end`` hold a crash message the parser keeps open for lines that may still come
    # (``TextParser.held_lines``): stored with the offset, so a reader killed before it let the message go leaves
    # them to be read again (``pipeline/tail.py``).
    held_lines: int = 0
    cut: bool = False  # ended by ``BATCH_LINES`` or ``BATCH_RANKS``, not by the end of what there was to read
    _ranks: set = field(default_factory=set, repr=False)  # (run, rank) of ``steps[:_counted]``
    _counted: int = 0

    def ranks(self) -> int:
        """How many ranks the batch's steps claim (counted as they come: a count costs the new steps only)."""
        self._ranks.update(map(_run_rank, self.steps[self._counted:]))  # at C speed: a Python loop took 3x as long
        self._counted = len(self.steps)
        return len(self._ranks)

    def seal(self) -> None:
        """Turn ``steps`` into ``columns``, one ``Columns`` per run with each row's rank and line:
        the shape steps are stored in, and cheap to send between processes."""
        if not self.steps:
            return
        names = set(map(_run_of, self.steps))
        for name in names:
            if len(names) == 1:
                records, lines = self.steps, self.step_lines
            else:
                picked = [(r, line) for r, line in zip(self.steps, self.step_lines) if r.run == name]
                records, lines = [r for r, _ in picked], [line for _, line in picked]
            cols = Columns.of(records, lines)
            self.columns[name] = Columns.concat([self.columns[name], cols]) if name in self.columns else cols
        self.steps, self.step_lines = [], []

    def step_count(self) -> int:
        return len(self.steps) + sum(c.n for c in self.columns.values())

    @classmethod
    def of(cls, parsed: list, rejected: list[Rejected] | None = None, *, end: int, last_line: int) -> Batch:
        """A sealed batch of events and steps in any mix (all from line ``last_line``), each routed as ``add`` does."""
        batch = cls(rejected=list(rejected or ()), end=end, last_line=last_line)
        batch.add(parsed, last_line)
        batch.seal()
        return batch

    def runs(self) -> set[str]:
        """The names of the runs this batch has events or steps of."""
        return {e["run"] for e in self.events} | set(map(_run_of, self.steps)) | set(self.columns)

    def add(self, parsed: tuple | list, line: int) -> None:
        """Take what a parser made of ``line``: steps to ``steps``, every other kind to ``events``."""
        for e in parsed:
            if type(e) is StepRecord:
                self.steps.append(e)
                self.step_lines.append(line)
            elif e.get("kind") == "step":
                self.steps.append(step_record(e))
                self.step_lines.append(line)
            else:
                self.events.append(e)
                self.event_lines.append(line)


def detect_format(path: Path) -> str:
    """``"jsonl"`` when the first non-blank line is a JSON object with a ``kind``, ``"chrome-trace"`` for a
    profiler trace (one JSON object naming ``traceEvents``), ``"flight-recorder"`` for a dump, ``"tensorboard"``
    for a TensorBoard event file, else ``"text"``.

    Raises ``UnreadableFile`` for what is no log at all (a FIFO, binary data).
    """
    stream, _ = open_log(path)
    with stream as f:
        head = f.read(SNIFF_BYTES)
    if head.startswith(b"\x80\x02"):  # a pickle: PyTorch's flight recorder dump
        return "flight-recorder"
    if looks_like_tfevents(head):  # TFRecord framing around TensorBoard's file_version event
        return "tensorboard"
    first, *rest = head.lstrip().split(b"\n", 1)
    first = first.strip()
    try:  # a whole first line that is an event: an events file, whatever it mentions
        if rest and first.startswith(b"{") and "kind" in json.loads(first):
            return "jsonl"
    except (ValueError, TypeError, RecursionError):  # nested past the decoder's depth: the reader quarantines it
        pass
    if looks_like_trace(head):  # torch.profiler's Chrome trace: one JSON object, its first line no event
        return "chrome-trace"
    return "jsonl" if not first or (first.startswith(b"{") and b'"kind"' in first) else "text"


def make_parser(fmt: str, run_id: str | None = None, path: Path | None = None) -> Parser:
    """A parser for ``fmt``, made for ``run_id``'s file ``path`` (the ``register_parsers`` hook's context)."""
    known = parsers(run_id, path)
    try:
        make = known[fmt]
    except KeyError:
        raise UnsupportedFormat(f"no parser for format '{fmt}' (known: {', '.join(sorted(known))})") from None
    return make()


def read_batches(
    path: Path,
    parser: Parser,
    *,
    start: int = 0,
    first_line: int = 1,
    final: bool = True,
    batch_lines: int = BATCH_LINES,
    stream: BinaryIO | None = None,
    unterminated: bool = True,
) -> Iterator[Batch]:
    """Stream ``path`` from byte ``start`` in batches of at most ``batch_lines`` lines.

    Each batch carries the offset just past its last line, so a consumer that commits
    the batch and its offset together never reads a line twice nor skips one.
    ``final=True`` means the file is complete: the parser's held state is flushed and an
    unterminated last line is read (unless ``unterminated=False``: a writer may still finish
    it). ``stream``, when given, is read instead of opening ``path`` (a tailer keeps a
    rotated-away file open to drain it); ``path`` still names it. Either way the bytes are
    those ``open_log`` gives: gzip and UTF-16/32 decoded. Batches come sealed (``Batch.seal``): the
    shape the store takes them in.
    """
    held = getattr(parser, "held_lines", None)
    for batch in _parsed_batches(path, parser, start=start, first_line=first_line, final=final,
                                 batch_lines=batch_lines, stream=stream, unterminated=unterminated):
        batch.seal()
        if held is not None and not final:  # the parser has read up to this batch's end, no further
            batch.held_lines = held()
        yield batch


def _parsed_batches(path: Path, parser: Parser, *, start: int, first_line: int, final: bool, batch_lines: int,
                    stream: BinaryIO | None, unterminated: bool) -> Iterator[Batch]:
    name = str(path)
    if getattr(parser, "reads_whole_file", False):
        # read once its writer is done with it, whole: from a later offset there is nothing new to read
        if final:
            yield (_read_whole(name, path, parser, first_line=first_line, stream=stream) if not start
                   else Batch(end=start, last_line=first_line - 1))
        return
    batch = Batch(end=start, last_line=first_line - 1)
    room = batch_lines
    with nullcontext(stream) if stream is not None else open_log(path)[0] as f:
        for block in read_blocks(f, start=start, first_line=first_line, final=final and unterminated):
            if block.oversize:
                shown = bool(block.tail) and getattr(parser, "terminal", False)
                reason = f"line of {block.oversize} bytes is over the {MAX_LINE_BYTES}-byte cap" + (
                    "; what follows its last \\r, as a terminal shows it, was read" if shown else "")
                batch.rejected.append(Rejected(name, block.first, reason, block.lines[0], block.oversize))
                batch.end, batch.last_line, room = block.end, block.first, room - 1
                if shown:  # a progress bar redrawn for hours, and the line printed after it
                    _add_lines(batch, parser, name, Block(block.first, block.start, block.end, [block.tail],
                                                          block.unterminated))
            else:
                # the batch may fill up inside this block; a step line claims one rank at most
                while len(block.lines) > (take := min(room, _RANK_LINES, BATCH_RANKS - batch.ranks())):
                    part, block = block.split(take)
                    _add_lines(batch, parser, name, part)
                    room -= take
                    if not room or batch.ranks() >= BATCH_RANKS:
                        batch.cut = True
                        yield batch
                        batch, room = Batch(end=batch.end, last_line=batch.last_line), batch_lines
                _add_lines(batch, parser, name, block)
                room -= len(block.lines)
            if not room or batch.ranks() >= BATCH_RANKS:
                batch.cut = True
                yield batch
                batch, room = Batch(end=batch.end, last_line=batch.last_line), batch_lines
    if final:
        try:
            batch.add(parser.finish(), batch.last_line)
        except BadLine as exc:  # a line the parser held to the end (a cut timer line) is bad as any other
            batch.rejected.append(Rejected(name, batch.last_line, f"{exc} at end of input", b"", 0))
        except Exception as exc:  # noqa: BLE001 - what the parser held is lost, the read is not
            batch.rejected.append(Rejected(name, batch.last_line, f"{_parser_error(exc)} at end of input", b"", 0))
    yield batch


def _read_whole(name: str, path: Path, parser: Parser, *, first_line: int, stream: BinaryIO | None) -> Batch:
    """A whole-file format in one batch: its bytes fed to the parser in chunks, never split into lines
    (a trace may hold no newline at all), and what went wrong with it as one rejected entry each."""
    batch = Batch(end=0, last_line=first_line - 1)
    with nullcontext(stream) if stream is not None else open_log(path)[0] as f:
        f.seek(0)
        feed: Callable[[bytes], object] | None = parser.feed
        while data := f.read(CHUNK):
            batch.end += len(data)
            try:
                if feed is not None:
                    feed(data)
            except Exception as exc:  # noqa: BLE001 - what was read before the fault still counts
                batch.rejected.append(Rejected(name, first_line, str(exc) if isinstance(exc, ValueError)
                                               else _parser_error(exc), b"", 0))
                feed = None  # the rest is read to its end (the offset) but no longer parsed
    try:
        batch.add(parser.finish(), first_line)
    except Exception as exc:  # noqa: BLE001 - the parser's own fault costs its events, not the read
        batch.rejected.append(Rejected(name, first_line, f"{_parser_error(exc)} at end of input", b"", 0))
    batch.rejected += [Rejected(name, first_line, reason, b"", 0) for reason in getattr(parser, "problems", ())]
    batch.last_line = first_line
    return batch


def _add_lines(batch: Batch, parser: Parser, name: str, block: Block) -> None:
    """Parse ``block`` into ``batch``: the parser's ``feed_lines`` takes what it can, ``feed`` the rest."""
    lines, first, last = block.lines, block.first, len(block.lines) - 1
    steps: list[StepRecord] = []
    left: Iterable[tuple[int, Event | None]] = ((i, None) for i in range(len(lines)))
    feed_lines = getattr(parser, "feed_lines", None)
    if feed_lines is not None:
        try:
            steps, left = feed_lines(lines)
        except Exception:  # noqa: BLE001 - a bug on the batch path: every line goes to feed, costing at most itself
            steps, left = [], ((i, None) for i in range(len(lines)))
    done = taken = 0  # lines and steps moved into the batch
    unterminated = block.unterminated
    for i, event in left:
        if i > done:  # the run of lines feed_lines took, one step each
            batch.steps += steps[taken:taken + i - done]
            batch.step_lines += range(first + done, first + i)
            taken += i - done
        number = first + i
        done = i + 1
        if event is not None:  # another kind, decoded by feed_lines
            batch.events.append(event)
            batch.event_lines.append(number)
            continue
        data = lines[i] if unterminated and i == last else lines[i] + b"\n"
        try:
            batch.add(parser.feed(data), number)
        except BadLine as exc:
            batch.rejected.append(Rejected(name, number, str(exc), data.rstrip(b"\r\n"), len(data)))
        except Exception as exc:  # noqa: BLE001 - a parser's bug costs one line, never the whole read
            batch.rejected.append(Rejected(name, number, _parser_error(exc), data.rstrip(b"\r\n"), len(data)))
    if done <= last:
        batch.steps += steps[taken:]
        batch.step_lines += range(first + done, first + last + 1)
    batch.end, batch.last_line = block.end, first + last


def _parser_error(exc: Exception) -> str:
    """A parser's own bug as a one-line reason (pydantic's messages span several lines)."""
    return f"parser error: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
