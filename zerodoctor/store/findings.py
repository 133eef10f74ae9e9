"""Store: findings per run with first/last seen, and what ``watch`` said of each, so it is said once (again
only when it changed: ``watch/changes.py``)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, delete, select, update

from zerodoctor.store.db import insert_new
from zerodoctor.store.schema import deliveries, findings, runs


def record(conn: Connection, run_id: int, bodies: list[dict[str, Any]], now: float) -> None:
    """Upsert finding bodies (keyed by rule); ``announcements`` says which ones watch has said, and what."""
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
    """The run's finding bodies, by rule; one a person acknowledged carries ``"acknowledged": true``."""
    rows = conn.execute(select(findings.c.body, findings.c.acknowledged_t).where(findings.c.run_id == run_id)
                        .order_by(findings.c.rule))
    bodies = [(json.loads(b) if isinstance(b, str) else b, acknowledged) for b, acknowledged in rows]
    return [{**body, "acknowledged": True} if acknowledged is not None else body for body, acknowledged in bodies]


def announcements(conn: Connection, run_id: int) -> dict[str, tuple[int, bool, dict[str, Any] | None]]:
    """Rule → (finding id, announced by ``watch``, what it said then) of the run's findings; an acknowledged
    one is left out: it is not said again, whatever its numbers do."""
    rows = conn.execute(select(findings.c.rule, findings.c.id, findings.c.notified, findings.c.said)
                        .where(findings.c.run_id == run_id, findings.c.acknowledged_t.is_(None)))
    return {rule: (fid, notified, json.loads(said) if isinstance(said, str) else said)
            for rule, fid, notified, said in rows}


def acknowledge(conn: Connection, run_id: int, rules: list[str], now: float) -> list[str]:
    """Mark the run's findings of ``rules`` acknowledged; returns the rules it has no finding of."""
    known = dict(conn.execute(select(findings.c.rule, findings.c.id).where(findings.c.run_id == run_id,
                                                                          findings.c.rule.in_(rules))).all())
    if known:
        conn.execute(update(findings).where(findings.c.id.in_(list(known.values()))).values(acknowledged_t=now))
    return [rule for rule in rules if rule not in known]


def mark_said(conn: Connection, said: dict[int, dict[str, Any]], *, again: bool = False) -> None:
    """Record what ``watch`` said of each finding (id → ``watch/changes.said_of``); ``again``: it said
    a finding anew, so the notifiers are to deliver it anew too (their deliveries are forgotten)."""
    for fid, what in said.items():
        conn.execute(update(findings).where(findings.c.id == fid).values(notified=True, said=what))
    if again and said:
        conn.execute(delete(deliveries).where(deliveries.c.finding_id.in_(list(said))))


def acknowledged_among(conn: Connection, names: list[str]) -> set[tuple[str, str]]:
    """(run name, rule) of the findings a person acknowledged among these runs': ``watch --metrics`` reads it at
    each snapshot, since ``zerodoctor ack`` runs in another process and a run that ended is not judged again."""
    if not names:
        return set()
    query = (select(runs.c.name, findings.c.rule).join(runs, runs.c.id == findings.c.run_id)
             .where(runs.c.name.in_(names), findings.c.acknowledged_t.is_not(None)))
    return {(name, rule) for name, rule in conn.execute(query)}
