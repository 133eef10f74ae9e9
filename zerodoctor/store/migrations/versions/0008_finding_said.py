"""What ``watch`` last said of a finding (``said``: its severity and evidence numbers), so it says the
finding again when that changes materially (``watch/changes.py``), across restarts and nodes.

Rows from before have none: watch records it at their next judgement without saying them again.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.add_column("findings", sa.Column("said", sa.JSON))
