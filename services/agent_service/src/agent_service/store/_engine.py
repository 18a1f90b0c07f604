"""The run store's database: ``suite_common.sql``'s (URLs, both backends' connections and transactions, failures
as ``StoreError``) under the run store's name, and the one write done in each driver's own terms, a run's step
(``_steps``).
"""

from __future__ import annotations

from sqlalchemy.engine import URL

from agent_service.store._steps import postgres_step, sqlite_step
from agent_service.store.records import Step
from suite_common import sql
from suite_common.sql import Database, PostgresDatabase, StoreName

__all__ = ["RUN_STORE", "database_url", "open_database", "write_step"]

RUN_STORE = StoreName(label="run store", application="agent-service", example_file="agent.db")


def database_url(url: str) -> URL:
    """The run store's SQLAlchemy URL; ``ValueError`` (one sentence) for a URL it does not take."""
    return sql.database_url(url, RUN_STORE)


def open_database(url: URL) -> Database:
    """The run store's database at ``url`` (from ``database_url``); connections are opened when first needed."""
    return sql.open_database(url, RUN_STORE)


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
