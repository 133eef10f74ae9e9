"""Store: the lines kept aside (quarantined) → ``Rejected`` records, per file, in line order."""

from __future__ import annotations

from sqlalchemy import Connection, select

from zerodoctor.sources.rejects import Rejected
from zerodoctor.store.schema import quarantine


def kept_aside(conn: Connection, paths: dict[int, str]) -> list[Rejected]:
    """Every quarantined line of the files ``paths`` names (file id → the path to show)."""
    out: list[Rejected] = []
    for file_id, path in paths.items():
        for line, reason, raw, size in conn.execute(
                select(quarantine.c.line, quarantine.c.reason, quarantine.c.raw, quarantine.c.size)
                .where(quarantine.c.file_id == file_id).order_by(quarantine.c.line)):
            out.append(Rejected(path, line, reason, raw, size))
    return out
