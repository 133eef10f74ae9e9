"""The run view's saved state (``run_state``, one row per run): created where it is missing; a
store whose first version of it had 32-bit ids and ``varchar(64)`` gets the wide types.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    bind = op.get_bind()
    if not sa.inspect(bind).has_table("run_state"):
        op.create_table(
            "run_state",
            sa.Column("run_id", _ID, sa.ForeignKey("runs.id"), primary_key=True, autoincrement=False),
            sa.Column("version", sa.Text, nullable=False),
            sa.Column("generation", sa.BigInteger, nullable=False),
            sa.Column("state", sa.Text, nullable=False),
        )
    elif bind.dialect.name == "postgresql":
        op.execute('ALTER TABLE run_state ALTER COLUMN run_id TYPE BIGINT, ALTER COLUMN version TYPE TEXT, '
                   'ALTER COLUMN generation TYPE BIGINT')
