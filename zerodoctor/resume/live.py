"""Fix and resume, live: while an attempt runs, its run directory judged as ``watch`` judges it → the job stopped
as soon as a fault the policy covers shows, instead of when (or if) it exits.

Some faults never end the job: a static loss scale that skips every step exits 0 after hours of
training on nothing (ZD203); a hang waits until someone notices. Every ``EVERY_S`` the attempt's
directory gets one look of the watcher over it (``Watcher.look``, a store in the attempt's directory keeping
its offsets): the same discovery (rank files that appear beside the console log read so far replace it), the
same tails (a traceback held open is let go once its file is quiet), the same clocks (now is the run's last
event plus how long its files have been quiet, each rank's silence its own file's), so a live stop and
``watch`` or ``diagnose`` cannot judge the run apart. The first error finding the caller wants (the policy
covers it, and a fix is left to try) stops the job the way launchers expect: SIGTERM to its process group,
SIGKILL after ``GRACE_S``, each time to its ranks too (``launch/processes.py``: torchrun's ranks run in sessions
of their own). The loop then judges the ended attempt like any other, with this finding first. A failure here
only switches it off.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from zerodoctor.launch.processes import signal_job
from zerodoctor.rulebook.finding import Finding, Judgement

if TYPE_CHECKING:
    from zerodoctor.watch.daemon import Watcher

EVERY_S = 5.0
GRACE_S = 30.0
POLL_S = 0.2  # how often a stopping job is looked at
KILLED_S = 10.0  # how long SIGKILLed processes may take to go (one in uninterruptible sleep may not)
JUDGE_DB = ".live-judgement.db"  # in the attempt's directory, removed when the attempt ends


class LiveJudge:
    def __init__(self, directory: Path, run_id: str, wants: Callable[[Finding], bool],
                 say: Callable[[str], None], every_s: float = EVERY_S, grace_s: float = GRACE_S) -> None:
        self.directory, self.run_id, self.wants, self.say = directory, run_id, wants, say
        self.every_s, self.grace_s = every_s, grace_s
        self.finding: Finding | None = None  # what stopped the job
        self._pgid: int | None = None
        self._done = threading.Event()
        self._watcher: Watcher | None = None
        self._judged: list[Judgement] = []  # what the look in progress judged
        self._thread = threading.Thread(target=self._run, name="zerodoctor-live-judge", daemon=True)

    def started(self, pgid: int) -> None:
        """The job runs (its process group is ``pgid``): start judging it."""
        self._pgid = pgid
        self._thread.start()

    def stop(self) -> None:
        """The job ended: stop judging, and drop the store."""
        self._done.set()
        if self._watcher is not None:
            self._watcher.stop.set()  # a pass in flight ends after the file it reads
        if self._thread.is_alive():
            self._thread.join(timeout=60)  # a look in progress finishes its transaction
        if not self._thread.is_alive():
            self._close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.directory / JUDGE_DB}{suffix}").unlink(missing_ok=True)

    def look(self) -> Finding | None:
        """One look at the attempt's directory (``Watcher.look``): the first finding of its run the caller wants."""
        if self._watcher is None:
            from zerodoctor.pipeline import rules_from
            from zerodoctor.store.db import open_engine
            from zerodoctor.watch.daemon import Watcher

            engine = open_engine(self.directory / JUDGE_DB, scratch=True)
            self._watcher = Watcher(engine, [self.directory], rules_from(None), _unsaid, on_judged=self._judged.append)
        self._judged.clear()
        self._watcher.look()
        return next((f for j in self._judged if j.run == self.run_id for f in j.findings if self.wants(f)), None)

    def _run(self) -> None:
        try:
            while not self._done.wait(self.every_s):
                hit = self.look()
                if hit is not None:
                    self.finding = hit
                    self._terminate(hit)
                    return
        except Exception as exc:  # noqa: BLE001 - the job goes on as without the live judgement
            self.say(f"live judgement of {self.run_id} switched off: {type(exc).__name__}: {exc}")
        finally:
            self._close()

    def _close(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.close()
            watcher.engine.dispose()

    def _terminate(self, finding: Finding) -> None:
        """SIGTERM to the job, SIGKILL to whatever of it is left after ``grace_s``: the launcher's group and its
        ranks alike, since a launcher that exits on SIGTERM (or dies by SIGKILL) may leave its ranks running."""
        self.say(f"{finding.rule} {finding.name} while the job runs: stopping it (SIGTERM, SIGKILL after "
                 f"{self.grace_s:g} s)")
        if not signal_job(self._pgid, self.directory, signal.SIGTERM):
            return  # already ended
        # then until none of it is left (signal 0 only asks), so that no rank outlives the attempt into the next
        for sig, wait_s in ((signal.SIGKILL, self.grace_s), (None, KILLED_S)):
            deadline = time.monotonic() + wait_s
            while signal_job(self._pgid, self.directory, 0):
                if time.monotonic() >= deadline:
                    break
                time.sleep(POLL_S)
            else:
                return
            if sig is not None:
                signal_job(self._pgid, self.directory, sig)


def _unsaid(finding: Finding, config: dict, before: str | None) -> None:
    """The watcher's announcements: a live stop says only the finding it stops for (``LiveJudge._terminate``)."""
