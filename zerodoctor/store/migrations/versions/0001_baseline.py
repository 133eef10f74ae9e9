"""Baseline: the tables as zerodoctor created them before it had migrations.

A store with the tables and no ``alembic_version`` is stamped here; nothing to run.

Revision ID: 0001
"""

revision = "0001"
down_revision = None


def upgrade() -> None:
    pass
