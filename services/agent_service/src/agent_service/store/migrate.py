"""``python -m agent_service.store.migrate``: bring the run store's schema to the newest revision, then print it.

For deployments that start agent-service with ``AGENT_DATABASE_MIGRATE=false`` and migrate in a job of their
own. Reads ``AGENT_DATABASE_URL`` like the service does (only the database settings: the job needs no other).
"""

from __future__ import annotations

import asyncio
import sys

from pydantic_settings import BaseSettings

from agent_service.settings import AgentSettings
from agent_service.store._engine import database_url, open_database
from agent_service.store._migrations import MIGRATIONS
from suite_common.sql import StoreError

__all__ = ["DatabaseSettings", "main"]


class DatabaseSettings(BaseSettings):
    """The part of ``AgentSettings`` a command on the store needs, read the same way (so that a job running it
    needs no other secret)."""

    model_config = AgentSettings.model_config
    database_url: str = AgentSettings.model_fields["database_url"].default
    database_migrate: bool = AgentSettings.model_fields["database_migrate"].default


async def _migrate(url: str) -> str:
    database = open_database(database_url(url))
    try:
        return await MIGRATIONS.upgrade(database)
    finally:
        await database.dispose()


def main() -> int:
    url = DatabaseSettings().database_url
    if not url.strip():
        print("AGENT_DATABASE_URL is empty: runs are not stored, there is nothing to migrate.", file=sys.stderr)
        return 2
    try:
        revision = asyncio.run(_migrate(url))
    except (ValueError, StoreError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"The run store's schema is at revision {revision}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
