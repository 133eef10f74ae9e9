"""A step's time in the data loader (``data_s``, the probe's since the heartbeat branch): added where missing.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    if "data_s" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("steps")}:
        op.add_column("steps", sa.Column("data_s", sa.Float))
