"""Store: findings per run with first/last seen, so a finding is announced once."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, select, update

from zerodoctor.store.db import insert_new
from zerodoctor.store.schema import findings


def record(conn: Connection, run_id: int, bodies: list[dict[str, Any]], now: float) -> None:
    """Upsert finding bodies (keyed by rule); ``unannounced`` says which ones watch has not printed."""
    known = {
        rule: fid for fid, rule in conn.execute(
            select(findings.c.id, findings.c.rule).where(findings.c.run_id == run_id))
    }
    for body in bodies:
        fid = known.get(body["rule"])
        if fid is None:
            # Watchers on several nodes judge the same run: the first to record a finding makes it new.
            conn.execute(insert_new(conn, findings).values(
                run_id=run_id, rule=body["rule"], severity=body["severity"], body=body, first_seen_t=now,
                last_seen_t=now, notified=False))
        else:
            conn.execute(update(findings).where(findings.c.id == fid).values(
                body=body, severity=body["severity"], last_seen_t=now))


def for_run(conn: Connection, run_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(select(findings.c.body).where(findings.c.run_id == run_id).order_by(findings.c.rule))
    return [json.loads(b) if isinstance(b, str) else b for (b,) in rows]


def unannounced(conn: Connection, run_id: int) -> dict[str, int]:
    """Rule → finding id of the run's findings ``watch`` has not printed yet."""
    return dict(conn.execute(select(findings.c.rule, findings.c.id).where(
        findings.c.run_id == run_id, findings.c.notified.is_(False))).all())


def mark_announced(conn: Connection, finding_ids: list[int]) -> None:
    if finding_ids:
        conn.execute(update(findings).where(findings.c.id.in_(finding_ids)).values(notified=True))
