"""A run's conversation's summary in the run store: the ``SummaryStore`` the context fitter reads and writes."""

from __future__ import annotations

from dataclasses import dataclass

from agent_service.core.context import ContextSummary
from agent_service.core.errors import UpstreamError
from agent_service.store import RunStore, StoreError

__all__ = ["StoredSummary"]


@dataclass(frozen=True)
class StoredSummary:
    """``tenant``'s conversation ``conversation_id``'s summary in ``store``; a store failure fails the run (503)."""

    store: RunStore
    tenant: str
    conversation_id: str

    async def load(self) -> ContextSummary | None:
        try:
            return await self.store.get_summary(self.tenant, self.conversation_id)
        except StoreError as error:
            raise _unavailable(error) from None

    async def save(self, summary: ContextSummary) -> None:
        try:
            await self.store.put_summary(self.tenant, self.conversation_id, summary)
        except StoreError as error:
            raise _unavailable(error) from None


def _unavailable(error: StoreError) -> UpstreamError:
    # The driver's words (addresses, SQL states) stay out of the run's error event.
    return UpstreamError("store_unavailable", "The run store is unavailable; try again shortly.", status=503)
