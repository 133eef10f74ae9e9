"""Store: the tables (SQLAlchemy 2.0 Core), shaped for the queries signals make.

Step events, the bulk of any run, are stored as column chunks (one row per rank per stored
batch, ``store/steps.py``); the rarer kinds keep their payload as JSON, a row each. Each file has one row with its
identity (node, device, inode, fingerprint of its first bytes) and the byte offset committed together
with the events read up to it.

Every integer that comes from a log or a file is 64-bit and every text is unbounded
(PostgreSQL's ``integer`` stops at 2 GiB and ``varchar(n)`` refuses longer text, while
SQLite stores either): memory bytes, tokens, steps, offsets, inodes, run names. Changes
to these tables come with a migration (``store/migrations/``).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

# SQLite only auto-numbers a column declared exactly INTEGER PRIMARY KEY (its 64-bit rowid).
Id = BigInteger().with_variant(Integer, "sqlite")


def _id() -> Column:
    return Column("id", Id, primary_key=True)


def _ref(name: str, target: str, **kwargs: object) -> Column:
    return Column(name, Id, ForeignKey(target), **kwargs)

runs = Table(
    "runs",
    metadata,
    _id(),
    Column("name", Text, nullable=False, unique=True),
    Column("first_event_t", Float),
    Column("last_event_t", Float),
)

# A file is (node, device, inode, fingerprint): the nodes of one job write the same local path
# into one store, so the path names a file only on its node (store/nodes.py, store/files.py).
files = Table(
    "files",
    metadata,
    _id(),
    Column("node", Text),  # NULL: stored before rows had a node, until the node that holds the file claims it
    Column("path", Text, nullable=False),
    Column("format", Text, nullable=False),
    Column("device", BigInteger),
    Column("inode", BigInteger),
    # sha256 of the first min(offset, 4096) bytes read: an inode reused by a recreated file is no match.
    Column("fingerprint", Text),
    Column("offset", BigInteger, nullable=False, default=0),
    Column("lines", BigInteger, nullable=False, default=0),
    Column("events", BigInteger, nullable=False, default=0),
    Column("quarantined", BigInteger, nullable=False, default=0),
    # The last lines before the offset holding a crash message the parser keeps open for lines that may still come
    # (pipeline/tail.py): a watcher killed before it let the message go leaves them to be read again. 0: none.
    Column("held_lines", BigInteger, nullable=False, server_default="0"),  # an insert naming none: 0
    # When the file last grew, on the store's clock (``db.StoreClock``; PostgreSQL only): its node stamps it with
    # each batch as the store's now less how long ago, on the node's own clock, the file last changed. How long
    # another node's rank has been silent is then the store's now less this, with no two hosts' clocks compared.
    Column("grew_at", Float),
    UniqueConstraint("node", "path", name="uq_files_node_path"),
)

# The steps of one rank from one stored batch: their columns in one blob (store/steps.py), with
# what the queries select chunks by. ``level`` counts compactions; a ``folded`` chunk was made by
# one, of rows the run's view already holds.
step_chunks = Table(
    "step_chunks",
    metadata,
    _id(),
    _ref("run_id", "runs.id", nullable=False),
    _ref("file_id", "files.id"),
    Column("rank", BigInteger, nullable=False),
    Column("first_step", BigInteger, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("last_t", Float, nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("level", Integer, nullable=False, default=0),
    Column("folded", Boolean, nullable=False, default=False),
    Column("summary", LargeBinary, nullable=False),  # msgpack: per field [count, sum, min, max], for rank totals
    Column("columns", LargeBinary, nullable=False),
)
Index("ix_step_chunks_run_last", step_chunks.c.run_id, step_chunks.c.last_step)
Index("ix_step_chunks_holder", step_chunks.c.run_id, step_chunks.c.file_id, step_chunks.c.rank, step_chunks.c.level)

events = Table(
    "events",
    metadata,
    _id(),
    _ref("run_id", "runs.id", nullable=False),
    _ref("file_id", "files.id"),
    Column("rank", BigInteger, nullable=False),
    Column("kind", Text, nullable=False),
    Column("t", Float, nullable=False),
    Column("step", BigInteger),
    Column("payload", JSON, nullable=False),
)
Index("ix_events_run_kind", events.c.run_id, events.c.kind)

# The run view's fold state (signals/view.py), JSON, saved in the transaction that stores the rows
# and offsets it covers; ``version`` names the code that wrote it, so an upgrade rebuilds it.
run_state = Table(
    "run_state",
    metadata,
    _ref("run_id", "runs.id", primary_key=True),
    Column("version", Text, nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("state", Text, nullable=False),
)

quarantine = Table(
    "quarantine",
    metadata,
    _id(),
    _ref("file_id", "files.id", nullable=False),
    Column("line", BigInteger, nullable=False),
    Column("reason", Text, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("raw", LargeBinary, nullable=False),
)

findings = Table(
    "findings",
    metadata,
    _id(),
    _ref("run_id", "runs.id", nullable=False),
    Column("rule", Text, nullable=False),
    Column("severity", Text, nullable=False),
    Column("body", JSON, nullable=False),
    Column("first_seen_t", Float, nullable=False),
    Column("last_seen_t", Float, nullable=False),
    Column("notified", Boolean, nullable=False, default=False),
    Column("said", JSON),  # what watch last announced: severity and evidence numbers (watch/changes.py)
    Column("acknowledged_t", Float),  # when a person said they know (``zerodoctor ack``): not said again
    UniqueConstraint("run_id", "rule"),
)

# Since when each notifier has delivered from this store: it sends the findings judged from then on,
# never the history of a store it was added to (watch/notify.py).
notifiers = Table(
    "notifiers",
    metadata,
    _id(),
    Column("name", Text, nullable=False, unique=True),
    Column("since_t", Float, nullable=False),
)

# One row per (finding, notifier) once the notifier accepted it: a finding a notifier could
# not deliver stays pending and is retried on a later pass, and is never sent twice.
deliveries = Table(
    "deliveries",
    metadata,
    _id(),
    _ref("finding_id", "findings.id", nullable=False),
    Column("notifier", Text, nullable=False),
    Column("delivered_t", Float, nullable=False),
    UniqueConstraint("finding_id", "notifier"),
)
