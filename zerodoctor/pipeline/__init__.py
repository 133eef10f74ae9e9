"""The pipeline: files → store rows → run views (each read on from its marks); one run → a ``Judgement``.

Shared by ``watch`` (which never stops) and ``diagnose --db`` (which stops at end of file):
both read files through ``FileTail`` and store each batch's rows with the file's offset; a run's
view then reads what its writers stored since its marks (``fold``: in a transaction of its own,
under the run's fold lock), and a run is judged from its view, so a judgement costs what is new,
never the whole run. Of the watchers of many nodes that write one run, only its judge folds it:
the others store their rows and never wait for each other.
``diagnose`` without a store feeds the same views the same batches in memory (``pipeline/memory.py``):
the store is imported here only by the methods that use it, so that path never imports SQLAlchemy.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from zerodoctor import signals
from zerodoctor.rulebook.engine import judge_view
from zerodoctor.rulebook.finding import Judgement
from zerodoctor.rulebook.loader import Rule, rules_from  # noqa: F401 - rules_from: re-exported, its first home
from zerodoctor.signals import plots
from zerodoctor.signals.plots import RunSeries
from zerodoctor.signals.view import Reads, RunView
from zerodoctor.sources.batches import Batch, UnsupportedFormat, detect_format, run_files, source_patterns, strays
from zerodoctor.sources.chrome_trace import traces_in
from zerodoctor.sources.flight_recorder import dumps_in
from zerodoctor.sources.readahead import Pool

if TYPE_CHECKING:  # the store (SQLAlchemy, ~0.3 s to import) only where a store is used: never in diagnose without one
    from sqlalchemy import Connection, Engine

    from zerodoctor.pipeline.tail import FileTail, Polled

Progress = Callable[[int, int], None]  # (bytes read so far, bytes in all) over the inputs
COMMIT_EVENTS = 50_000  # a pass commits the rows it stored at least this often

log = logging.getLogger("zerodoctor.pipeline")


class InputError(ValueError):
    """An input path that cannot be read; the message names it."""


def expand_inputs(paths: list[Path], input_format: str | None = None) -> list[tuple[Path, str]]:
    """Run directories become their files (``sources.run_files``); each file gets its format (detected or forced)."""
    out: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            for stray in strays(path):  # a copy beside a rank's file would count its steps twice
                log.warning("%s: not read: no rank's file (rank-<r>.jsonl, <r> the rank's number; a copy?)", stray)
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
        lasting: the store outlives this command (``watch``, ``diagnose --db``): views are saved
            with the rows and findings recorded with first/last seen. ``False``: a scratch store
            read once, where the views live only in memory and findings go only to the report (the
            tests' stores; ``diagnose`` without ``--db`` keeps no store at all: ``pipeline/memory.py``).
    """

    def __init__(self, engine: Engine, rules: list[Rule], *, modules: list[ModuleType] | None = None,
                 lasting: bool = True) -> None:
        from zerodoctor.store.ingest import Ingestor

        self.engine, self.rules, self.lasting = engine, rules, lasting
        self.modules = modules or signals.signal_modules()
        self.reads = Reads.of(self.modules)
        self.ingestor = Ingestor()
        self.views: dict[str, RunView] = {}
        self._writing: set[str] = set()  # runs this transaction holds ``runs.write_lock`` on
        self._dirty: set[str] = set()  # runs with rows stored here that their views have not read
        self.set_aside: dict[str, str] = {}  # run → why
        self._unmarked: set[str] = set()  # set aside, the mark not yet written in a transaction that committed

    # -- ingest ---------------------------------------------------------------------

    def tail(self, conn: Connection, path: Path, fmt: str, *, pool: Pool | None = None, **quiet_s: float | None
             ) -> FileTail:
        """A tail of ``path`` storing into this pipeline; ``quiet_s`` as ``FileTail`` takes it (its default there)."""
        from zerodoctor.pipeline.tail import FileTail

        return FileTail(conn, path, fmt, pool=pool, **quiet_s)

    def store(self, conn: Connection, tail: FileTail, batch: Batch, raw: Callable[[], bytes]) -> Batch:
        """Store one batch read from ``tail`` (what the tail calls, in ``conn``'s transaction), each run it
        names held for writing first (``runs.write_lock``); their views read the rows at the next ``fold``.
        Returns the batch stored: lines the store refused are kept aside (``Ingestor.add_or_quarantine``)."""
        from zerodoctor.store import runs as stored_runs

        for name in batch.runs() - self._writing:
            stored_runs.write_lock(conn, self.ingestor.run_id(conn, name))
            self._writing.add(name)
        batch = self.ingestor.add_or_quarantine(conn, tail.file_id, batch, tail.name, tail.lines + 1, raw=raw,
                                                unchanged_s=tail.unchanged_s())
        if (batch.events or batch.columns) and (arrived := tail.arrived_t()) is not None:
            self.ingestor.arrived(conn, batch.runs(), arrived)
        self._dirty.update(batch.runs() - self.set_aside.keys())
        return batch

    def commit(self, conn: Connection) -> None:
        """What a storing transaction does last, before its commit: the runs' spans (``Ingestor.widen_spans``)."""
        self.ingestor.widen_spans(conn)
        self._writing.clear()

    def ingest_pass(self, tails: Iterable[FileTail], *, seen: Callable[[FileTail, Batch], None] | None = None,
                    unreadable: Callable[[FileTail, OSError], None] | None = None,
                    stop: threading.Event | None = None, let_go: bool = False) -> dict[FileTail, Polled]:
        """One batch from each tail in turn, stored, committed every ``COMMIT_EVENTS`` events and at the end:
        the pass both commands make (``diagnose`` until no tail has more, then ``finish``; ``watch`` forever).
        The views are not touched: the runs stored are ``fold``ed after, by whoever judges them. A tail whose
        file went quiet lets go of what its parser holds open (``FileTail.poll``); ``let_go``: every tail with
        nothing more does (``watch --once``'s last pass: the files are taken as they stand).

        ``seen`` hears of each batch stored; ``unreadable`` of a file the pass could not read (it
        goes on with the others; without it the error is raised). If the store fails, the pass is
        rolled back (``rolled_back``) and the error is raised: the caller reads the offsets again
        (``resync``) or gives up.
        """
        from sqlalchemy.exc import SQLAlchemyError

        pending = 0

        def store(conn: Connection, tail: FileTail, batch: Batch, raw: Callable[[], bytes]) -> Batch:
            nonlocal pending
            stored = self.store(conn, tail, batch, raw)
            pending += len(stored.events) + stored.step_count() + len(stored.rejected)
            if seen is not None:
                seen(tail, stored)
            return stored

        polled: dict[FileTail, Polled] = {}
        with self.engine.connect() as conn:
            trans = conn.begin()
            try:
                for tail in tails:
                    if stop is not None and stop.is_set():
                        break
                    try:
                        polled[tail] = tail.poll(conn, store)
                        if let_go and polled[tail] == "idle":
                            tail.let_go(conn, store)
                    except OSError as exc:
                        if unreadable is None:
                            raise
                        unreadable(tail, exc)
                        continue
                    if pending >= COMMIT_EVENTS:
                        self.commit(conn)
                        trans.commit()
                        trans, pending = conn.begin(), 0
                self.commit(conn)
                trans.commit()
            except BaseException:
                try:
                    trans.rollback()
                except SQLAlchemyError:
                    pass  # the connection went with the server: nothing was committed
                self.rolled_back()
                raise
        return polled

    def finish(self, tails: Iterable[FileTail], *, unterminated: bool) -> None:
        """The files are complete (``diagnose``): what the passes left, and each parser's held state, stored
        and folded to the end (``unterminated``: an unterminated last line counts too)."""
        with self.engine.begin() as conn:
            for tail in tails:
                tail.finish(conn, self.store, unterminated=unterminated)
            self.commit(conn)
        self.fold(self.stored(), final=True)

    def resync(self, conn: Connection, tails: Iterable[FileTail]) -> None:
        """After a failed pass: the tails' offsets and the views are read again from the store."""
        from zerodoctor.store import files as stored_files

        tails = list(tails)
        self.rolled_back()
        rows = stored_files.rows(conn, [tail.file_id for tail in tails])
        for tail in tails:
            tail.resync(rows[tail.file_id])

    def stored(self) -> list[str]:
        """The runs with rows stored here that their views have not read yet."""
        return sorted(self._dirty)

    def fold(self, names: Iterable[str], *, final: bool = False) -> None:
        """Bring these runs' views up to date with the store, each in a transaction of its own under the run's
        fold lock (``runs.fold_lock``, which waits for its writers to commit): the view in memory, or the one
        saved (by another watcher that judged the run before), reads the rows stored since its marks, hands
        each finished step to the folds (all of them when the input ended: ``final``), and is saved; a view
        that found nothing new is left as it was.

        A transaction per run: a fold that holds one run's lock never waits for another's. A store that
        fails drops the view (it may hold what the store did not keep): the next fold loads it again."""
        from sqlalchemy.exc import SQLAlchemyError

        from zerodoctor.store import runs as stored_runs

        for name in names:
            self._dirty.discard(name)
            if name in self.set_aside:
                continue
            try:
                with self.engine.begin() as conn:
                    run_id = self.ingestor.run_id(conn, name)
                    view = self.views.get(name)
                    if view is not None and view.exact and view.run_id == run_id:
                        saved = stored_runs.saved_generation(conn, run_id)  # under the fold lock
                        if self.lasting and (saved or 0) != view.generation:
                            view = None  # another watcher judged the run and saved it since: read on from its save
                    else:
                        view = None
                    loaded = view is None
                    if loaded:
                        view = self._load(conn, name, run_id)
                    with self._isolated(name):
                        if view is not None:  # a savepoint: a view that fails half way leaves nothing of its work
                            with conn.begin_nested():
                                if view.catch_up(conn) or loaded or final:
                                    view.settle(conn, final=final)
                                    if self.lasting:  # a scratch store is read once: its chunks need no compacting
                                        view.compact(conn)
                                        view.save(conn)
                    self._mark_set_aside(conn)
            except SQLAlchemyError:
                self.views.pop(name, None)
                self._dirty.add(name)
                self.ingestor.forget_runs()
                raise

    def _load(self, conn: Connection, name: str, run_id: int, *, to_write: bool = True) -> RunView | None:
        """The run's view from the store (``RunView.load``); None where the run is (or now gets) set aside."""
        from zerodoctor.store import setaside

        why = setaside.reason(conn, run_id, self.reads.version)
        if why is not None:
            self.views.pop(name, None)
            self.set_aside[name] = why
            log.warning("run %s stays set aside (not judged; its events are stored): %s", name, why)
            return None
        with self._isolated(name):
            self.views[name] = RunView.load(conn, run_id, name, self.reads, to_write=to_write)
        return self.views.get(name)

    @contextmanager
    def _isolated(self, name: str) -> Iterator[None]:
        """One run's view work: anything it raises but the store failing sets that run aside instead."""
        from sqlalchemy.exc import SQLAlchemyError

        try:
            yield
        except SQLAlchemyError:
            raise  # the store failing: the caller rolls back and reads the lines again
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"[:500]
            log.error("run %s set aside: its view failed (%s); it is not judged, its events are stored, every "
                      "other run goes on", name, why, exc_info=bool(os.environ.get("ZERODOCTOR_DEBUG")))
            self.set_aside[name] = why
            self._unmarked.add(name)
            self.views.pop(name, None)
            self._dirty.discard(name)

    def _mark_set_aside(self, conn: Connection) -> None:
        from zerodoctor.store import setaside

        for name in sorted(self._unmarked):
            setaside.mark(conn, self.ingestor.run_id(conn, name), self.reads.version, self.set_aside[name])
        self._unmarked.clear()

    def rolled_back(self) -> None:
        """The storing transaction failed: what it stored is gone (the views read only what commits)."""
        self._writing.clear()
        self._unmarked.update(self.set_aside)  # marks written in the failed transaction are written again
        self.ingestor.forget_runs()
        self.ingestor.drop_spans()

    def forget_file(self, conn: Connection, file_id: int) -> None:
        """Delete a file's rows; the views of the runs it fed are rebuilt from what remains."""
        from zerodoctor.store import runs as stored_runs

        run_ids = self.ingestor.forget_file(conn, file_id)
        stored_runs.forget_state(conn, run_ids)  # set-aside marks too: what remains is tried again
        for name in [n for n, v in self.views.items() if v.run_id in run_ids]:
            del self.views[name]
        for name in [n for n in self.set_aside if self.ingestor.run_id(conn, n) in run_ids]:
            del self.set_aside[name]
            self._unmarked.discard(name)

    def ingest(self, inputs: list[tuple[Path, str]], on_progress: Progress | None = None, *,
               jobs: int | None = None) -> list[dict]:
        """Read ``inputs`` to their ends (``diagnose``): passes until no file has more, then ``finish``;
        returns their file rows.

        A pass takes a batch from each file in turn, which keeps the ranks of a run in step, so the
        view merges each step's ranks as they arrive instead of holding one rank's whole file for
        the next. ``jobs``: processes that parse large JSONL files ahead (default: one per core; 1:
        none, all read here).
        """
        from zerodoctor.store import files as stored_files

        tails: list[FileTail] = []
        # worker processes start only if a file is large enough to be parsed ahead
        pool = Pool(jobs) if jobs != 1 else None
        try:
            with self.engine.begin() as conn:
                for path, fmt in inputs:
                    try:
                        # read to the end, then ``finish``ed: nothing is let go for being quiet before
                        tails.append(self.tail(conn, path, fmt, pool=pool, quiet_s=None))
                    except UnsupportedFormat as exc:
                        raise InputError(f"{path}: {exc}") from None
                    except stored_files.SameFile as exc:  # two inputs naming one file: read once
                        log.warning("%s", exc)
            total = sum(_size(t.path) for t in tails)
            with _gc_paused():
                busy = list(tails)
                while busy:
                    polled = self.ingest_pass(busy)
                    self.fold(self.stored())
                    busy = [t for t in busy if polled[t] == "more"]
                    if on_progress is not None:
                        on_progress(sum(t.offset for t in tails), total)
                # A lasting store reads the file again later: a half-written last line waits for then.
                self.finish(tails, unterminated=not self.lasting)
        finally:
            if pool is not None:
                pool.close()
            for t in tails:
                t.close()
        with self.engine.connect() as conn:
            rows = stored_files.rows(conn, [t.file_id for t in tails])
        return [rows[t.file_id] for t in tails]

    def release(self, names: Iterable[str]) -> None:
        """Drop these runs' views from memory, between transactions: their state is saved with their rows,
        and the next batch or judgement of one loads it again. A daemon that has seen thousands of runs
        keeps only those still going; a scratch store (``diagnose``) keeps every view, its only copy."""
        if not self.lasting:
            return
        for name in names:
            self.views.pop(name, None)

    # -- judge ----------------------------------------------------------------------

    def grown_elsewhere(self, names: Iterable[str]) -> list[str]:
        """Of ``names``, the runs whose views in memory lag the store: other writers (the ranks of other
        nodes) stored rows past their marks, and the next judgement folds them in. Two lookups of the
        primary keys past a mark each, no lock: a writer's rows not yet committed are seen at its commit."""
        from zerodoctor.store import runs as stored_runs
        from zerodoctor.store import steps as stored_steps

        held = [(name, view) for name in names if (view := self.views.get(name)) is not None and view.held is None]
        if not held:
            return []
        with self.engine.connect() as conn:
            return [name for name, view in held
                    if stored_runs.event_mark(conn, view.run_id, after_id=view.event_mark) is not None
                    or stored_steps.chunk_past(conn, view.run_id, view.mark)]

    def view(self, name: str) -> RunView | None:
        """The run's view: the one kept up to date here, else loaded from the store; None for a run set aside."""
        view = self.views.get(name)
        if view is None and name not in self.set_aside:
            with self.engine.begin() as conn:
                view = self._load(conn, name, self.ingestor.run_id(conn, name), to_write=False)
                self._mark_set_aside(conn)
        return view

    def judge(self, name: str, *, now: float | None = None, quiet: dict[int, float] | None = None) -> Judgement:
        """Signals and rules for one run; in a lasting store, findings are recorded with first/last seen.

        ``now`` is the wall clock of a live judgement (what silence is measured against);
        after the fact it is the run's last event. ``quiet``: live, per rank with a file of its
        own, seconds since that file changed (``RunView.now_of``). A run set aside, before or by
        this judgement, is judged to nothing but that (``Judgement.set_aside``).
        """
        judged = None
        with self._isolated(name):
            judged = self._judge(name, now, quiet or {})
        if judged is None:
            with self.engine.begin() as conn:
                self._mark_set_aside(conn)
            return Judgement(name, set_aside=self.set_aside[name])
        return judged

    def _judge(self, name: str, now: float | None, quiet: dict[int, float]) -> Judgement | None:
        self.fold([name])  # whoever judges a run folds it: what every writer stored is read
        view = self.view(name)
        if view is None:
            return None
        with self.engine.connect() as conn:
            view.fold_again(conn, judged=True)  # after an upgrade that changed a signal module's fold: once
            view = view.as_of_now(conn)
        view.now = now if now is not None else view.last_t
        view.quiet = quiet
        found, unevaluated, values = judge_view(self.rules, view, self.modules)
        if self.lasting:
            from zerodoctor.store import findings as stored_findings

            with self.engine.begin() as conn:
                stored_findings.record(conn, view.run_id, [f.to_json() for f in found], time.time())
        return Judgement(name, found, unevaluated, values, view.config, view.world_size_stated, rules=len(self.rules))

    def series(self, name: str) -> RunSeries:
        """What the run's plots draw, as its view keeps it (``signals/plots.py``): a page costs the same
        at any run length (after a restart, the first page folds the run's steps again, once)."""
        view = self.view(name)
        if view is not None and view.behind:
            with self.engine.connect() as conn:
                view.fold_again(conn)
        return plots.series(view)


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
