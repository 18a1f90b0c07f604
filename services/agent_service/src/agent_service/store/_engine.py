"""The run store's database: ``suite_common.sql``'s (URLs, both backends' connections and transactions, failures
as ``StoreError``) under the run store's name, and the writes done in each driver's own terms (``_steps``): a run's
step, and on PostgreSQL a new run without a conversation.
"""

from __future__ import annotations

from sqlalchemy.engine import URL

from agent_service.store._steps import postgres_new_run, postgres_step, sqlite_step
from agent_service.store.records import NewRun, Step
from suite_common import sql
from suite_common.sql import Database, PostgresDatabase, StoreName

__all__ = ["RUN_STORE", "database_url", "new_run_on_driver", "open_database", "write_step"]

RUN_STORE = StoreName(label="run store", application="agent-service", example_file="agent.db")


def database_url(url: str) -> URL:
    """The run store's SQLAlchemy URL; ``ValueError`` (one sentence) for a URL it does not take."""
    return sql.database_url(url, RUN_STORE)


def open_database(url: URL, *, pool_size: int | None = None) -> Database:
    """The run store's database at ``url`` (from ``database_url``); connections are opened when first needed.
    ``pool_size``: PostgreSQL's connections for the writes done in the driver's own terms (``write_step``)."""
    return sql.open_database(url, RUN_STORE, driver_pool_size=pool_size)


async def write_step(
    database: Database, what: str, run_id: str, step: Step, *, owner: str | None, release: bool
) -> bool:
    """Write one step of a run; ``False`` when its guard refused it (nothing written)."""
    if isinstance(database, PostgresDatabase):
        return await database.on_driver(
            what, lambda connection: postgres_step(connection, run_id, step, owner=owner, release=release)
        )
    assert isinstance(database, sql.SqliteDatabase)
    return await database.on_driver(
        what, lambda connection: sqlite_step(connection, run_id, step, owner=owner, release=release)
    )


async def new_run_on_driver(database: Database, what: str, run: NewRun, *, owner: str, lease_seconds: float) -> bool:
    """Store ``run`` in the driver's own terms when that is how this database does it (PostgreSQL, a run without a
    conversation); ``False``: it is not, nothing was done (the caller stores it through SQLAlchemy)."""
    if not isinstance(database, PostgresDatabase) or run.conversation_id is not None:
        return False
    await database.on_driver(
        what, lambda connection: postgres_new_run(connection, run, owner=owner, lease_seconds=lease_seconds)
    )
    return True
