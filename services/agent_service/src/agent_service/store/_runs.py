"""The store's runs (tables ``runs``, ``run_messages``, ``run_events``): a run stored as it begins, written step by
step by its lease's owner, read back.

A run of a conversation takes its conversation (``_conversations.take_conversation``) in the same transaction, and
only if the conversation has room for it (``_check_room``: its limits bound what a new run may add).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.store._conversations import (
    MESSAGES_OF_RUNS,
    conversation_messages,
    in_conversation,
    runs_of,
    size_of_message,
    take_conversation,
)
from agent_service.store._engine import new_run_on_driver, write_step
from agent_service.store._rows import read_messages, read_run, utc_now
from agent_service.store.records import (
    ConversationFull,
    ConversationLimits,
    ConversationTooLarge,
    LeaseLost,
    NewRun,
    RunRecord,
    Step,
    StoredEvent,
)
from agent_service.store.schema import run_events, run_messages, runs
from suite_common.sql import Database
from suite_common.wire import Message

__all__ = ["StoredRuns"]

_FINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


_INSERT_RUN = runs.insert()
_INSERT_MESSAGES = run_messages.insert()


def _message_json(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json", by_alias=True, exclude_none=True)


def _lease_lost(run_id: str, owner: str | None) -> LeaseLost:
    return LeaseLost(
        f"Run {run_id} is no longer held by {owner}: another replica took it over, or it has ended."
        if owner is not None
        else f"Run {run_id} has already ended."
    )


def _stored_bytes(message: Message) -> int:
    """The bytes of ``message`` as the store keeps it: compact JSON in UTF-8, as a step writes a message and as the
    engines' JSON serializer (``compact_json``) writes a run's input."""
    return len(message.model_dump_json(by_alias=True, exclude_none=True).encode())


def _check_room(
    connection: Connection, tenant: str, conversation_id: str, adding: int, limits: ConversationLimits
) -> None:
    """Raise ``ConversationFull`` or ``ConversationTooLarge`` when a run adding ``adding`` bytes would take the
    conversation past ``limits``: every run counts, the messages of those part of it (``in_conversation``)."""
    started = connection.execute(
        sa.select(sa.func.count()).select_from(runs).where(*runs_of(tenant, conversation_id))
    ).scalar_one()
    if started >= limits.max_runs:
        raise ConversationFull(conversation_id, runs=started, limit=limits.max_runs)
    stored = connection.execute(
        sa.select(sa.func.coalesce(sa.func.sum(size_of_message(connection)), 0))
        .select_from(MESSAGES_OF_RUNS)
        .where(*runs_of(tenant, conversation_id), in_conversation())
    ).scalar_one()
    if stored + adding > limits.max_bytes:
        raise ConversationTooLarge(conversation_id, stored=int(stored), adding=adding, limit=limits.max_bytes)


class StoredRuns:
    """The runs part of ``RunStore``: each method one transaction on ``_db``."""

    _db: Database

    async def create_run(
        self, run: NewRun, *, owner: str, lease_seconds: float, limits: ConversationLimits | None = None
    ) -> list[Message]:
        """Store a new run, status ``processing``, leased to ``owner``, with its input messages; creates its
        conversation when the id is new. Returns the conversation's earlier messages (every earlier run's, in
        order, but those of runs that failed before the model answered; empty without a conversation). A
        conversation is the run's tenant's: the same id of another tenant is another conversation. Raises (storing
        nothing) ``ConversationBusy`` when the conversation has an active run, ``ConversationFull`` or
        ``ConversationTooLarge`` when the run would take it past ``limits``."""
        what = f"store the new run {run.run_id}"
        if await new_run_on_driver(self._db, what, run, owner=owner, lease_seconds=lease_seconds):
            return []
        # A run of a conversation always has its tenant stored: the key of its conversation.
        tenant = run.tenant if run.conversation_id is None else (run.tenant or DEFAULT_TENANT)
        adding = sum(_stored_bytes(message) for message in run.input_messages) if limits is not None else 0

        def create(connection: Connection) -> list[Message]:
            now = utc_now()
            earlier: list[Message] = []
            if run.conversation_id is not None:
                take_conversation(connection, run, tenant or DEFAULT_TENANT, run.conversation_id, now)
                if limits is not None:
                    _check_room(connection, tenant or DEFAULT_TENANT, run.conversation_id, adding, limits)
                earlier = conversation_messages(connection, tenant or DEFAULT_TENANT, run.conversation_id)
            # The values as parameters of one statement made once, not in ``values()``: a statement that holds
            # its values is built and its cache key computed again for every run.
            connection.execute(
                _INSERT_RUN,
                {
                    "run_id": run.run_id,
                    "conversation_id": run.conversation_id,
                    "caller": run.caller,
                    "tenant": tenant,
                    "user_id": run.user,
                    "user_role": run.user_role,
                    "model": run.model,
                    "status": "processing",
                    "iterations": 0,
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "plan": run.plan,
                    "created_at": now,
                    "updated_at": now,
                    "lease_owner": owner,
                    "lease_expires_at": now + timedelta(seconds=lease_seconds),
                    "resumes": 0,
                    "cancel_requested": False,
                    "last_seq": 0,
                },
            )
            if run.input_messages:
                connection.execute(
                    _INSERT_MESSAGES,
                    [
                        {"run_id": run.run_id, "position": position, "message": _message_json(message)}
                        for position, message in enumerate(run.input_messages)
                    ],
                )
            return earlier

        return await self._db.run(what, create, write=True)

    async def record(self, run_id: str, step: Step, *, owner: str) -> None:
        """Write one step in one transaction: upsert its messages, insert its events, update the run's status and
        counters (and ``updated_at``). Raises ``LeaseLost`` (writing nothing) when ``owner`` no longer holds the
        run's lease or the run is no longer active."""
        if not await write_step(self._db, f"store a step of run {run_id}", run_id, step, owner=owner, release=False):
            raise _lease_lost(run_id, owner)

    async def finish(self, run_id: str, step: Step, *, owner: str | None) -> None:
        """``record`` for a final step; with ``owner=None`` whatever holds the lease (a run failed by the sweeper,
        a cancel for a run nobody runs). Clears the lease. Raises ``LeaseLost`` (writing nothing) when ``owner``
        no longer holds the run, or when the run has ended already (a final run is left as it is)."""
        if step.status not in _FINAL_STATUSES:
            raise ValueError(f"finish() takes a final status (completed, failed or cancelled), not {step.status!r}.")
        if not await write_step(self._db, f"store the end of run {run_id}", run_id, step, owner=owner, release=True):
            raise _lease_lost(run_id, owner)

    # --- reading --------------------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._db.run(f"read run {run_id}", lambda connection: read_run(connection, run_id), write=False)

    async def run_messages(self, run_id: str) -> list[Message]:
        """The run's own messages (input, then what the run added), by position."""
        query = (
            sa.select(run_messages.c.message).where(run_messages.c.run_id == run_id).order_by(run_messages.c.position)
        )
        return await self._db.run(
            f"read the messages of run {run_id}", lambda connection: read_messages(connection, query), write=False
        )

    async def earlier_messages(self, run_id: str) -> list[Message]:
        """The messages of the run's conversation that came before it (empty without a conversation)."""
        this_run = sa.select(runs.c.tenant, runs.c.conversation_id, runs.c.id).where(runs.c.run_id == run_id).subquery()
        query = (
            sa.select(run_messages.c.message)
            .join(runs, runs.c.run_id == run_messages.c.run_id)
            .join(
                this_run,
                sa.and_(
                    runs.c.tenant == this_run.c.tenant,
                    runs.c.conversation_id == this_run.c.conversation_id,
                    runs.c.id < this_run.c.id,
                ),
            )
            .where(in_conversation())
            .order_by(runs.c.id, run_messages.c.position)
        )
        return await self._db.run(
            f"read the conversation before run {run_id}",
            lambda connection: read_messages(connection, query),
            write=False,
        )

    async def events_after(self, run_id: str, after: int, *, limit: int = 1000) -> list[StoredEvent]:
        """Stored events with ``seq > after``, in order, at most ``limit``."""
        query = (
            sa.select(run_events.c.seq, run_events.c.type, run_events.c.data)
            .where(run_events.c.run_id == run_id, run_events.c.seq > after)
            .order_by(run_events.c.seq)
            .limit(limit)
        )

        def read(connection: Connection) -> list[StoredEvent]:
            return [StoredEvent(seq=row.seq, type=row.type, data=row.data) for row in connection.execute(query)]

        return await self._db.run(f"read the events of run {run_id}", read, write=False)
