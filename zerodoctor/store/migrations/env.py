"""Alembic's entry point: runs the migration scripts on the connection ``store.migrate`` hands over."""

from alembic import context

from zerodoctor.store.schema import metadata

context.configure(connection=context.config.attributes["connection"], target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
