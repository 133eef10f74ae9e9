"""When each file last grew, on the store's clock (``files.grew_at``): the judge of a run tells how long a rank on
another node has been silent from it, comparing no two hosts' clocks (``watch/daemon.py``, ``_clocks_for``).

Rows from before have none until their file next grows.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    if "grew_at" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("files")}:
        op.add_column("files", sa.Column("grew_at", sa.Float))
