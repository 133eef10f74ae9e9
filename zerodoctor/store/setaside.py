"""Store: runs set aside — a run whose view or judgement failed → why, until the code that failed changes.

The mark is the run's ``run_state`` row with a version of its own (``set-aside:<code version>``) and
the reason as its state: a run has a saved view or the reason it has none. Code of another version
(an upgrade that may not fail any more) or a file's rows forgotten (``runs.forget_state``) tries
the run again; its rows are stored all along, so nothing is lost while it waits.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from zerodoctor.store.runs import save_state
from zerodoctor.store.schema import run_state

PREFIX = "set-aside:"
_GENERATION = -1  # no view's generation: another writer holding this run's view reloads it and sees the mark


def mark(conn: Connection, run_id: int, version: str, reason: str) -> None:
    """Set the run aside for code ``version`` (``Reads.version``), in ``conn``'s transaction."""
    save_state(conn, run_id, PREFIX + version, _GENERATION, reason)


def reason(conn: Connection, run_id: int, version: str) -> str | None:
    """Why the run is set aside for code ``version``; None when it is not."""
    query = select(run_state.c.state).where(run_state.c.run_id == run_id, run_state.c.version == PREFIX + version)
    return conn.execute(query).scalar()


def reasons(conn: Connection) -> dict[int, str]:
    """Every run set aside, by run id, whatever code set it aside (``status`` shows them until a watcher retries)."""
    query = select(run_state.c.run_id, run_state.c.state).where(run_state.c.version.startswith(PREFIX))
    return dict(conn.execute(query).all())
