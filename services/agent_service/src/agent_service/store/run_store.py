"""The run store: one class over SQLAlchemy Core, for SQLite and PostgreSQL (asyncpg).

Every method is one short transaction. Every failure of the database surfaces as ``StoreError``
(``LeaseLost`` and ``ConversationBusy`` are its kinds), never as a driver's own exception.
Times are the replica's wall clock, in UTC.

``RunStore`` is its table families' parts over one ``Database``: runs with their messages and events (``_runs``),
conversations (``_conversations``), their summaries (``_summaries``), the usage log (``_usage``), the tool-call
audit log (``_audit``), leases (``_leases``), the tenants' runtimes (``_tenant_runtime``), runs waiting for a person
(``_waiting``) with their approvals (``_approvals``) and tool servers' questions (``_inputs``), the images of stored
messages (``_images``); the caller keys of the same database are ``caller_keys`` (``CallerKeyStore``).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.store._approvals import RunApprovals
from agent_service.store._audit import ToolCallAudit
from agent_service.store._conversations import StoredConversations
from agent_service.store._engine import database_url, open_database
from agent_service.store._images import StoredImages
from agent_service.store._inputs import RunInputs
from agent_service.store._leases import RunLeases
from agent_service.store._migrations import MIGRATIONS
from agent_service.store._runs import StoredRuns
from agent_service.store._summaries import ConversationSummaries
from agent_service.store._tenant_runtime import TenantRuntimeSettings
from agent_service.store._usage import UsageLog
from agent_service.store._waiting import RunWaits
from agent_service.store.caller_keys import CallerKeyStore
from suite_common.sql import Database

__all__ = ["RunStore"]


class RunStore(
    StoredRuns,
    StoredConversations,
    ConversationSummaries,
    UsageLog,
    ToolCallAudit,
    RunLeases,
    TenantRuntimeSettings,
    RunWaits,
    RunApprovals,
    RunInputs,
    StoredImages,
):
    """The durable runs of agent-service: their messages, events, leases, and the conversations they belong to.

    Each method runs one transaction, written as a plain function of a ``Connection`` (``suite_common.sql``'s
    ``Database`` runs it on the backend's terms)."""

    def __init__(self, database: Database) -> None:
        """Use ``RunStore.open``."""
        self._db = database

    @classmethod
    async def open(cls, url: str, *, migrate: bool = True, pool_size: int | None = None) -> RunStore:
        """``url``: ``sqlite:///path`` (the folder is created) or ``postgresql://...``; the drivers are chosen
        here. ``migrate``: bring the schema to the newest revision first (Alembic; several replicas starting at
        once take turns); without, a schema at another revision is a ``StoreError`` that says what to run.
        ``pool_size``: PostgreSQL's connections for the runs' writes (steps, new runs), opened as needed and kept
        (``None``: ten)."""
        database = open_database(database_url(url), pool_size=pool_size)
        try:
            if migrate:
                await MIGRATIONS.upgrade(database)
            else:
                await MIGRATIONS.check(database, migrate_setting="AGENT_DATABASE_MIGRATE")
        except BaseException:
            await database.dispose()
            raise
        return cls(database)

    @property
    def caller_keys(self) -> CallerKeyStore:
        """The caller keys kept in this store's database (``python -m agent_service.keys``)."""
        return CallerKeyStore(self._db)

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.backend

    async def aclose(self) -> None:
        await self._db.dispose()

    async def ping(self) -> None:
        """Raises ``StoreError`` when the database does not answer (readiness)."""

        def select_one(connection: Connection) -> None:
            connection.execute(sa.text("SELECT 1"))

        await self._db.run("reach the database", select_one, write=False)
