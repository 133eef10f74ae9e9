"""The migrations and ``schema.py`` describe one schema: a store made by the oldest schema (the tables before
migrations, revision ``0001``) and upgraded by every script is the store a fresh ``create_all`` makes — the same
tables, columns (type, nullability), primary keys, indexes, unique constraints and foreign keys."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, inspect

from tests.conftest import _fresh_pg_schema
from tests.store.test_store_values import store_before_migrations
from zerodoctor.store.db import open_engine


def _affinity(declared: str) -> str:
    """SQLite's type affinity of a declared type (sqlite.org/datatype3.html, 3.1): what it stores. SQLite cannot
    alter a column's type and needs not (0002_wide_types.py), so a migrated INTEGER stands for a fresh BIGINT."""
    declared = declared.upper()
    if "INT" in declared:
        return "INTEGER"
    if any(word in declared for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in declared or not declared:
        return "BLOB"
    if any(word in declared for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def schema_of(engine: Engine) -> dict[str, dict[str, Any]]:
    """Every table of the store as the database reports it."""
    with engine.connect() as conn:
        found = inspect(conn)
        sqlite = conn.dialect.name == "sqlite"
        return {table: {
            "columns": {c["name"]: (_affinity(str(c["type"])) if sqlite else str(c["type"]), c["nullable"])
                        for c in found.get_columns(table)},
            "primary key": found.get_pk_constraint(table)["constrained_columns"],
            "indexes": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"]))
                              for i in found.get_indexes(table)),
            "unique": sorted(tuple(u["column_names"]) for u in found.get_unique_constraints(table)),
            "foreign keys": sorted((tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
                                   for f in found.get_foreign_keys(table)),
        } for table in sorted(found.get_table_names())}


@pytest.fixture
def fresh_url(request: pytest.FixtureRequest, store_url: str, tmp_path) -> str:
    """A second empty store on the same database as ``store_url``."""
    if store_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return _fresh_pg_schema(request)


def test_a_store_migrated_from_the_oldest_schema_is_a_fresh_store(store_url: str, fresh_url: str) -> None:
    store_before_migrations(store_url).dispose()
    migrated, fresh = open_engine(store_url), open_engine(fresh_url)
    try:
        old, new = schema_of(migrated), schema_of(fresh)
    finally:
        migrated.dispose()
        fresh.dispose()
    assert old.keys() == new.keys()
    for table in new:
        assert old[table] == new[table], table
