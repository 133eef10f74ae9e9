"""Store: an opened store at any schema version → the current schema, in place (Alembic).

A fresh store gets the tables straight from ``schema.metadata`` and is stamped at ``HEAD``;
a store at an older version (a store made before migrations existed has the tables and no
``alembic_version``: it is at ``BASELINE``) runs the scripts in ``migrations/versions/``.
Alembic is imported only then: a store already at ``HEAD`` costs one SELECT. Starting
watchers together is safe: the check and the upgrade run under one lock (PostgreSQL: a
transaction-level advisory lock; SQLite: the write lock, ``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Column, Connection, Engine, MetaData, PrimaryKeyConstraint, String, Table, inspect, select, text

from zerodoctor.store.schema import metadata

BASELINE = "0001"
HEAD = "0010"
SCRIPTS = Path(__file__).with_name("migrations")
_MIGRATION_LOCK = 0x7A64_6D69_6772_6174  # "zdmigrat": one key for every zerodoctor store on a server

# Alembic's own version table, declared here so a fresh store is stamped without importing Alembic.
version_table = Table("alembic_version", MetaData(), Column("version_num", String(32), nullable=False),
                      PrimaryKeyConstraint("version_num", name="alembic_version_pkc"))


class NewerStore(Exception):
    """The store's schema is one this zerodoctor has no script for: a newer zerodoctor made or upgraded it."""

    def __init__(self, version: str) -> None:
        super().__init__(f"its schema ({version}) was made by a newer zerodoctor (this one knows up to {HEAD}): "
                         "upgrade zerodoctor, or pass another --db")


def _check_known(version: str | None) -> None:
    """Alembic would fail deep inside ("Can't locate revision") on a version it has no script for."""
    if version is not None and version not in {p.name.split("_", 1)[0] for p in (SCRIPTS / "versions").glob("*.py")}:
        raise NewerStore(version)


def stored_version(conn: Connection) -> str | None:
    """The store's schema version; None when it has no version table (fresh, or made before migrations)."""
    if not inspect(conn).has_table(version_table.name):
        return None
    return conn.execute(select(version_table.c.version_num)).scalar()


def upgrade(engine: Engine) -> None:
    """Bring the store at ``engine`` to ``HEAD`` (creating it when empty)."""
    with engine.connect() as conn:
        version = stored_version(conn)
        if version == HEAD:
            return
        _check_known(version)
    with engine.connect().execution_options(zerodoctor_write_lock=True) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        version = stored_version(conn)
        if version == HEAD:
            return  # another process upgraded it while this one waited for the lock
        _check_known(version)
        if version is None and not inspect(conn).has_table("runs"):
            metadata.create_all(conn)
            version_table.create(conn)
            conn.execute(version_table.insert().values(version_num=HEAD))
            return
        _run_scripts(conn, version or BASELINE)


def _run_scripts(conn: Connection, version: str) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.attributes["connection"] = conn
    if stored_version(conn) is None:
        command.stamp(config, version)
    command.upgrade(config, "head")
