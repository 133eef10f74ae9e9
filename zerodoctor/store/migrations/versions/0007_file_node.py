"""A file's row records its node (``store/nodes.py``) and is unique per node and path, no longer per
path: the nodes of one job write the same local path (``/local/runs/job`` on each) into one store.

SQLite: a store on one host's disk (a network filesystem is refused), so every row gets the node
its path has on the host that upgrades it (the table is rebuilt: SQLite cannot drop a constraint).
PostgreSQL, which many nodes share: which node wrote a row was never recorded, so rows keep no
node until the node whose file at the row's path has the row's device and inode claims it
(``store/files.py``), offsets and all.

Revision ID: 0007
Revises: 0006
"""

from pathlib import Path

import sqlalchemy as sa
from alembic import op

from zerodoctor.store.nodes import node_of

revision = "0007"
down_revision = "0006"

_KEPT = ("id", "path", "format", "device", "inode", "fingerprint", "offset", "lines", "events", "quarantined")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        _rebuild_sqlite(bind)
        return
    op.add_column("files", sa.Column("node", sa.Text))
    for unique in sa.inspect(bind).get_unique_constraints("files"):
        if unique["column_names"] == ["path"]:
            op.drop_constraint(unique["name"], "files", type_="unique")
    op.create_unique_constraint("uq_files_node_path", "files", ["node", "path"])


def _rebuild_sqlite(bind: sa.Connection) -> None:
    new = sa.Table(
        "files_0007", sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("node", sa.Text),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("format", sa.Text, nullable=False),
        sa.Column("device", sa.BigInteger),
        sa.Column("inode", sa.BigInteger),
        sa.Column("fingerprint", sa.Text),
        *(sa.Column(name, sa.BigInteger, nullable=False) for name in ("offset", "lines", "events", "quarantined")),
        sa.UniqueConstraint("node", "path", name="uq_files_node_path"),
    )
    new.create(bind)
    columns = ", ".join(f'"{name}"' for name in _KEPT)
    bind.exec_driver_sql(f"INSERT INTO files_0007 ({columns}) SELECT {columns} FROM files")
    nodes = [{"b_id": file_id, "b_node": node_of(Path(path).parent)}
             for file_id, path in bind.execute(sa.select(new.c.id, new.c.path))]
    if nodes:
        bind.execute(sa.update(new).where(new.c.id == sa.bindparam("b_id")).values(node=sa.bindparam("b_node")), nodes)
    op.drop_table("files")
    op.rename_table("files_0007", "files")
