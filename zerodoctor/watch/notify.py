"""Watch: findings in the store → the plugins' notifiers, each finding delivered once per notifier.

A delivery is recorded only after the notifier returns; one that raises leaves its findings
pending for the next pass. A crash between a notifier's success and the commit repeats that
one delivery (at least once), it never loses one.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from sqlalchemy import Engine, and_, insert, select

from zerodoctor import plugins
from zerodoctor.store.schema import deliveries, findings

log = logging.getLogger("zerodoctor.watch")


class Notifier(Protocol):
    name: str

    def send(self, finding: dict[str, Any]) -> None: ...


def notifiers() -> list[Notifier]:
    return plugins.collected(plugins.hook().register_notifiers())


def deliver_pending(engine: Engine, targets: list[Notifier]) -> tuple[int, int]:
    """Send every finding a notifier has not accepted yet; return (delivered, notifiers that failed)."""
    delivered = failed = 0
    for notifier in targets:
        with engine.connect() as conn:
            pending = conn.execute(
                select(findings.c.id, findings.c.body)
                .outerjoin(deliveries, and_(deliveries.c.finding_id == findings.c.id,
                                            deliveries.c.notifier == notifier.name))
                .where(deliveries.c.id.is_(None))
                .order_by(findings.c.id)
            ).all()
        for sent, (finding_id, body) in enumerate(pending):
            try:
                notifier.send(body)
            except Exception as exc:  # noqa: BLE001 - a notifier's failure must not stop watch
                log.warning("notifier %s failed, %d finding(s) stay pending: %s",
                            notifier.name, len(pending) - sent, exc)
                failed += 1
                break  # the endpoint is down: try the rest on a later pass, in order
            with engine.begin() as conn:
                conn.execute(insert(deliveries).values(finding_id=finding_id, notifier=notifier.name,
                                                       delivered_t=time.time()))
            delivered += 1
    return delivered, failed
