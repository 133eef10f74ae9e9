"""Steps as column chunks (``step_chunks``, store/steps.py) instead of a row each (``steps``).

Each rank's rows of one file become chunks of up to 4,096 steps, in the order they were stored;
the ``steps`` table goes. Saved run views counted rows by their ids, so they are dropped and
rebuilt from the chunks on next load.

Revision ID: 0006
Revises: 0005
"""

import math

import sqlalchemy as sa
from alembic import op

from zerodoctor.events import STEP_METRICS, StepRecord
from zerodoctor.events.columns import Columns
from zerodoctor.store.schema import step_chunks
from zerodoctor.store.steps import store

revision = "0006"
down_revision = "0005"

_CHUNK = 4096


def upgrade() -> None:
    bind = op.get_bind()
    step_chunks.create(bind, checkfirst=True)
    if sa.inspect(bind).has_table("steps"):
        present = {c["name"] for c in sa.inspect(bind).get_columns("steps")}
        metrics = [m for m in STEP_METRICS if m in present]
        old = sa.table("steps", *(sa.column(n) for n in ("id", "run_id", "file_id", "rank", "t", "step", "nonfinite",
                                                            *metrics)))
        holders = bind.execute(sa.select(old.c.run_id, old.c.file_id, old.c.rank).distinct()).all()
        for run_id, file_id, rank in holders:
            where = (old.c.run_id == run_id) & (old.c.rank == rank) & (
                old.c.file_id.is_(None) if file_id is None else old.c.file_id == file_id)
            rows = bind.execute(sa.select(old).where(where).order_by(old.c.id)).mappings()
            while part := rows.fetchmany(_CHUNK):
                store(bind, run_id, file_id, Columns.of([_record(r, metrics) for r in part], [0] * len(part)))
        op.drop_table("steps")
    bind.execute(sa.text("DELETE FROM run_state"))


def _record(row, metrics: list[str]) -> StepRecord:  # noqa: ANN001 - a RowMapping
    """The step record a stored row came from (a non-finite loss or grad norm was stored NULL, flagged)."""
    values = {m: row[m] for m in metrics}
    if row["nonfinite"] & 1:
        values["loss"] = math.nan
    if row["nonfinite"] & 2:
        values["grad_norm"] = math.nan
    if values.get("overflow") is not None:
        values["overflow"] = bool(values["overflow"])
    return StepRecord(v=1, t=row["t"], run="", rank=row["rank"], step=row["step"], **values)
