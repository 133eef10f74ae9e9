"""64-bit integers and unbounded text: PostgreSQL's ``integer`` stopped at 2 GiB of memory, a
file offset past 2^31 and ``varchar(255)`` at a 256-character run name.

SQLite needs nothing: its INTEGER is 64-bit and it never enforces a declared length.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"

_BIGINT = {
    "runs": ["id"],
    "files": ["id", "device", "inode", "offset", "lines", "events", "quarantined"],
    "steps": ["id", "run_id", "file_id", "rank", "step", "micro_batches", "samples", "tokens",
              "mem_allocated_bytes", "mem_reserved_bytes", "mem_peak_bytes", "alloc_retries",
              "inactive_split_bytes"],
    "events": ["id", "run_id", "file_id", "rank", "step"],
    "quarantine": ["id", "file_id", "line", "size"],
    "findings": ["id", "run_id"],
    "deliveries": ["id", "finding_id"],
}
_TEXT = {"runs": ["name"], "files": ["format"], "events": ["kind"], "findings": ["rule", "severity"],
         "deliveries": ["notifier"]}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in _BIGINT.items():
        op.execute(f"ALTER TABLE {table} " + ", ".join(f'ALTER COLUMN "{c}" TYPE BIGINT' for c in columns))
        op.execute(f"ALTER SEQUENCE {table}_id_seq AS BIGINT")
    for table, columns in _TEXT.items():
        op.execute(f"ALTER TABLE {table} " + ", ".join(f'ALTER COLUMN "{c}" TYPE TEXT' for c in columns))
