"""What ``watch`` last said of a finding (``said``: its severity and evidence numbers), so it says the
finding again when that changes materially (``watch/changes.py``), across restarts and nodes; and when a
person acknowledged it (``acknowledged_t``, ``zerodoctor ack``), after which it is not said again; and
since when each notifier has been delivering from this store (``notifiers``), so one enabled on an old
store sends what is judged from then on, not every finding of every run it ever held.

Rows from before have neither: watch records ``said`` at their next judgement without saying them again.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.add_column("findings", sa.Column("said", sa.JSON))
    op.add_column("findings", sa.Column("acknowledged_t", sa.Float))
    op.create_table("notifiers", sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
                    sa.Column("name", sa.Text, nullable=False, unique=True),
                    sa.Column("since_t", sa.Float, nullable=False))
