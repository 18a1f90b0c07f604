"""The store's conversation summaries (table ``conversation_summaries``): one per conversation, the newest fold's."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.core.context import ContextSummary
from agent_service.store._rows import utc_now
from agent_service.store.schema import conversation_summaries
from suite_common.sql import Database

__all__ = ["ConversationSummaries"]


class ConversationSummaries:
    """The summaries part of ``RunStore``."""

    _db: Database

    async def get_summary(self, tenant: str, conversation_id: str) -> ContextSummary | None:
        """The summary of ``tenant``'s conversation, ``None`` when none was made."""
        table = conversation_summaries

        def read(connection: Connection) -> ContextSummary | None:
            query = sa.select(table).where(table.c.tenant == tenant, table.c.conversation_id == conversation_id)
            row = connection.execute(query).one_or_none()
            if row is None:
                return None
            return ContextSummary(covers=row.covers, summary=row.summary, tokens=row.tokens, model=row.model)

        return await self._db.run(f"read the summary of {conversation_id}", read, write=False)

    async def put_summary(self, tenant: str, conversation_id: str, summary: ContextSummary) -> None:
        """Keep ``summary`` as the conversation's, in place of an earlier one that covers fewer messages (a run that
        made a smaller one concurrently never replaces a larger one)."""
        table = conversation_summaries
        key = (table.c.tenant == tenant, table.c.conversation_id == conversation_id)

        def write(connection: Connection) -> None:
            stored = connection.execute(sa.select(table.c.covers).where(*key)).scalar_one_or_none()
            if stored is not None and stored >= summary.covers:
                return
            connection.execute(sa.delete(table).where(*key))
            connection.execute(
                sa.insert(table).values(
                    tenant=tenant,
                    conversation_id=conversation_id,
                    covers=summary.covers,
                    summary=summary.summary,
                    tokens=summary.tokens,
                    model=summary.model,
                    created_at=utc_now(),
                )
            )

        await self._db.run(f"store the summary of {conversation_id}", write, write=True)
