"""A file's fingerprint (sha256 of its first bytes read): a recreated file that reuses an inode is
told apart from the one the offset belongs to. Added where missing; text on PostgreSQL.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    bind = op.get_bind()
    if "fingerprint" not in {c["name"] for c in sa.inspect(bind).get_columns("files")}:
        op.add_column("files", sa.Column("fingerprint", sa.Text))
    elif bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE files ALTER COLUMN fingerprint TYPE TEXT")
