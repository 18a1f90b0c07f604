"""Alembic's environment for the run store: migrations run on a connection the store hands over.

The store opens its own async engine and runs Alembic on one of its connections (``connection.run_sync``), so
there is no ``alembic.ini`` and no URL here: see ``agent_service.store.migrate``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from agent_service.store.schema import metadata

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError(
        "The run store's migrations run through agent_service.store.migrate (python -m agent_service.store.migrate)."
    )

# SQLite alters tables by copying them ("batch" mode); PostgreSQL alters them in place.
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
