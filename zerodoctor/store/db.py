"""Store: a URL or path → an SQLAlchemy engine with the schema in place (migrated if older).

SQLite gets WAL (readers never block the writer: ``diagnose`` and ``status`` can read
while ``watch`` writes) and ``synchronous=NORMAL`` (durable at checkpoints, safe against
process crashes). WAL needs shared memory, so the database must not live on a network
filesystem. pysqlite emits no BEGIN of its own before a SELECT or a savepoint, so the
engine takes over: the driver is in autocommit mode and SQLAlchemy's ``begin`` event emits
BEGIN (SQLAlchemy's documented recipe), which makes a pass's transaction and its savepoints
real. A writer's transactions take the write lock when they begin (BEGIN IMMEDIATE): a
deferred one that read first could not write once another connection (watch's notifier
thread) had committed, and SQLite fails that at once, without waiting. A ``read_only``
engine (``status``) begins plain read transactions and never holds up a writer.
PostgreSQL (``postgresql://``, through psycopg 3) is the store many nodes share.
A new SQLite store is created 0600, and SQLite gives its -wal and -shm files the database's
mode: what the runs say is the user's, like the 0700 run directories beside it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy import Connection, Engine, Float, Insert, Table, create_engine, event, insert
from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from zerodoctor.probe.privacy import secret_name
from zerodoctor.store import migrate

DEFAULT_DB_NAME = "zerodoctor.db"
CONNECT_TIMEOUT_S = 10


class StoreError(RuntimeError):
    """The store cannot be opened (bad URL, missing driver, server refused or unreachable); one line, no password."""


def url_for(db: str | Path | URL) -> str:
    """Accept an SQLAlchemy URL or a plain file path; a bare ``postgresql://`` means psycopg 3."""
    text_ = db.render_as_string(hide_password=False) if isinstance(db, URL) else str(db)
    if "://" not in text_:
        return f"sqlite:///{Path(text_).expanduser()}"
    if text_.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + text_.split("://", 1)[1]
    return text_


def shown(url: str | URL) -> str:
    """The URL as messages show it: the password masked, in its user part and in its query (``?password=``)."""
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
        masked = {key: "***" if secret_name(key) else value for key, value in parsed.query.items()}
        text = parsed.set(query=masked).render_as_string(hide_password=True)
        return text.replace("%2A%2A%2A", "***")  # the query's mask comes URL-encoded
    except (ArgumentError, ValueError):
        return "<unparseable URL>"


def describe(exc: BaseException, url: str | URL | None = None) -> str:
    """One line for a store error: the driver's own first line, never SQLAlchemy's statement dump or a password."""
    inner = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = [line.strip() for line in str(inner).splitlines() if line.strip()]
    message = f"{type(inner).__name__}: {' '.join(lines[:2])}"[:400]
    for password in _passwords(url):
        message = message.replace(password, "***")
    return message


def storable_text(value: str) -> str:
    """Text as every store keeps it: PostgreSQL's ``text`` refuses NUL, so NUL becomes U+2400 (␀)
    on every backend alike, and a run named with one is the same run on SQLite and PostgreSQL."""
    return value.replace("\x00", "\u2400") if "\x00" in value else value


def insert_new(conn: Connection, table: Table) -> Insert:
    """An INSERT that does nothing where a unique key already holds the row (another writer's race).

    Each dialect's module is imported here, by name: importing SQLAlchemy's PostgreSQL dialect
    costs about 50 ms, which a SQLite run never needs (the engine loads its own dialect)."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table).on_conflict_do_nothing()
    if conn.dialect.name == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table).on_conflict_do_nothing()
    return table.insert()


class StoreClock(FunctionElement):
    """The store's clock, in seconds since the epoch: PostgreSQL's server clock, the one every node's watcher
    stamps and reads with, so no two hosts' clocks are ever compared (``files.grew_at``). Any other store has
    one writer, whose judge reads its own files' mtimes: there it is NULL, and nothing is stamped."""

    type = Float()
    inherit_cache = True


@compiles(StoreClock, "postgresql")
def _server_clock(element: StoreClock, compiler: SQLCompiler, **kw: object) -> str:
    return "EXTRACT(EPOCH FROM clock_timestamp())"  # now(): the transaction's start, seconds stale at its end


@compiles(StoreClock)
def _no_clock(element: StoreClock, compiler: SQLCompiler, **kw: object) -> str:
    return "NULL"


