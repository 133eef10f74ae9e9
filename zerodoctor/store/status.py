"""Store, status: per run, its files (events, quarantined lines and why, offsets), its findings and the
events its probe dropped.

Read-only and safe beside a running ``watch``: SQLite's WAL gives this a consistent
snapshot while the watcher commits. A file belongs to the run named by its directory
(``runs/<run-id>/rank-N.jsonl``); a file from elsewhere (``diagnose --db``) belongs to
the runs whose events it holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from sqlalchemy import Connection, func, select

from zerodoctor.events.dropped import dropped_by_rank
from zerodoctor.store import files as stored_files
from zerodoctor.store import setaside
from zerodoctor.store.findings import for_run
from zerodoctor.store.schema import events, quarantine, runs
from zerodoctor.store.steps import runs_of_files

FIRST_REASONS = 3


@dataclass
class FileStatus:
    path: str
    events: int
    quarantined: int
    offset: int
    reasons: list[tuple[int, str]] = field(default_factory=list)  # (line, reason) of the first quarantined lines
    node: str | None = None  # whose disk holds it (store/nodes.py): two nodes' files may share a path


@dataclass
class RunStatus:
    run: str
    files: list[FileStatus] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    last_event_t: float | None = None
    set_aside: str | None = None  # why the run is not judged (``store/setaside.py``)
    dropped: dict[int, int] = field(default_factory=dict)  # rank → events its probe dropped, ranks that did


def collect(conn: Connection, reasons: int = FIRST_REASONS) -> list[RunStatus]:
    """Every run in the store with its files and findings, in the order runs were first seen."""
    by_name: dict[str, RunStatus] = {}
    run_ids: dict[int, str] = {}
    aside = setaside.reasons(conn)
    for rid, name, last in conn.execute(select(runs.c.id, runs.c.name, runs.c.last_event_t).order_by(runs.c.id)):
        by_name[name] = RunStatus(name, findings=for_run(conn, rid), last_event_t=last, set_aside=aside.get(rid))
        run_ids[rid] = name
    for rid, ends in _run_ends(conn).items():
        by_name[run_ids[rid]].dropped = dropped_by_rank(ends)

    stored = {fid: FileStatus(path, n, q, off, node=node)
              for fid, path, n, q, off, node in stored_files.progress(conn)}
    for fid, line, reason in _first_reasons(conn, reasons):
        stored[fid].reasons.append((line, reason))

    elsewhere: list[int] = []
    for fid, status in stored.items():
        owner = by_name.get(PurePath(status.path).parent.name)
        if owner is not None:
            owner.files.append(status)
        else:
            elsewhere.append(fid)
    if elsewhere:
        # Only files outside run directories pay for this scan of the event tables.
        holders = set(runs_of_files(conn, elsewhere))
        holders.update(tuple(row) for row in conn.execute(select(events.c.file_id, events.c.run_id)
                                                          .where(events.c.file_id.in_(elsewhere)).distinct()))
        owned = set()
        for fid, rid in sorted(holders):
            by_name[run_ids[rid]].files.append(stored[fid])
            owned.add(fid)
        for fid in elsewhere:
            if fid not in owned:  # nothing valid read from it yet: its directory names the run
                name = PurePath(stored[fid].path).parent.name
                by_name.setdefault(name, RunStatus(name)).files.append(stored[fid])
    return list(by_name.values())


def _run_ends(conn: Connection) -> dict[int, list[dict[str, Any]]]:
    """Run id → its ``run_end`` events (one a rank, or two: few rows), by the (run, kind) index."""
    out: dict[int, list[dict[str, Any]]] = {}
    for rid, rank, payload in conn.execute(select(events.c.run_id, events.c.rank, events.c.payload)
                                           .where(events.c.run_id.in_(select(runs.c.id)),
                                                  events.c.kind == "run_end")):
        body = json.loads(payload) if isinstance(payload, str) else dict(payload)
        out.setdefault(rid, []).append({**body, "rank": rank})
    return out


def _first_reasons(conn: Connection, limit: int) -> list[tuple[int, int, str]]:
    ranked = select(quarantine.c.file_id, quarantine.c.line, quarantine.c.reason,
                    func.row_number().over(partition_by=quarantine.c.file_id, order_by=quarantine.c.id).label("n")
                    ).subquery()
    return [tuple(r) for r in conn.execute(
        select(ranked.c.file_id, ranked.c.line, ranked.c.reason).where(ranked.c.n <= limit)
        .order_by(ranked.c.file_id, ranked.c.n))]
