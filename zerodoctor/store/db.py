"""Store: a URL or path → an SQLAlchemy engine with the schema in place.

SQLite gets WAL (readers never block the writer: ``diagnose`` and ``status`` can read
while ``watch`` writes) and ``synchronous=NORMAL`` (durable at checkpoints, safe against
process crashes). WAL needs shared memory, so the database must not live on a network
filesystem.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event

from zerodoctor.store.schema import metadata

DEFAULT_DB_NAME = "zerodoctor.db"


def url_for(db: str | Path) -> str:
    """Accept an SQLAlchemy URL or a plain file path."""
    text = str(db)
    return text if "://" in text else f"sqlite:///{Path(text).expanduser()}"


def open_engine(db: str | Path, *, scratch: bool = False) -> Engine:
    """Open (and create the tables of) the store at ``db``.

    ``scratch`` marks a throw-away SQLite file (``diagnose`` without ``--db``): no fsync and the
    journal in memory, since nothing in it outlives the command (a journal all the same, so a
    batch rolled back to its savepoint really is undone).
    """
    engine = create_engine(url_for(db))
    if engine.dialect.name == "sqlite":
        pragmas = (
            ("journal_mode", "MEMORY"), ("synchronous", "OFF")
        ) if scratch else (("journal_mode", "WAL"), ("synchronous", "NORMAL"), ("busy_timeout", "30000"))

        @event.listens_for(engine, "connect")
        def _set_pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001 - DBAPI connection
            cur = dbapi_conn.cursor()
            for name, value in pragmas:
                cur.execute(f"PRAGMA {name}={value}")
            cur.close()

    metadata.create_all(engine)
    return engine