class BulkInsert:
    """One compiled INSERT handed straight to the driver's ``executemany``, rows as tuples in column order.

    SQLAlchemy's per-row parameter processing costs more than SQLite's insert itself
    (measured 11 µs vs 2.3 µs per step row); the tables it fills need no type processing (JSON
    payloads serialised by the caller, blobs as bytes), so the rows go to the DBAPI as they are.
    Built once per table: the events of a batch, and the step chunks (one per rank a batch holds:
    at 4,096 ranks a live pass makes thousands of one-row inserts, each paying SQLAlchemy's cost).
    """

    def __init__(self, table: Table) -> None:
        self.table = table
        self.columns = [c.name for c in table.columns if c.name != "id"]
        self._compiled: dict[str, tuple[str, bool]] = {}

    def __call__(self, conn: Connection, rows: list[tuple]) -> None:
        if not rows:
            return
        sql, positional = self._compiled.get(conn.dialect.name) or self._compile(conn.dialect)
        conn.exec_driver_sql(sql, rows if positional else [dict(zip(self.columns, row)) for row in rows])

    def _compile(self, dialect: Dialect) -> tuple[str, bool]:
        compiled = insert(self.table).compile(dialect=dialect, column_keys=self.columns)
        if compiled.positional and list(compiled.positiontup) != self.columns:
            raise RuntimeError(f"{self.table.name}: INSERT binds {compiled.positiontup}, not {self.columns}")
        entry = (str(compiled), bool(compiled.positional))
        self._compiled[dialect.name] = entry
        return entry


@contextmanager
def savepoint(conn: Connection) -> Iterator[None]:
    """``conn.begin_nested()`` by its SQL, for the savepoint every stored batch takes (``Ingestor.add_or_quarantine``):
    SQLAlchemy builds and compiles a clause for each SAVEPOINT and RELEASE, which at 4,096 ranks, a batch a rank,
    was an eighth of a live pass. What raises inside is rolled back to the savepoint, and raised."""
    conn.exec_driver_sql("SAVEPOINT zd_batch")
    try:
        yield
    except BaseException:
        try:
            conn.exec_driver_sql("ROLLBACK TO SAVEPOINT zd_batch")
            conn.exec_driver_sql("RELEASE SAVEPOINT zd_batch")
        except DBAPIError:
            pass  # the connection failed under it: the caller rolls the whole transaction back
        raise
    conn.exec_driver_sql("RELEASE SAVEPOINT zd_batch")


def open_engine(db: str | Path | URL, *, scratch: bool = False, read_only: bool = False) -> Engine:
    """Open (creating or upgrading the tables of) the store at ``db``; raise ``StoreError`` if it cannot be.

    ``scratch`` marks a throw-away SQLite file (``diagnose`` without ``--db``): no fsync and the
    journal in memory, since nothing in it outlives the command (a journal all the same, so a
    batch rolled back to its savepoint really is undone). ``read_only``: see the module doc.
    """
    url = url_for(db)
    try:
        engine = create_engine(url, **_engine_options(make_url(url)))
        if engine.dialect.name == "sqlite" and not read_only:
            _create_private(engine.url.database)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise StoreError(f"--db {shown(url)}: not a store URL or path ({' '.join(str(exc).split())[:200]})") from None
    except (NoSuchModuleError, ModuleNotFoundError, ImportError) as exc:
        hint = "; for PostgreSQL: pip install 'zerodoctor[postgres]'" if url.startswith("postgresql") else ""
        raise StoreError(f"--db {shown(url)}: its database driver is not installed ({describe(exc)}){hint}") from None
    if engine.dialect.name == "sqlite":
        _sqlite_transactions(engine, scratch=scratch, read_only=read_only)
    try:
        migrate.upgrade(engine)
    except DBAPIError as exc:
        engine.dispose()
        raise StoreError(f"cannot open the store {shown(url)}: {describe(exc, url)}") from None
    except migrate.NewerStore as exc:
        engine.dispose()
        raise StoreError(f"{shown(url)}: {exc}") from None
    return engine


def _engine_options(url: URL) -> dict:
    if url.get_backend_name() == "postgresql" and url.get_driver_name() == "psycopg":
        # A server that does not answer is an error after seconds, not a hang.
        return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}, "pool_pre_ping": True}
    return {}


def _sqlite_transactions(engine: Engine, *, scratch: bool, read_only: bool) -> None:
    pragmas = (("journal_mode", "MEMORY"), ("synchronous", "OFF")) if scratch else (
        ("journal_mode", "WAL"), ("synchronous", "NORMAL"), ("busy_timeout", "30000"))

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record) -> None:  # noqa: ANN001 - DBAPI connection
        dbapi_conn.isolation_level = None  # no implicit BEGIN from pysqlite: ``_begin`` emits it
        cur = dbapi_conn.cursor()
        for name, value in pragmas:
            cur.execute(f"PRAGMA {name}={value}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:  # noqa: ANN001 - SQLAlchemy Connection
        # A migration takes the write lock before it looks, so two processes never both create the tables.
        writes = not read_only or conn.get_execution_options().get("zerodoctor_write_lock")
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


def _create_private(database: str | None) -> None:
    """Create the SQLite file 0600 before SQLite does (with the umask's 0644); an existing store keeps its mode."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    try:
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError:
        return  # no such directory, no permission…: SQLite's own error says it when the store is opened


def _passwords(url: str | URL | None) -> list[str]:
    """The secrets a message about ``url`` must not show: its password and its secret query values."""
    if url is None:
        return []
    try:
        parsed = url if isinstance(url, URL) else make_url(url)
    except (ArgumentError, ValueError):
        return []
    values = [parsed.password] + [v for key, value in parsed.query.items() if secret_name(key)
                                   for v in ([value] if isinstance(value, str) else value)]
    return [v for v in values if v]
