"""What the store keeps is the user's: a new SQLite store and its -wal/-shm files are 0600 whatever the
umask (they sat 0644 beside 0700 run directories), and a PostgreSQL password given in the URL's query
(``?password=``) is masked in every message, as one in its user part already was."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.conftest import run_cli
from zerodoctor.store.db import describe, open_engine, shown
from zerodoctor.store.schema import runs


def test_a_new_sqlite_store_and_its_wal_files_are_0600(tmp_path: Path) -> None:
    db = tmp_path / "zerodoctor.db"
    old = os.umask(0o022)
    try:
        engine = open_engine(db)
        with engine.connect() as conn, conn.begin():
            conn.execute(runs.insert().values(name="r"))
            modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}  # the WAL files exist now
    finally:
        os.umask(old)
    engine.dispose()
    assert modes == {"zerodoctor.db": 0o600, "zerodoctor.db-wal": 0o600, "zerodoctor.db-shm": 0o600}


def test_an_existing_store_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    open_engine(db).dispose()
    db.chmod(0o640)  # shared with a group on purpose
    engine = open_engine(db)
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    engine.dispose()
    assert db.stat().st_mode & 0o777 == 0o640


def test_a_query_password_is_masked_in_the_url_and_in_errors() -> None:
    url = "postgresql+psycopg://u:pw1@db.example:5432/zd?sslmode=require&password=pw2&sslpassword=pw3"
    assert shown(url) == "postgresql+psycopg://u:***@db.example:5432/zd?password=***&sslmode=require&sslpassword=***"
    assert describe(RuntimeError("connect failed: password=pw2 sslpassword=pw3 pw1"), url) == (
        "RuntimeError: connect failed: password=*** sslpassword=*** ***")


@pytest.mark.skipif(importlib.util.find_spec("psycopg") is None, reason="needs psycopg (zerodoctor[postgres])")
def test_a_store_that_cannot_be_reached_is_named_without_its_query_password() -> None:
    done = run_cli("status", "--db", "postgresql://u@127.0.0.1:1/zd?password=hunter2&sslmode=disable", timeout=60)
    assert done.returncode == 2
    assert "hunter2" not in done.stderr and "password=***" in done.stderr, done.stderr
