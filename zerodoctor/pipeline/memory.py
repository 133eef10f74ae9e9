"""Pipeline without a store: input files → run views folded in memory → judgements (``diagnose`` without ``--db``).

The folds are the contract; the store is only where ``watch`` keeps them between passes. So the one-shot
path reads the same batches (``read_batches``, large JSONL parsed ahead by ``ReadAhead``) in the same passes
as a stored ``diagnose`` (a batch from each file in turn; the views settled whenever a stored pass would
commit, and at its end), feeds them to the same ``RunView``s, whose step rows wait in memory
(``signals/held.py``) instead of in chunks, and judges each run by the same ``judge_view``. Nothing is
written and SQLAlchemy is never imported: a pasted one-line log costs the interpreter's start-up and little
more. A bad line is counted and kept aside as the store keeps it (``FileRead.rejected``, with its bytes),
and the report lists it.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import BinaryIO, Callable, Iterator

from zerodoctor import signals
from zerodoctor.pipeline import COMMIT_EVENTS, InputError, Progress, _gc_paused, _size
from zerodoctor.rulebook.engine import judge_view
from zerodoctor.rulebook.finding import Judgement
from zerodoctor.rulebook.loader import Rule
from zerodoctor.signals import plots
from zerodoctor.signals.held import HeldSteps
from zerodoctor.signals.plots import RunSeries
from zerodoctor.signals.view import Reads, RunView
from zerodoctor.sources.batches import BATCH_LINES, Batch, UnsupportedFormat, make_parser, read_batches, run_id_for
from zerodoctor.sources.readable import OPEN_FILES, open_log
from zerodoctor.sources.readahead import Pool, ReadAhead
from zerodoctor.sources.rejects import Rejected, say_rejected

log = logging.getLogger("zerodoctor.pipeline")


class FileRead:
    """One input read once, to its end: its parser, how far it is read, what it held and kept aside."""

    def __init__(self, path: Path, fmt: str, *, pool: Pool | None) -> None:
        """Raises ``UnreadableFile`` (an ``OSError``) for what is no log, ``UnsupportedFormat`` for a format no
        parser reads."""
        self.path, self.fmt, self.pool = path, fmt, pool
        handle, self.decoded = open_log(path)  # first: a symlink loop is an UnreadableFile here, not in resolve()
        self.handle: BinaryIO | None = handle
        try:
            self.name = str(path.resolve())  # as a stored file's row names it: the key of the view's formats
            st = os.fstat(handle.fileno())
            self.identity = (st.st_dev, st.st_ino)
            self.parser = make_parser(fmt, run_id=run_id_for(path), path=path)
        except BaseException:
            handle.close()
            raise
        OPEN_FILES.used(self)
        self.offset = self.lines = self.events = 0
        self.rejected: list[Rejected] = []
        self.runs: dict[str, None] = {}  # the runs its lines are of, in the order first seen
        self._ahead: ReadAhead | None = None

    def read(self, feed: Callable[[FileRead, Batch], None], *, final: bool, batches: int | None = None) -> bool:
        """Hand ``feed`` the batches from the offset on; True when ``batches`` full ones were read (more may
        wait). ``final``: the file is complete, its parser's held state and an unterminated last line too."""
        for count, batch in enumerate(self._batches(final=final), 1):
            if batch.end == self.offset and not batch.events and not batch.step_count() and not batch.rejected:
                continue
            feed(self, batch)
            self.offset, self.lines = batch.end, batch.last_line
            self.events += len(batch.events) + batch.step_count()
            self.rejected += batch.rejected
            say_rejected(log, self.name, batch.rejected)
            if count == batches:
                return batch.cut or (self._ahead is not None and self._ahead.active)
        return False

    def _batches(self, *, final: bool) -> Iterator[Batch]:
        """Parsed ahead by ``pool`` while it can, then in process from wherever the offset stands (as ``FileTail``)."""
        if self.pool is not None and self.decoded is None:
            if self._ahead is None:
                self._ahead = ReadAhead.of(self.pool, self.path, self.fmt, self._stream(), self.offset,
                                           self.lines + 1, batch_lines=BATCH_LINES)
                if self._ahead is None:
                    self.pool = None  # too little to read for a pool to pay
            if self._ahead is not None:
                yield from self._ahead.batches(self.offset, self.lines + 1)
        yield from read_batches(self.path, self.parser, start=self.offset, first_line=self.lines + 1, final=final,
                                batch_lines=BATCH_LINES, stream=self._stream())

    def _stream(self) -> BinaryIO:
        """The open handle, opened again at the path if ``OPEN_FILES`` closed it to stay under ``ulimit -n``: more
        rank files than descriptors are read in turns, as ``watch``'s tails are."""
        if self.handle is None:
            self.handle, self.decoded = open_log(self.path)
        OPEN_FILES.used(self)
        return self.handle

    def close(self) -> None:
        """Close the handle (``OPEN_FILES`` evicting it, or the read done); a later read opens it again."""
        OPEN_FILES.dropped(self)
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class MemoryPipeline:
    """Folds the batches read into each run's view and judges runs, all in memory.

    A run whose view or judgement fails is set aside, as ``Pipeline`` sets it aside: said once, not
    judged, its lines still counted, every other run going on.
    """

    def __init__(self, rules: list[Rule], *, modules: list[ModuleType] | None = None) -> None:
        self.rules = rules
        self.modules = modules or signals.signal_modules()
        self.reads = Reads.of(self.modules)
        self.views: dict[str, RunView] = {}
        self.runs: dict[str, None] = {}  # every run read, in the order first seen (a stored run's id order)
        self.set_aside: dict[str, str] = {}  # run → why
        self._dirty: set[str] = set()

    def feed(self, read: FileRead, batch: Batch) -> None:
        """One batch read from ``read``: each run it names takes its events and step rows."""
        by_run: dict[str, list[dict]] = {}
        for e in batch.events:
            by_run.setdefault(e["run"], []).append(e)
        for name in batch.columns:
            by_run.setdefault(name, [])
        for name, run_events in by_run.items():
            read.runs.setdefault(name)
            if name not in self.runs:
                self.runs[name] = None
                self.views[name] = RunView(len(self.runs), name, self.reads, held=HeldSteps())
            if name in self.set_aside:
                continue
            with self._isolated(name):
                view = self.views[name]
                view.add(run_events, read.name, read.fmt)
                if name in batch.columns:
                    view.add_steps(batch.columns[name])
                self._dirty.add(name)

    def settle(self, *, final: bool = False) -> None:
        """Hand finished steps to the folds (where a stored pass commits: the same steps, at the same points)."""
        for name in sorted(self._dirty):
            with self._isolated(name):
                view = self.views[name]
                view.catch_up(None)
                view.settle(None, final=final)
        self._dirty.clear()

    def ingest(self, inputs: list[tuple[Path, str]], on_progress: Progress | None = None, *,
               jobs: int | None = None) -> list[FileRead]:
        """Read ``inputs`` to their ends, as ``Pipeline.ingest`` does: passes of a batch from each file in
        turn until none has more, then each finished. Returns the files read (a second name of one file
        read already, a hard link, is read once)."""
        reads: list[FileRead] = []
        pool = Pool(jobs) if jobs != 1 else None
        try:
            for path, fmt in inputs:
                try:
                    read = FileRead(path, fmt, pool=pool)
                except UnsupportedFormat as exc:
                    raise InputError(f"{path}: {exc}") from None
                same = next((r for r in reads if r.identity == read.identity), None)
                if same is not None:
                    log.warning("%s is the same file as %s (a hard link); read once, there", read.name, same.name)
                    read.close()
                    continue
                reads.append(read)
            total = sum(_size(r.path) for r in reads)
            with _gc_paused():
                busy = list(reads)
                while busy:
                    busy = self._pass(busy)
                    if on_progress is not None:
                        on_progress(sum(r.offset for r in reads), total)
                for read in reads:
                    read.read(self.feed, final=True)
                self.settle(final=True)
        finally:
            if pool is not None:
                pool.close()
            for read in reads:
                read.close()
        return reads

    def _pass(self, reads: list[FileRead]) -> list[FileRead]:
        """One batch from each file; returns those with more to read."""
        pending, more = 0, []
        for read in reads:
            offset_events = read.events + len(read.rejected)
            if read.read(self.feed, final=False, batches=1):
                more.append(read)
            pending += read.events + len(read.rejected) - offset_events
            if pending >= COMMIT_EVENTS:
                self.settle()
                pending = 0
        self.settle()
        return more

    def judge(self, name: str) -> Judgement:
        """Signals and rules for one run, from its view as it stands (``Pipeline.judge`` after the fact)."""
        judged = None
        with self._isolated(name):
            view = self.views[name]
            if name not in self.set_aside:
                view = view.as_of_now(None)
                view.now, view.quiet = view.last_t, {}
                found, unevaluated, values = judge_view(self.rules, view, self.modules)
                judged = Judgement(name, found, unevaluated, values, view.config, view.world_size_stated,
                                   rules=len(self.rules))
        return judged if judged is not None else Judgement(name, set_aside=self.set_aside[name])

    def series(self, name: str) -> RunSeries:
        """What the run's plots draw, as its view keeps it (``signals/plots.py``)."""
        return plots.series(None if name in self.set_aside else self.views.get(name))

    @contextmanager
    def _isolated(self, name: str) -> Iterator[None]:
        """One run's view work: anything it raises sets that run aside instead (there is no store to fail)."""
        try:
            yield
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"[:500]
            log.error("run %s set aside: its view failed (%s); it is not judged, its lines are read and counted, "
                      "every other run goes on", name, why, exc_info=bool(os.environ.get("ZERODOCTOR_DEBUG")))
            self.set_aside[name] = why
            self._dirty.discard(name)
