"""Watch: directories of runs → store, rules judged as events arrive, each new finding announced once
(again when it changes materially), each run said when first seen and when it ends.

watchdog's observer (inotify, or polling for network filesystems) only wakes the loop;
what to read is decided by the stored offsets, and a periodic pass over every file and
directory makes a missed or coalesced event harmless. One thread does all the writing,
so SQLite sees a single writer; readers (``status``, ``diagnose``) use WAL snapshots.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import signal
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)

from zerodoctor.pipeline import Pipeline
from zerodoctor.rulebook.finding import Finding, Judgement
from zerodoctor.rulebook.loader import Rule
from zerodoctor.sources.batches import Batch, run_files, source_patterns
from zerodoctor.sources.names import WRAPPER_EVENTS, rank_of
from zerodoctor.sources.readable import UnreadableFile
from zerodoctor.store import files as stored_files
from zerodoctor.store import findings as stored_findings
from zerodoctor.store.db import StoreError, describe, shown
from zerodoctor.store.nodes import local_node
from zerodoctor.watch import budget, changes
from zerodoctor.watch.budget import Interrupts, Stopping
from zerodoctor.watch.lock import WriterLock, busy_dir
from zerodoctor.watch.notify import Deliveries, Notifier
from zerodoctor.pipeline.tail import FileTail

if TYPE_CHECKING:  # prometheus_client is an optional extra: imported only by ``watch --metrics``
    from zerodoctor.watch.metrics import LiveMetrics

log = logging.getLogger("zerodoctor.watch")


_WAKING = [FileModifiedEvent, FileCreatedEvent, FileMovedEvent, FileDeletedEvent,
           DirCreatedEvent, DirMovedEvent, DirDeletedEvent]
STORE_RETRY_S = (0.5, 30.0)  # the first wait for a store that went away, and the longest (doubling between)
NOTIFY_JOIN_S = 60.0  # a webhook's retries take ~23.5 s at most; a stuck notifier is left behind
VIEWS_KEPT = 256  # run views held in memory; runs still going are always kept, the rest reload from the store
STOP_JOIN_S = 5.0  # once stopped by a signal: a send in flight stays pending (delivered at least once)

# (finding, its run's config, None the first time, else what it said before: ``watch/changes.py``)
Announce = Callable[[Finding, dict, "str | None"], None]
_Stamp = tuple[int | None, ...]


class Watcher:
    """Tails every run directory under ``roots`` into ``engine`` and judges the runs that changed.

    Args:
        on_judged: called with every ``Judgement`` (``watch --html`` keeps its pages from them).
        judge_every_s: least time between two judgements of one run; stretched to four
            times the last judgement's cost, so a large run never spends most of the loop
            being judged.
        tick_s: the periodic pass over every tailed file, wake-up or not.
        rescan_s: the periodic look for new run directories and files.
        recheck_s: how often a run still in progress is judged again with no new events: a
            rank that hangs, or dies, writes nothing, and silence is what the hang rules judge.
        judge_budget_s: the most one judgement of one run may take (default ``budget.JUDGE_BUDGET_S``);
            past it the run is set aside with that reason and every other run goes on (``watch/budget.py``).
        metrics: fed what each pass stores and each judgement finds, and published after a look
            (``watch --metrics``: ``watch/metrics.py``).
    """

    def __init__(self, engine: Engine, roots: list[Path], rules: list[Rule], announce: Announce, *,
                 notifiers: list[Notifier] | None = None, on_judged: Callable[[Judgement], None] | None = None,
                 judge_every_s: float = 0.2, tick_s: float = 1.0,
                 rescan_s: float = 5.0, notify_retry_s: float = 30.0, lock: WriterLock | None = None,
                 recheck_s: float = 2.0, judge_budget_s: float | None = None,
                 metrics: LiveMetrics | None = None) -> None:
        self.engine, self.roots, self.rules, self.announce = engine, roots, rules, announce
        self.judge_budget_s = budget.JUDGE_BUDGET_S if judge_budget_s is None else judge_budget_s
        self.on_judged = on_judged
        self.metrics = metrics
        self.lock = lock
        self._scanned = False
        self._refused: dict[Path, str] = {}  # run directories another watcher writes, and who
        self.judge_every_s, self.tick_s, self.rescan_s, self.recheck_s = judge_every_s, tick_s, rescan_s, recheck_s
        self.pipeline = Pipeline(engine, rules)
        self.tails: dict[Path, FileTail] = {}
        self.skipped: dict[Path, tuple[str, _Stamp]] = {}  # files found but not read: why, and what the path was
        self.linked: dict[Path, Path] = {}  # second names of files read at another path (hard links): that path
        self.stop = threading.Event()
        self.deliveries = Deliveries(engine, notifiers or [], self.stop, notify_retry_s)
        self.wake = threading.Event()
        self.interrupts = Interrupts(self.stop, self.wake)
        self.rescan = threading.Event()
        self._changed: set[str] = set()  # runs with events not judged yet
        self._judged_at: dict[str, float] = {}
        self._interval: dict[str, float] = {}
        self._in_progress: set[str] = set()  # runs whose ranks send heartbeats and have not all ended
        self._run_states: dict[str, str] = {}  # what this watch last said of each run (``watch/changes.py``)
        self._files_of: dict[str, set[Path]] = {}  # run → the files its events came from (``_clocks_for``)
        self._others: dict[str, float] = {}  # runs another watcher judges (``lock.judges``) → when last asked
        self._grown_read_at = 0.0  # when the runs judged here were last looked at for other watchers' rows
        self._write_failures = 0  # store writes refused in a row (a full disk): the next pass waits, doubling
        self._write_retry_at = 0.0

    # -- one pass -------------------------------------------------------------------

    def discover(self) -> None:
        """Start tailing run files that appeared under the roots (a root may itself be a run directory).

        Files are keyed by their resolved path, so a run directory reachable twice (a symlink
        alias, ``DIR DIR/../DIR``) is read once. A file that cannot be read (a FIFO, a symlink
        loop, binary data, no permission) is reported once and counted in ``skipped``, and
        tried again only once its path has changed (``_stamp``). A second name of a file read at another
        path (a hard link, ``cp -al``) is said once and not read (``stored_files.SameFile``); it is tried
        again once that path is no longer tailed (deleted, moved out), and then takes the file's row.
        """
        run_dirs = {d.resolve(): None for root in self.roots for d in (root, *sorted(root.glob("*/")))}
        by_path = {_resolved(path, d): fmt for d in run_dirs for path, fmt in run_files(d)}
        found = sorted(by_path.items())
        # a directory's source: rank files or console (the wrapper's own events are read beside either)
        formats = {path.parent: fmt for path, fmt in found if path.name != WRAPPER_EVENTS}
        self.skipped = {path: skip for path, skip in self.skipped.items() if path in by_path}
        self.linked = {path: other for path, other in self.linked.items() if path in by_path}
        for path, tail in list(self.tails.items()):
            if path.name != WRAPPER_EVENTS and formats.get(path.parent, tail.fmt) != tail.fmt:
                tail.close()
                del self.tails[path]
        unchanged = {path for path, (_, stamp) in self.skipped.items() if _stamp(path) == stamp}
        fresh = self._claimed([(path, fmt) for path, fmt in found if path not in self.tails and path not in unchanged
                              and self.linked.get(path) not in self.tails])
        if not fresh:
            return
        started: dict[Path, None] = {}
        # file id → the path tailing it: one look-up per new tail, not a scan of all (at 4,096 ranks the scans
        # were 20 s of a fresh --once)
        tailing = {tail.file_id: path for path, tail in self.tails.items()}
        with self.engine.begin() as conn:
            self._forget_replaced_sources(conn, formats)
            queue, again = list(fresh), set()
            while queue:
                path, fmt = queue.pop(0)
                stamp = _stamp(path)  # before the try: a change during it is seen at the next rescan
                try:
                    self.tails[path] = self.pipeline.tail(conn, path, fmt)
                except FileNotFoundError:
                    continue  # gone between the scan and now; a later scan sees what replaces it
                except stored_files.SameFile as exc:
                    if self.linked.get(path) != Path(exc.other):
                        log.info("%s", exc)
                    self.linked[path] = Path(exc.other)
                    continue
                except OSError as exc:
                    self._skip(path, exc, stamp)
                    continue
                self.skipped.pop(path, None)
                started[path] = None
                other = tailing.get(self.tails[path].file_id)  # a moved file: its old path's tail is this one now
                tailing[self.tails[path].file_id] = path
                if other is not None and other != path and other in self.tails:
                    self.tails.pop(other).close()
                    if other in by_path and other not in again:
                        # A new file at the old path (a run directory renamed, one made with its old name):
                        # tailed in this pass too, or ``--once`` never reads it.
                        queue.append((other, by_path[other]))
                        again.add(other)
        by_dir: dict[Path, list[str]] = {}
        for path in started:
            by_dir.setdefault(path.parent, []).append(path.name)
        for run_dir, names in sorted(by_dir.items()):
            log.info("tailing %s: %s", run_dir, _listed(names))

    def _skip(self, path: Path, exc: OSError, stamp: _Stamp) -> None:
        why = str(exc) if isinstance(exc, UnreadableFile) else f"{path}: cannot open: {exc.strerror or exc}"
        if self.skipped.get(path, ("",))[0] != why:  # once, not at every change of a file that stays unreadable
            log.error("%s; skipped", why)
        self.skipped[path] = why, stamp

    def _claimed(self, fresh: list[tuple[Path, str]]) -> list[tuple[Path, str]]:
        """The files of run directories this watcher may write (``lock``). A directory another watcher
        holds at start is an error (exit 2); one it takes later is skipped, and claimed once it is free."""
        first, self._scanned = not self._scanned, True
        if self.lock is None:
            return fresh
        if self.lock.check():  # taken again after the store's connection was lost
            self._recover()
        refused = {d: who for d in sorted({path.parent for path, _ in fresh}) if (who := self.lock.claim(d))}
        if refused and first:
            run_dir, holder = next(iter(refused.items()))
            raise busy_dir(run_dir, holder, shown(self.engine.url))
        for run_dir, holder in refused.items():
            if self._refused.get(run_dir) != holder:
                log.warning("%s: %s is writing it into this store; skipped while it does", run_dir, holder)
        self._refused = refused
        return [(path, fmt) for path, fmt in fresh if path.parent not in refused]

    def _forget_replaced_sources(self, conn, formats: dict[Path, str]) -> None:  # noqa: ANN001 - Connection
        """Rank files appeared beside the console.log read so far (now or before a restart): they
        carry the same steps, so the log's stored rows go, or the run would count each twice and
        hold what ``diagnose`` on the directory never reads."""
        formats = {run_dir.resolve(): fmt for run_dir, fmt in formats.items()}  # stored paths are resolved
        for file_id, name, fmt in stored_files.sources_here(conn):
            path = Path(name)
            if formats.get(path.parent, fmt) != fmt:
                log.info("%s: now reading the %s files of this run instead; its stored events are dropped",
                         path, formats[path.parent])
                self.pipeline.forget_file(conn, file_id)

    def ingest(self, *, let_go: bool = False) -> bool:
        """One pass over every tailed file (``Pipeline.ingest_pass``, ``let_go`` passed on); True when some file
        has more lines waiting."""
        if time.monotonic() < self._write_retry_at:  # the store refused the last pass's writes: not yet
            return False
        if self.lock is not None and self.lock.check():  # not one write on a lock the store dropped
            self._recover()

        def seen(tail: FileTail, batch: Batch) -> None:
            runs = batch.runs()
            self._changed.update(runs)
            for name in runs:
                self._files_of.setdefault(name, set()).add(tail.path)
            if self.metrics is not None:
                self.metrics.stored(tail.path, batch)

        def unreadable(tail: FileTail, exc: OSError) -> None:
            log.error("%s: %s", tail.path, exc)

        try:
            polled = self.pipeline.ingest_pass(list(self.tails.values()), seen=seen, unreadable=unreadable,
                                               stop=self.stop, let_go=let_go)
        except Exception as exc:
            # A batch refused for its content is quarantined by the tail; what is left is the
            # store failing (or a bug): nothing of the pass is kept, its lines are read again.
            if self._store_away(exc):
                raise  # the loop waits for the store, then reads the offsets again (``_recover``)
            self._write_failed(exc)
            with self.engine.connect() as conn:
                self._resync(conn)
            return False
        if self._write_failures:
            log.warning("the store takes writes again after %d refused passes; nothing read was lost",
                        self._write_failures)
            self._write_failures, self._write_retry_at = 0, 0.0
        if self.metrics is not None:
            self.metrics.passed()
        for path, tail in list(self.tails.items()):
            if polled.get(tail) == "gone":
                tail.close()
                del self.tails[path]
        return "more" in polled.values()

    def _write_failed(self, exc: Exception) -> None:
        """A pass whose writes the store refused (a full disk, a read-only file) waits before the next one,
        doubling from ``STORE_RETRY_S``: every append wakes the loop, and a full disk under 64 writers
        logged this 263 times in 10 s, each pass reading the same lines again for nothing."""
        self._write_failures += 1
        first, longest = STORE_RETRY_S
        wait = min(first * 2 ** (self._write_failures - 1), longest)
        self._write_retry_at = time.monotonic() + wait
        log.error("store write failed (%d in a row), will read those lines again in %g s: %s", self._write_failures,
                  wait, describe(exc, self.engine.url), exc_info=not isinstance(exc, SQLAlchemyError))

    def judge(self, *, force: bool = False) -> float | None:
        """Judge the changed runs that are due; return seconds until the next one is (None: none waits)."""
        now = time.monotonic()
        wait = None
        self._changed.update(n for n in self._in_progress if now - self._judged_at.get(n, -1e9) >= self.recheck_s)
        # a run another watcher judges is asked for again now and then: that watcher may have died
        self._changed.update(n for n, asked in self._others.items() if now - asked >= self.recheck_s)
        self._changed.update(self._grown_elsewhere(now))
        if self.lock is not None and self.lock.judging:  # other nodes' ranks arrive without waking this loop
            wait = self.judge_every_s
        for name in sorted(self._changed):
            due = self._judged_at.get(name, -1e9) + self._interval.get(name, 0.0)
            if not force and due > now:
                wait = min(wait or float("inf"), due - now)
                continue
            self._changed.discard(name)
            cost = budget.Cost()
            try:
                if not self._judges(name, now):
                    continue
                # what every writer stored since, read first (the run's clock is its last event, maybe another
                # node's): ingest's work, which waiting would only make larger, so not what the interval stretches for
                self.pipeline.fold([name])
                cost = budget.Cost()
                self._judge_run(name)
            except Exception as exc:
                if self._store_away(exc):
                    self._changed.add(name)  # judged once the store is back
                    raise
                log.error("judging run %s failed; it is judged again when its next events arrive: %s", name,
                          describe(exc, self.engine.url), exc_info=not isinstance(exc, SQLAlchemyError))
            self._judged_at[name] = time.monotonic()
            self._interval[name] = max(self.judge_every_s, 4 * cost.seconds())
            if self.stop.is_set():
                break
        self._release_views()
        return wait

    def _judges(self, name: str, now: float) -> bool:
        """Whether this watcher judges the run: the store's only writer judges them all; of the watchers of
        the nodes of one job, one judges each run for all (``lock.judges``), so a run is judged once per
        pass, not once per node, and its findings said once. The others ask again every ``recheck_s``."""
        if self.lock is None:
            return True
        asked = self._others.get(name)
        if asked is not None and now - asked < self.recheck_s:
            return False
        if self.lock.judges(name):
            self._others.pop(name, None)
            return True
        if name not in self._others:  # said once: a look (``--once``) that judges nothing here says who does
            log.info("run %s is judged by another watcher (%s), which holds its judge lock: it says the run's "
                     "findings, and 'zerodoctor status' shows them from the store", name,
                     self.lock.judge_of(name) or "one that just let go")
        self._others[name] = now
        return False

    def _grown_elsewhere(self, now: float) -> list[str]:
        """The runs judged here that other watchers stored rows of since they were folded (looked at most every
        ``judge_every_s``): the ranks of other nodes arrived, and the run is judged again with them."""
        judging = self.lock.judging if self.lock is not None else set()
        if not judging or now - self._grown_read_at < self.judge_every_s:
            return []
        self._grown_read_at = now
        return self.pipeline.grown_elsewhere(judging)

    def _release_views(self) -> None:
        """Past ``VIEWS_KEPT`` views in memory, drop those of the runs judged longest ago that are neither
        going (``in_progress``) nor waiting to be judged: a watch that has seen thousands of runs held
        every view (about 20 MiB per 1,000 runs); one dropped is loaded again from the store if its run
        writes again."""
        views = self.pipeline.views
        if len(views) <= VIEWS_KEPT:
            return
        idle = sorted((n for n in views if n not in self._in_progress and n not in self._changed),
                      key=lambda n: self._judged_at.get(n, 0.0))[:len(views) - VIEWS_KEPT]
        self.pipeline.release(idle)
        for name in idle:
            self._others.pop(name, None)
        if self.lock is not None:
            self.lock.let_go(idle)  # judged again by whichever watcher stores its events next

    def _judge_run(self, name: str) -> None:
        with self.interrupts.judging(f"judging run {name}", self.judge_budget_s):
            now, quiet = self._clocks_for(name)
            judged = self.pipeline.judge(name, now=now, quiet=quiet)
        if judged.set_aside is not None:  # the pipeline said why, once; nothing to announce or to re-check
            self._in_progress.discard(name)
            return
        found, config, run_id = judged.findings, judged.config, self.pipeline.view(name).run_id
        if judged.in_progress:  # judged on the timer too
            self._in_progress.add(name)
        else:
            self._in_progress.discard(name)
        self._say_run(name, judged)
        with self.engine.begin() as conn:
            known = stored_findings.announcements(conn, run_id)
            first, again = {}, {}
            # Announced before the commit: a crash in between repeats an alert rather than losing it.
            for finding in found:
                if finding.rule not in known:
                    continue
                fid, announced, said = known[finding.rule]
                body = finding.to_json()
                if not announced:
                    self.announce(finding, config, None)
                    first[fid] = changes.said_of(body)
                elif said is None:  # announced by a watch that kept no ``said``: recorded, not said again
                    first[fid] = changes.said_of(body)
                elif why := changes.change(said, body):
                    self.announce(finding, config, why)
                    again[fid] = changes.said_of(body)
            stored_findings.mark_said(conn, first)
            stored_findings.mark_said(conn, again, again=True)
        if self.metrics is not None:
            view = self.pipeline.view(name)
            self.metrics.judged(name, found, view.first_start() if view is not None else None)
        if self.on_judged is not None:  # after the announcements: a page that fails costs no finding its line
            try:
                with self.interrupts.judging(f"the page of run {name}", self.judge_budget_s):
                    self.on_judged(judged)
            except Exception as exc:
                log.error("run %s: its page was not written (its findings are announced and stored): %s",
                          name, describe(exc, self.engine.url), exc_info=bool(os.environ.get("ZERODOCTOR_DEBUG")))

    def _say_run(self, name: str, judged: Judgement) -> None:
        """A line when this watch first sees a run, and when its ranks have all ended (or crashed)."""
        state = changes.run_state(judged.values)
        if self._run_states.get(name) != state:
            log.info("%s", changes.run_line(name, state, judged.values))
            self._run_states[name] = state

    def _clocks_for(self, name: str) -> tuple[float, dict[int, float]]:
        """A live judgement's now, on the run's own clock, and how long each rank's own file has been quiet.

        Silence is what the hang rules judge, and the ranks stamp their events with their own clocks:
        ranks 45 s behind the watcher looked 45 s silent more (a real hang hidden for 90 s, every rank
        "gone"). A file's mtime is when its last line arrived, on this host's clock (a local disk's:
        on a network filesystem, the server's), so no two hosts' clocks are ever compared: now is the
        run's last event plus how long ago its files last changed, and a rank with a file of its own
        (``rank-<r>.jsonl``) is quiet for as long as that file has not changed, whatever its clock says
        beside the other ranks' (one node 45 s behind another). The files of other nodes' ranks are
        measured the same way, from the store (``_quiet_elsewhere``).
        """
        now = time.time()
        view = self.pipeline.view(name)  # None: set aside (the judgement says so)
        unchanged: dict[Path, float] = {}
        for path in self._files_of.get(name, ()):
            try:
                unchanged[path] = max(0.0, now - os.stat(path).st_mtime)
            except OSError:
                continue
        if view is None or view.last_t is None:
            return now, {}
        unchanged.update(self._quiet_elsewhere(name, view.formats, set(self._files_of.get(name, ()))))
        if not unchanged:
            return now, {}
        quiet = {rank: quiet_s for path, quiet_s in unchanged.items() if (rank := rank_of(path.name)) is not None}
        return view.last_t + min(unchanged.values()), quiet

    def _quiet_elsewhere(self, name: str, paths: Iterable[str], here: set[Path]) -> dict[Path, float]:
        """How long each of the run's files on other nodes has been unchanged: the store's clock now less when it
        last grew there (``files.grew_at``, stamped by its node on the same clock). Only the files whose
        directory a live watcher holds (``WriterLock.watched``): a dead watcher's ranks may be writing still."""
        if self.lock is None or name not in self.lock.judging:
            return {}  # the store's only writer: every file of the run is this host's
        others = [path for path in paths if Path(path) not in here]
        if not others:
            return {}
        with self.engine.connect() as conn:
            stamped, store_now = stored_files.grown(conn, others), stored_files.store_now(conn)
        node = local_node()
        live = self.lock.watched([(n, path) for n, path, _ in stamped if n != node])
        return {Path(path): max(0.0, store_now - grew_at) for n, path, grew_at in stamped if (n, path) in live}

    def notify(self, *, force: bool = False) -> None:
        """Hand pending findings to the notifiers on their thread; after a failure, wait ``notify_retry_s``."""
        self.deliveries.start(force=force)

    def _resync(self, conn) -> None:  # noqa: ANN001 - SQLAlchemy Connection
        self.pipeline.resync(conn, self.tails.values())  # its views and run ids may hold what a rollback removed

    # -- modes ----------------------------------------------------------------------

    def look(self, *, final: bool = False) -> None:
        """Read every complete line there is now and judge the runs that changed: ``--once``'s one look, and
        each look of ``run``'s live judgement (``resume/live.py``), so both judge as the daemon does.

        ``final``: the files are taken as they stand (``--once``): what a parser holds open for lines
        that may still come (a traceback's message) is stored too, as ``diagnose`` stores it at the end.
        """
        self.discover()
        while self.ingest() and not self.stop.is_set():
            pass
        if final and not self.stop.is_set():
            self.ingest(let_go=True)
        self.judge(force=True)
        self.publish(force=True)

    def publish(self, *, force: bool = False) -> None:
        """Hand ``metrics`` the series of this look (at most once per its ``every_s`` unless ``force``): built
        here, on the one thread that writes, and swapped in whole for the scrapes (``watch/metrics.py``)."""
        if self.metrics is None or not (force or self.metrics.due()):
            return
        offsets = {tail.path: tail.offset if tail.decoded is None else None for tail in self.tails.values()}
        with self.engine.connect() as conn:
            self.metrics.publish(conn, offsets)

    def once(self) -> None:
        """Ingest every complete line there is now, judge what changed, and return."""
        try:
            self.look(final=True)
            self.notify(force=True)
        except Stopping:
            pass  # a judgement abandoned; everything read is committed
        except SQLAlchemyError as exc:
            if not self._store_away(exc):
                raise
            raise StoreError(f"the store went away: {describe(exc, self.engine.url)}; nothing read was lost, "
                             "run it again") from None
        finally:
            self.close()

    def serve(self, *, polling: bool = False, every_tick: Callable[[], None] | None = None) -> None:
        """Run until ``stop`` is set (SIGINT/SIGTERM via ``stop_on_signals``); every commit is whole.

        ``every_tick`` (a live display) is called after a pass, at most once per ``tick_s``.
        """
        if polling:
            from watchdog.observers.polling import PollingObserver as ObserverClass
        else:
            from watchdog.observers import Observer as ObserverClass
        observer = ObserverClass()
        handler = _Wakeup(self)
        for root in self.roots:
            observer.schedule(handler, str(root), recursive=True, event_filter=_WAKING)
        observer.start()
        log.info("watching %s (%s)", ", ".join(map(str, self.roots)), type(observer).__name__)
        next_scan = next_tick = 0.0
        try:
            while not self.stop.is_set():
                self.wake.clear()
                try:
                    if self.rescan.is_set() or time.monotonic() >= next_scan:
                        self.rescan.clear()
                        self.discover()
                        next_scan = time.monotonic() + self.rescan_s
                    if self.ingest():
                        self.wake.set()
                    wait = self.judge()
                    self.notify()
                    self.publish()
                    if every_tick is not None and time.monotonic() >= next_tick:
                        every_tick()
                        next_tick = time.monotonic() + self.tick_s
                except SQLAlchemyError as exc:
                    if not self._store_away(exc):
                        raise
                    self._wait_for_store(exc)
                    next_scan = 0.0  # the locks are checked (taken again) at once
                    continue
                self.wake.wait(min(self.tick_s, wait if wait is not None else self.tick_s))
        except Stopping:
            pass  # a judgement abandoned; everything read is committed
        finally:
            observer.stop()
            observer.join(timeout=5)
            self.close()
        log.info("stopped; everything read is committed")

    def _store_away(self, exc: BaseException) -> bool:
        """The store's server went away (a PostgreSQL restart, a network cut), as opposed to refusing
        a write or a bug: waited for with backoff, never the end of the watch."""
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return True
        return self.engine.dialect.name == "postgresql" and isinstance(exc, (OperationalError, InterfaceError))

    def _wait_for_store(self, exc: SQLAlchemyError) -> None:
        """Back off (doubling, ``STORE_RETRY_S``) until the store answers again, or a stop signal.

        Nothing is lost meanwhile: the offsets move only with the rows they cover, and the files
        keep growing on disk. Once the store answers, the locks are taken again and what this
        watcher holds in memory is read again from the store (``_recover``), at the loop's next
        look; an outage that outlives it is waited for again.
        """
        wait, longest = STORE_RETRY_S
        away = time.monotonic()
        log.warning("the store is unreachable (%s); retrying, every %g s at first, up to every %g s; nothing "
                    "read is lost", describe(exc, self.engine.url), wait, longest)
        self.pipeline.rolled_back()
        while not self.stop.wait(wait):
            try:
                with self.engine.connect() as conn:
                    self._resync(conn)
            except SQLAlchemyError as again:
                if not self._store_away(again):
                    raise
                wait = min(2 * wait, longest)
                continue
            log.warning("the store answers again after %.0f s; reading on", time.monotonic() - away)
            return

    def _recover(self) -> None:
        """The locks were taken again after the store went away: another watcher may have written
        these directories meanwhile, so every offset and view is read again from the store."""
        log.warning("took this watcher's run directories again after the store's connection was lost; "
                    "reading their offsets again from the store")
        with self.engine.connect() as conn:
            self._resync(conn)

    def close(self) -> None:
        self.deliveries.join(timeout=STOP_JOIN_S if self.stop.is_set() else NOTIFY_JOIN_S)
        for tail in self.tails.values():
            tail.close()
        self.tails.clear()


def _stamp(path: Path) -> _Stamp:
    """What a skipped path is now: a change of type, content, mode or owner (ctime) makes it worth a new try."""
    try:
        st = os.stat(path)
    except OSError as exc:  # a symlink loop, a directory it cannot search…: the link itself, and why
        try:
            st = os.lstat(path)
        except OSError:
            return (exc.errno,)
        return (exc.errno, st.st_dev, st.st_ino, st.st_mode, st.st_mtime_ns, st.st_ctime_ns)
    return (None, st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _listed(names: list[str], most: int = 8) -> str:
    """File names for one log line, rank files in rank order (rank-2 before rank-10); past ``most``, the count,
    the first few and the last: a 4,096-rank run directory is one readable line, not 80 KB of names."""
    ordered = sorted(names, key=lambda name: (rank_of(name) is None, rank_of(name) or 0, name))
    if len(ordered) <= most:
        return ", ".join(ordered)
    return f"{len(ordered):,} files: {', '.join(ordered[:3])} … {ordered[-1]}"


def _resolved(path: Path, within: Path) -> Path:
    """The path's real location; a symlink loop keeps its own name (and is skipped as unreadable). A file right in
    ``within`` (a resolved directory) that is no symlink is there already: one ``lstat``, where resolving walks
    every component, at every rescan, for each of a 4,096-rank run's files."""
    try:
        if path.parent == within and not stat.S_ISLNK(os.lstat(path).st_mode):
            return path
        return path.resolve(strict=True)
    except (OSError, RuntimeError):  # RuntimeError: Python before 3.13 reports a loop so
        return path.absolute()


class _Wakeup(FileSystemEventHandler):
    """Turns filesystem events into wake-ups; only run files and directories matter."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher
        self.patterns = [pattern for pattern, _ in source_patterns()]  # once: events come by the thousand

    def on_any_event(self, event: FileSystemEvent) -> None:
        paths = [event.src_path, getattr(event, "dest_path", "")]
        names = [str(p).rsplit("/", 1)[-1] for p in paths if p]
        if not event.is_directory and not any(fnmatch.fnmatchcase(n, pat) for n in names for pat in self.patterns):
            return
        if event.is_directory or event.event_type != "modified":
            self.watcher.rescan.set()
        self.watcher.wake.set()


def stop_on_signals(watcher: Watcher) -> None:
    """SIGINT and SIGTERM end the loop after the transaction in flight commits, or abandon a judgement."""

    def _stop(signum: int, frame: object) -> None:
        log.info("%s received; finishing the current pass", signal.Signals(signum).name)
        watcher.interrupts.stop_signal(signum, frame)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)
