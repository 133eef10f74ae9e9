"""A file's held lines: how many of the last lines read hold a crash message its parser keeps open (a traceback's
message may go on), so a watcher killed before it let the message go leaves them for the next one to read again.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    if "held_lines" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("files")}:
        op.add_column("files", sa.Column("held_lines", sa.BigInteger, nullable=False, server_default="0"))
