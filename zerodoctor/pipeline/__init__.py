"""The pipeline: files → store rows and run views (one transaction); one run → a ``Judgement``.

Shared by ``diagnose`` (which stops at end of file) and ``watch`` (which never stops):
both read files through ``FileTail``, both keep each run's view up to date from the
batches they store, in the transaction that stores them with the file's offset, and both
judge a run from its view, so a judgement costs what is new, never the whole run.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from zerodoctor import plugins, signals
from zerodoctor.rulebook.engine import evaluate
from zerodoctor.rulebook.finding import Judgement
from zerodoctor.rulebook.loader import Rule, load_rules
from zerodoctor.signals.view import Reads, RunView
from zerodoctor.sources.batches import Batch, UnsupportedFormat, detect_format, run_files, source_patterns
from zerodoctor.sources.chrome_trace import traces_in
from zerodoctor.sources.flight_recorder import dumps_in
from zerodoctor.sources.readahead import Pool
from zerodoctor.store import findings as stored_findings
from zerodoctor.store import runs as stored_runs
from zerodoctor.store import setaside
from zerodoctor.store.ingest import Ingestor
from zerodoctor.store.series import RunSeries, read_series
from zerodoctor.pipeline.tail import Emit, FileTail

Progress = Callable[[int, int], None]  # (bytes read so far, bytes in all) over the inputs

log = logging.getLogger("zerodoctor.pipeline")


class InputError(ValueError):
    """An input path that cannot be read; the message names it."""


def rules_from(extra_dirs: list[Path] | None = None) -> list[Rule]:
    """The core's and plugins' rules (``register_rules``), plus ``extra_dirs``, all checked the same way."""
    dirs = plugins.collected(plugins.hook().register_rules())
    return load_rules([*dirs, *(extra_dirs or [])], signals.catalog())


def expand_inputs(paths: list[Path], input_format: str | None = None) -> list[tuple[Path, str]]:
    """Run directories become their files (``sources.run_files``); each file gets its format (detected or forced)."""
    out: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            files = run_files(path)
            if not files:
                patterns = ", ".join(p for p, _ in source_patterns())
                raise InputError(f"{path}: none of {patterns} in this directory")
            out += [(f, input_format or fmt) for f, fmt in files]
            # beside the rank files: what the flight recorder dumped when the job hung
            out += [(f, "flight-recorder") for f in dumps_in(path) if (f, "flight-recorder") not in out]
            # and the profiler's traces (``zerodoctor run --profile``, or the user's own)
            out += [(f, "chrome-trace") for f in traces_in(path) if (f, "chrome-trace") not in out]
        elif path.exists() or path.is_symlink():  # a FIFO or a symlink loop is refused by name, not "missing"
            out.append((path, input_format or detect_format(path)))
        else:
            raise InputError(f"{path}: no such file or directory")
    return out


class Pipeline:
    """Stores batches, keeps the views of the runs they touch, and judges runs.

    A run whose view or judgement fails for anything but the store (a bug, or a value nothing
    validated) is set aside here, the one place ``diagnose`` and ``watch`` both pass through:
    said once, marked in the store with its reason (``store/setaside.py``), its rows still stored,
    and every other run goes on.

    Args:
        save_views: persist each view with the rows (a lasting store); ``False`` for a
            scratch store read once, where the views live only in memory.
    """

    def __init__(self, engine: Engine, rules: list[Rule], *, modules: list[ModuleType] | None = None,
                 save_views: bool = True) -> None:
        self.engine, self.rules, self.save_views = engine, rules, save_views
        self.modules = modules or signals.signal_modules()
        self.reads = Reads.of(self.modules)
        self.ingestor = Ingestor(before_store=self._bring_views_up_to_date)
        self.views: dict[str, RunView] = {}
        self._current: set[str] = set()  # views checked against the store in this transaction
        self._dirty: set[str] = set()
        self.set_aside: dict[str, str] = {}  # run → why
        self._unmarked: set[str] = set()  # set aside, the mark not yet written in a transaction that committed

    # -- ingest ---------------------------------------------------------------------

    def tail(self, conn: Connection, path: Path, fmt: str, *, pool: Pool | None = None) -> FileTail:
        return FileTail(conn, self.ingestor, path, fmt, pool=pool)

    def emit_for(self, tail: FileTail, then: Emit | None = None) -> Emit:
        """What ``tail.poll`` calls with each stored batch: the views take its events, then ``then``."""

        def emit(batch: Batch) -> None:
            by_run: dict[str, list[dict]] = {name: [] for name in batch.runs()}
            for e in batch.events:
                by_run[e["run"]].append(e)
            for name, run_events in by_run.items():
                if name in self.set_aside:
                    continue
                with self._isolated(name):
                    self.views[name].add(run_events, tail.name, tail.fmt)
                    self._dirty.add(name)
            if then is not None:
                then(batch)

        return emit

    def _bring_views_up_to_date(self, conn: Connection, batch: Batch) -> None:
        """Before a batch is stored: each run it names has a view matching the store (another writer may have saved)."""
        for name in batch.runs():
            if name in self.set_aside:
                continue
            run_id = self.ingestor.run_id(conn, name)
            view = self.views.get(name)
            if view is not None and view.run_id == run_id and (
                    name in self._current or not self.save_views
                    or (stored_runs.saved_generation(conn, run_id) or 0) == view.generation):
                self._current.add(name)
                continue
            self._load(conn, name, run_id)
            self._current.add(name)

    def _load(self, conn: Connection, name: str, run_id: int) -> RunView | None:
        """The run's view from the store; None where the run is (or now gets) set aside."""
        why = setaside.reason(conn, run_id, self.reads.version)
        if why is not None:
            self.views.pop(name, None)
            self.set_aside[name] = why
            log.warning("run %s stays set aside (not judged; its events are stored): %s", name, why)
            return None
        with self._isolated(name):
            self.views[name] = RunView.load(conn, run_id, name, self.reads)
        return self.views.get(name)

    @contextmanager
    def _isolated(self, name: str) -> Iterator[None]:
        """One run's view work: anything it raises but the store failing sets that run aside instead."""
        try:
            yield
        except SQLAlchemyError:
            raise  # the store failing: the caller rolls back and reads the lines again
        except Exception as exc:  # noqa: BLE001 - one run's bad values or a bug must not stop every run
            why = f"{type(exc).__name__}: {exc}"[:500]
            log.error("run %s set aside: its view failed (%s); it is not judged, its events are stored, every "
                      "other run goes on", name, why, exc_info=bool(os.environ.get("ZERODOCTOR_DEBUG")))
            self.set_aside[name] = why
            self._unmarked.add(name)
            self.views.pop(name, None)
            self._dirty.discard(name)
            self._current.discard(name)

    def commit_views(self, conn: Connection, *, final: bool = False) -> None:
        """Hand finished steps to the folds and save the views, in ``conn``'s transaction (just before it commits)."""
        for name in sorted(self._dirty):
            view = self.views[name]
            # a savepoint: a view that fails half way leaves nothing of its work, the batches' rows stay
            with self._isolated(name), conn.begin_nested():
                view.catch_up(conn)
                view.settle(conn, final=final)
                if self.save_views:  # a scratch store is read once: its chunks need no compacting
                    view.compact(conn)
                    view.save(conn)
        self._dirty.clear()
        self._current.clear()
        self._mark_set_aside(conn)

    def _mark_set_aside(self, conn: Connection) -> None:
        for name in sorted(self._unmarked):
            setaside.mark(conn, self.ingestor.run_id(conn, name), self.reads.version, self.set_aside[name])
        self._unmarked.clear()

    def rolled_back(self) -> None:
        """The transaction failed: views may hold events the store no longer has, so they are read again."""
        for name in self._dirty | self._current:
            self.views.pop(name, None)
        self._dirty.clear()
        self._current.clear()
        self._unmarked.update(self.set_aside)  # marks written in the failed transaction are written again
        self.ingestor.forget_runs()

    def forget_file(self, conn: Connection, file_id: int) -> None:
        """Delete a file's rows; the views of the runs it fed are rebuilt from what remains."""
        run_ids = self.ingestor.forget_file(conn, file_id)
        stored_runs.forget_state(conn, run_ids)  # set-aside marks too: what remains is tried again
        for name in [n for n, v in self.views.items() if v.run_id in run_ids]:
            del self.views[name]
        for name in [n for n in self.set_aside if self.ingestor.run_id(conn, n) in run_ids]:
            del self.set_aside[name]
            self._unmarked.discard(name)

    def ingest(self, inputs: list[tuple[Path, str]], on_progress: Progress | None = None, *,
               jobs: int | None = None) -> list[dict]:
        """Read ``inputs`` to their ends (``diagnose``), a batch from each in turn, and return their file rows.

        Round-robin keeps the ranks of a run in step, so the view merges each step's ranks
        as they arrive instead of holding one rank's whole file for the next. ``jobs``: processes
        that parse large JSONL files ahead (default: one per core; 1: none, all read here).
        """
        tails: list[FileTail] = []
        # worker processes start only if a file is large enough to be parsed ahead
        pool = Pool(jobs) if jobs != 1 else None
        try:
            with self.engine.begin() as conn:
                for path, fmt in inputs:
                    try:
                        tails.append(self.tail(conn, path, fmt, pool=pool))
                    except UnsupportedFormat as exc:
                        raise InputError(f"{path}: {exc}") from None
            total = sum(_size(t.path) for t in tails)
            with _gc_paused():
                busy = list(tails)
                while busy:
                    with self.engine.begin() as conn:
                        busy = [t for t in busy if t.poll(conn, self.ingestor, self.emit_for(t)) == "more"]
                        self.commit_views(conn)
                    if on_progress is not None:
                        on_progress(sum(t.offset for t in tails), total)
                with self.engine.begin() as conn:
                    for t in tails:
                        # A lasting store reads the file again later: a half-written last line waits for then.
                        t.finish(conn, self.ingestor, self.emit_for(t), unterminated=not self.save_views)
                    self.commit_views(conn, final=True)
        finally:
            if pool is not None:
                pool.close()
            for t in tails:
                t.close()
        with self.engine.begin() as conn:
            return [self.ingestor.register_file(conn, t.path, t.fmt) for t in tails]

    # -- judge ----------------------------------------------------------------------

    def view(self, name: str) -> RunView | None:
        """The run's view: the one kept up to date here, else loaded from the store; None for a run set aside."""
        view = self.views.get(name)
        if view is None and name not in self.set_aside:
            with self.engine.begin() as conn:
                view = self._load(conn, name, self.ingestor.run_id(conn, name))
                self._mark_set_aside(conn)
        return view

    def judge(self, name: str, *, now: float | None = None) -> Judgement:
        """Signals and rules for one run; findings are recorded with first/last seen.

        ``now`` is the wall clock of a live judgement (what silence is measured against);
        after the fact it is the run's last event. A run set aside, before or by this
        judgement, is judged to nothing but that (``Judgement.set_aside``).
        """
        judged = None
        with self._isolated(name):
            judged = self._judge(name, now)
        if judged is None:
            with self.engine.begin() as conn:
                self._mark_set_aside(conn)
            return Judgement(name, set_aside=self.set_aside[name])
        return judged

    def _judge(self, name: str, now: float | None) -> Judgement | None:
        view = self.view(name)
        if view is None:
            return None
        with self.engine.connect() as conn:
            view = view.as_of_now(conn)
        view.now = now if now is not None else view.last_t
        values = signals.compute(view, self.modules)
        found, unevaluated = evaluate(self.rules, values, name, view.ranks())
        with self.engine.begin() as conn:
            stored_findings.record(conn, view.run_id, [f.to_json() for f in found], time.time())
        return Judgement(name, found, unevaluated, values, view.config, view.world_size_stated)


    def series(self, name: str) -> RunSeries:
        """What the run's plots draw, downsampled in the store (the view keeps no per-step lists)."""
        with self.engine.connect() as conn:
            return read_series(conn, self.ingestor.run_id(conn, name))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Events are dicts of scalars, so collection finds nothing; pausing it saves ~10% of ingest."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
