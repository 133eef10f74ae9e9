"""Watch: findings in the store → the plugins' notifiers, each finding delivered once per notifier, from the
time the notifier started on this store (never a store's history).

A delivery is recorded only after the notifier returns; one that raises leaves its findings
pending for the next pass. A crash between a notifier's success and the commit repeats that
one delivery (at least once), it never loses one.

Deliveries run on one worker thread at a time (``Deliveries``): a notifier retrying a dead
endpoint costs seconds, which must not hold up ingest on watch's only writing thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, and_, select, text
from sqlalchemy.exc import SQLAlchemyError

from zerodoctor import plugins
from zerodoctor.store.db import describe, insert_new
from zerodoctor.store.schema import deliveries, findings
from zerodoctor.store.schema import notifiers as enrolled
from zerodoctor.watch.lock import advisory_key

log = logging.getLogger("zerodoctor.watch")


class Notifier(Protocol):
    name: str

    def send(self, finding: dict[str, Any]) -> None: ...


def notifiers() -> list[Notifier]:
    return plugins.collected(plugins.hook().register_notifiers())


def enrol(engine: Engine, targets: list[Notifier]) -> dict[str, float]:
    """Notifier → since when it delivers from this store: now for one it has not seen (recorded, so
    every watcher of the store, and every restart, agrees), before anything is judged.

    A notifier added to a store of last month's runs would otherwise post every finding it holds.
    """
    if not targets:
        return {}
    with engine.begin() as conn:
        for notifier in targets:
            conn.execute(insert_new(conn, enrolled).values(name=notifier.name, since_t=time.time()))
        return dict(conn.execute(select(enrolled.c.name, enrolled.c.since_t)
                                 .where(enrolled.c.name.in_([n.name for n in targets]))).all())


def deliver_pending(engine: Engine, targets: list[Notifier], stop: threading.Event | None = None,
                    since: dict[str, float] | None = None) -> tuple[int, int]:
    """Send every finding judged since a notifier started on this store (``since``, else ``enrol``) that it
    has not accepted yet; return (delivered, notifiers that failed).

    ``stop`` ends the work between two sends; what was not sent stays pending.
    """
    delivered = failed = 0
    since = enrol(engine, targets) if since is None else since
    for notifier in targets:
        with engine.connect() as conn:
            pending = conn.execute(
                select(findings.c.id, findings.c.body)
                .outerjoin(deliveries, and_(deliveries.c.finding_id == findings.c.id,
                                            deliveries.c.notifier == notifier.name))
                .where(deliveries.c.id.is_(None), findings.c.last_seen_t >= since[notifier.name])
                .order_by(findings.c.id)
            ).all()
        for sent, (finding_id, body) in enumerate(pending):
            if stop is not None and stop.is_set():
                return delivered, failed
            try:
                delivered += _send_once(engine, notifier, finding_id, body)
            except Exception as exc:  # noqa: BLE001 - a notifier's failure must not stop watch
                log.warning("notifier %s failed, %d finding(s) stay pending: %s",
                            notifier.name, len(pending) - sent, exc)
                failed += 1
                break  # the endpoint is down: try the rest on a later pass, in order
    return delivered, failed


def _send_once(engine: Engine, notifier: Notifier, finding_id: int, body: dict[str, Any]) -> bool:
    """Send one finding and record it; False when another watcher has it.

    On PostgreSQL the watchers of several nodes judge the same run and see the same pending
    findings: each delivery is sent under a transaction-level advisory lock, taken without
    waiting, and checked again inside it, so one node sends it. SQLite has one watcher, and a
    write transaction held across a send would hold up its ingest.
    """
    if engine.dialect.name != "postgresql":
        notifier.send(body)
        with engine.begin() as conn:
            _record(conn, finding_id, notifier.name)
        return True
    key = advisory_key(f"delivery {finding_id} {notifier.name}")
    with engine.begin() as conn:
        if not conn.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key}).scalar():
            return False
        if conn.execute(select(deliveries.c.id).where(deliveries.c.finding_id == finding_id,
                                                      deliveries.c.notifier == notifier.name)).first():
            return False
        notifier.send(body)
        _record(conn, finding_id, notifier.name)
    return True


def _record(conn: Connection, finding_id: int, name: str) -> None:
    conn.execute(insert_new(conn, deliveries).values(finding_id=finding_id, notifier=name, delivered_t=time.time()))


class Deliveries:
    """``deliver_pending`` on a worker thread, never two at once, so each finding is sent once.

    After a pass with a failed notifier the next waits ``retry_s``. The worker opens its own
    connections from ``engine``'s pool; the watch thread only starts and joins it.
    """

    def __init__(self, engine: Engine, targets: list[Notifier], stop: threading.Event, retry_s: float) -> None:
        self.engine, self.targets, self.stop, self.retry_s = engine, targets, stop, retry_s
        self.since = enrol(engine, targets)  # before the first judgement: what this watch judges is theirs
        self._after = 0.0
        self._worker: threading.Thread | None = None

    def start(self, *, force: bool = False) -> None:
        """Start a delivery pass unless one is running or the retry wait is not over (``force``: it is)."""
        if not self.targets or self.busy() or (not force and time.monotonic() < self._after):
            return
        self._worker = threading.Thread(target=self._deliver, name="zerodoctor-notify", daemon=True)
        self._worker.start()

    def busy(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the pass in flight (it ends between two sends once ``stop`` is set)."""
        if self._worker is not None:
            self._worker.join(timeout)
            if self._worker.is_alive():
                log.warning("a notifier is still sending after %.0f s; its findings stay pending", timeout)
            self._worker = None

    def _deliver(self) -> None:
        try:
            _, failed = deliver_pending(self.engine, self.targets, self.stop, self.since)
        except Exception as exc:
            log.error("delivering findings failed; they stay pending: %s", describe(exc, self.engine.url),
                      exc_info=not isinstance(exc, SQLAlchemyError))
            failed = 1
        self._after = time.monotonic() + self.retry_s if failed else 0.0
