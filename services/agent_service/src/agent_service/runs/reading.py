"""Stored runs read, followed and cancelled, from whichever replica executes them (or none: they ended).

Every read is of the store (404 ``runs_not_stored`` without one; 503 ``store_unavailable`` when it fails), except the
events of a run executing here, followed from its journal as they are emitted.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio

from agent_service.core.images import DecodedImage
from agent_service.core.run import LlmCall
from agent_service.core.tenancy import DEFAULT_TENANT, Caller
from agent_service.runs.journal import TERMINAL_EVENTS, StoredEventSink
from agent_service.runs.running import RunExecutor, store_unavailable
from agent_service.settings import AgentSettings
from agent_service.store import (
    AuditCursor,
    AuditedCall,
    AuditFilter,
    ConversationRecord,
    ConversationSummary,
    ModelUsage,
    RunRecord,
    RunStore,
    StoredEvent,
    StoreError,
    UnknownCursor,
)
from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.wire import Message

__all__ = ["RunReader", "abandon_before"]

_log = get_logger("agent_service.runs")

_WAIT_FOR_CANCEL_SECONDS = 2.0


def _not_stored() -> ApiError:
    return ApiError(404, "runs_not_stored", "Runs are not stored by this service (AGENT_DATABASE_URL is empty).")


def abandon_before(settings: AgentSettings) -> datetime:
    """A run whose lease expired before this is abandoned (failed, not taken over): ``abandon_after_seconds`` ago."""
    return datetime.now(UTC) - timedelta(seconds=settings.abandon_after_seconds)


class RunReader:
    """The stored runs, conversations and usage of ``runs``' store; the runs executing here followed live."""

    def __init__(self, runs: RunExecutor) -> None:
        self._runs = runs

    def _store(self) -> RunStore:
        if self._runs.store is None:
            raise _not_stored()
        return self._runs.store

    async def get(self, run_id: str, *, tenant: str | None = None) -> RunRecord | None:
        """The stored run (``None`` if unknown, or of another tenant than ``tenant``: ``None`` is any tenant); one
        whose lease lapsed longer ago than ``abandon_after_seconds`` is failed first, so that it says what
        happened to it."""
        store = self._store()
        try:
            record = await store.get_run(run_id)
            if record is not None and tenant is not None and (record.tenant or DEFAULT_TENANT) != tenant:
                return None  # exactly as an unknown run: whether another tenant's exists is not said
            if record is not None and record.active and self._abandoned(record):
                await store.fail_abandoned(abandon_before=abandon_before(self._runs.settings))
                record = await store.get_run(run_id)
        except StoreError as error:
            raise store_unavailable(error) from None
        return record

    def _abandoned(self, record: RunRecord) -> bool:
        expires = record.lease_expires_at
        return expires is None or expires < abandon_before(self._runs.settings)

    async def follow(self, run_id: str, after: int, send: StoredEventSink) -> None:
        """Send the run's events after ``after``, stored ones first, then live ones until its last; from whichever
        replica executes it (here: as they are emitted; elsewhere: as they are stored, polled)."""
        store = self._store()
        poll = self._runs.settings.events_poll_seconds
        while True:
            local = self._runs.active.get(run_id)
            flushed, tail = local.journal.snapshot(after) if local is not None else (None, [])
            events: list[StoredEvent] = []
            try:
                if flushed is None or after < flushed:
                    while True:
                        page = await store.events_after(run_id, after if not events else events[-1].seq)
                        events += page if flushed is None else [event for event in page if event.seq <= flushed]
                        if len(page) < 1000 or (flushed is not None and page[-1].seq >= flushed):
                            break
            except StoreError as error:
                raise store_unavailable(error) from None
            events += tail
            for event in events:
                await send(event)
                after = event.seq
                if event.type in TERMINAL_EVENTS:
                    return
            if events:
                continue
            if local is not None:
                with anyio.move_on_after(poll):
                    await local.journal.wait_changed()
                continue
            record = await self.get(run_id)
            if record is None:
                return
            if not (record.active or record.waiting):  # ended: once its last stored event is sent, nothing more comes
                if not await self._events_after(run_id, after):
                    return
                continue
            await anyio.sleep(poll)

    async def image(self, sha256: str, *, tenant: str) -> DecodedImage | None:
        """``tenant``'s stored image of that content (``None``: it has none)."""
        try:
            return (await self._store().images(tenant, [sha256])).get(sha256)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def messages(self, run_id: str) -> list[Message]:
        try:
            return await self._store().run_messages(run_id)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def conversation(
        self, conversation_id: str, *, tenant: str, limit: int, max_bytes: int, before: tuple[str, int] | None
    ) -> ConversationRecord | None:
        """A page of the tenant's conversation (see ``RunStore.get_conversation``); a ``before`` that names no run
        of it is a 400."""
        try:
            return await self._store().get_conversation(
                conversation_id, tenant=tenant, limit=limit, max_bytes=max_bytes, before=before
            )
        except UnknownCursor:
            raise ApiError(400, "invalid_request", "before is not a cursor of this conversation.") from None
        except StoreError as error:
            raise store_unavailable(error) from None

    async def conversations(self, limit: int, *, tenant: str) -> list[ConversationSummary]:
        """The tenant's conversations updated last, newest first. Read only: a run abandoned long ago shows as it was
        stored until a replica's keeper fails it (its sweep does, every ``lease_seconds / 3``)."""
        try:
            return await self._store().list_conversations(limit, tenant=tenant)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def usage(self, tenant: str, start: datetime, end: datetime, *, user: str | None) -> list[ModelUsage]:
        """The tenant's (or its end user's) LLM calls over ``[start, end)``, summed per model."""
        try:
            return await self._store().usage_by_model(tenant, start, end, user=user)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def audit(
        self, tenant: str, where: AuditFilter, *, limit: int, after: AuditCursor | None
    ) -> tuple[list[AuditedCall], AuditCursor | None]:
        """A page of the tenant's tool-call audit log, newest first, and the next page's cursor."""
        try:
            return await self._store().audited_calls(tenant, where, limit=limit, after=after)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def log_usage(self, caller: Caller, call: LlmCall) -> None:
        """Log an LLM call made outside a run (a run's calls are logged with its steps). Without a store, nothing; a
        store that fails is logged, not raised: the call was made and answered, its answer is not thrown away."""
        if self._runs.store is None:
            return
        try:
            await self._runs.store.log_usage(call, tenant=caller.tenant, user=caller.user, caller=caller.name)
        except StoreError as error:
            _log.warning("usage_not_logged", model=call.model, error=str(error))

    async def _events_after(self, run_id: str, after: int) -> list[StoredEvent]:
        try:
            return await self._store().events_after(run_id, after, limit=1)
        except StoreError as error:
            raise store_unavailable(error) from None

    async def cancel(self, run_id: str, *, tenant: str) -> RunRecord | None:
        """Stop the run wherever it executes: here at once, on another replica when it next renews its lease.
        ``None``: no such run of ``tenant`` (a run's tenant never changes, so checking first is enough)."""
        store = self._store()
        if await self.get(run_id, tenant=tenant) is None:
            return None
        local = self._runs.active.get(run_id)
        try:
            record = await store.request_cancel(run_id)
        except StoreError as error:
            raise store_unavailable(error) from None
        if local is not None:
            local.stop("cancelled")
            with anyio.move_on_after(_WAIT_FOR_CANCEL_SECONDS):
                await local.journal.ended.wait()
            record = await self.get(run_id)
        return record
