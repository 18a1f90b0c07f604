"""The store's conversations (table ``conversations``, and the runs that belong to each): taken by a new run
(created when new, refused while a run of it is active), read whole or in pages, listed.

A conversation is its tenant's (keyed by tenant and id) and holds the messages of its runs, run after run, but those
of a run that failed before the model answered it (``in_conversation``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite

from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.store._rows import read_messages, run_record
from agent_service.store.records import (
    UNFINISHED_STATUSES,
    ConversationBusy,
    ConversationRecord,
    ConversationSummary,
    NewRun,
    RunRecord,
    UnknownCursor,
)
from agent_service.store.schema import conversations, run_messages, runs
from suite_common.sql import Database
from suite_common.wire import ConversationSettings, Message

__all__ = [
    "MESSAGES_OF_RUNS",
    "StoredConversations",
    "conversation_messages",
    "in_conversation",
    "runs_of",
    "size_of_message",
    "take_conversation",
]

MESSAGES_OF_RUNS = run_messages.join(runs, runs.c.run_id == run_messages.c.run_id)
_ANSWERS = run_messages.alias("answers")


def _settings_json(settings: ConversationSettings) -> dict[str, Any]:
    return settings.model_dump(mode="json", by_alias=True, exclude_none=True)


def _stored_settings(stored: Any) -> ConversationSettings | None:
    return ConversationSettings.model_validate(stored) if stored is not None else None


def _merged_settings(stored: Any, new: ConversationSettings) -> ConversationSettings:
    """A run's settings as its conversation's: the newest run's, but the system prompt the conversation started
    with stays (a later run's own system message does not replace the stored one in the model's context either)."""
    before = _stored_settings(stored)
    if before is None or before.system_prompt is None:
        return new
    return new.model_copy(update={"system_prompt": before.system_prompt})


def _conversation_key(tenant: str, conversation_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    return conversations.c.tenant == tenant, conversations.c.conversation_id == conversation_id


def runs_of(tenant: str, conversation_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    """The runs of ``tenant``'s conversation: the leading columns of the index on ``runs``, as equalities."""
    return runs.c.tenant == tenant, runs.c.conversation_id == conversation_id


def in_conversation() -> sa.ColumnElement[bool]:
    """Whether a run (a row of ``runs`` in the query) is part of its conversation: unless it failed before the
    model answered it (refused by the provider, or by completion-service for its size, or its service gone): what
    it sent is then not sent again with every later run, nor counted in the conversation's size, nor shown."""
    answered = (
        sa.exists()
        .where(_ANSWERS.c.run_id == runs.c.run_id, _ANSWERS.c.message["role"].as_string() == "assistant")
        .correlate(runs)
    )
    return sa.or_(runs.c.status != "failed", answered)


def conversation_messages(connection: Connection, tenant: str, conversation_id: str) -> list[Message]:
    return read_messages(
        connection,
        sa.select(run_messages.c.message)
        .select_from(MESSAGES_OF_RUNS)
        .where(*runs_of(tenant, conversation_id), in_conversation())
        .order_by(runs.c.id, run_messages.c.position),
    )


def take_conversation(connection: Connection, run: NewRun, tenant: str, conversation_id: str, now: datetime) -> None:
    """Create the tenant's conversation if new, lock its row (PostgreSQL), and check that no run of it is active
    (``ConversationBusy``)."""
    # Creating a conversation only when new needs the dialect's own INSERT (ON CONFLICT DO NOTHING).
    insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
    connection.execute(
        insert(conversations)
        .values(
            conversation_id=conversation_id,
            caller=run.caller,
            tenant=tenant,
            user_id=run.user,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=[conversations.c.tenant, conversations.c.conversation_id])
    )
    # Two creates for one conversation queue here on PostgreSQL (SQLite: the writing transaction holds the
    # database's one write lock already), so the second sees the first's run below.
    key = _conversation_key(tenant, conversation_id)
    stored = connection.execute(sa.select(conversations.c.settings).where(*key).with_for_update()).scalar_one()
    active = connection.execute(
        sa.select(runs.c.run_id)
        .where(*runs_of(tenant, conversation_id), runs.c.status.in_(UNFINISHED_STATUSES))
        .limit(1)
    ).scalar_one_or_none()
    if active is not None:
        raise ConversationBusy(conversation_id, active)
    changes: dict[str, Any] = {"updated_at": now}
    if run.settings is not None:
        changes["settings"] = _settings_json(_merged_settings(stored, run.settings))
    connection.execute(conversations.update().where(*key).values(**changes))


def _message_order() -> sa.Tuple:
    """A message's place in its conversation: its run's (row id, order of creation), then its position."""
    return sa.tuple_(runs.c.id, run_messages.c.position)


def _message_at(run: int, position: int) -> sa.Tuple:
    return sa.tuple_(sa.literal(run), sa.literal(position))


def size_of_message(connection: Connection) -> sa.ColumnElement[int]:
    """The bytes of a stored message's JSON, measured by the database (the message itself is not read)."""
    if connection.dialect.name == "postgresql":
        return sa.func.octet_length(sa.cast(run_messages.c.message, sa.Text)).label("size")
    return sa.func.length(sa.cast(run_messages.c.message, sa.LargeBinary)).label("size")


def _page_length(keys: Sequence[sa.Row[Any]], limit: int, max_bytes: int | None) -> int:
    """How many of ``keys`` (newest first, with their ``size``) a page takes: at most ``limit``, and no more once
    they hold ``max_bytes``, but at least one."""
    taken = total = 0
    for key in keys[:limit]:
        total += key.size
        if taken and max_bytes is not None and total > max_bytes:
            break
        taken += 1
    return taken


def _before(
    connection: Connection, tenant: str, conversation_id: str, before: tuple[str, int]
) -> sa.ColumnElement[bool]:
    """The messages of the conversation before the cursor ``before`` (``(run id, position)``); ``UnknownCursor``
    when its run is no run of the conversation."""
    cursor_run = connection.execute(
        sa.select(runs.c.id).where(*runs_of(tenant, conversation_id), runs.c.run_id == before[0])
    ).scalar_one_or_none()
    if cursor_run is None:
        raise UnknownCursor(f"{before[0]} is no run of conversation {conversation_id}.")
    return _message_order() < _message_at(cursor_run, before[1])


def _newest_keys(
    connection: Connection, conditions: Sequence[sa.ColumnElement[bool]], limit: int
) -> Sequence[sa.Row[Any]]:
    """The keys and sizes of the newest ``limit + 1`` messages that meet ``conditions``, newest first."""
    return connection.execute(
        sa.select(runs.c.id, runs.c.run_id, run_messages.c.position, size_of_message(connection))
        .select_from(MESSAGES_OF_RUNS)
        .where(*conditions)
        .order_by(runs.c.id.desc(), run_messages.c.position.desc())
        .limit(limit + 1)
    ).all()


def _conversation_record(
    row: sa.Row[Any],
    messages_of_page: list[Message],
    runs_of_page: list[RunRecord],
    earlier: tuple[str, int] | None = None,
) -> ConversationRecord:
    """The conversation of ``row`` (its row of ``conversations``) with a page of its messages and their runs."""
    return ConversationRecord(
        conversation_id=row.conversation_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        messages=messages_of_page,
        runs=runs_of_page,
        earlier=earlier,
        settings=_stored_settings(row.settings),
    )


class StoredConversations:
    """The conversations part of ``RunStore``: reading them (a run takes its conversation in ``create_run``)."""

    _db: Database

    async def get_conversation(
        self,
        conversation_id: str,
        *,
        tenant: str = DEFAULT_TENANT,
        limit: int | None = None,
        max_bytes: int | None = None,
        before: tuple[str, int] | None = None,
    ) -> ConversationRecord | None:
        """``tenant``'s conversation with its messages and runs; ``None`` for an id the tenant has not used (or
        used only for runs that failed before the model answered: they are no part of it).

        A page of it when ``limit`` is given: its newest ``limit`` messages before ``before`` (a ``(run id,
        position)`` from a page's ``earlier``; ``None``: the newest), fewer once they hold more than ``max_bytes``
        (at least one), in order, and the runs they belong to. Raises ``UnknownCursor`` for a ``before`` that names
        no run of the conversation. Only the page's messages are read: the keys and sizes of the others are."""

        def read(connection: Connection) -> ConversationRecord | None:
            query = sa.select(conversations).where(*_conversation_key(tenant, conversation_id))
            row = connection.execute(query).one_or_none()
            if row is None:
                return None
            conditions = [*runs_of(tenant, conversation_id), in_conversation()]
            if before is not None:
                conditions.append(_before(connection, tenant, conversation_id, before))
            earlier: tuple[str, int] | None = None
            if limit is not None:
                keys = _newest_keys(connection, conditions, limit)
                taken = _page_length(keys, limit, max_bytes)
                if taken == 0:
                    return None if before is None else _conversation_record(row, [], [])
                first = keys[taken - 1]
                if taken < len(keys):
                    earlier = (first.run_id, first.position)
                conditions.append(_message_order() >= _message_at(first.id, first.position))
            pairs = connection.execute(
                sa.select(runs.c.run_id, run_messages.c.message)
                .select_from(MESSAGES_OF_RUNS)
                .where(*conditions)
                .order_by(runs.c.id, run_messages.c.position)
            ).all()
            if not pairs and before is None:
                return None
            of_page = {pair.run_id for pair in pairs}
            of_runs = sa.select(runs).where(*runs_of(tenant, conversation_id), runs.c.run_id.in_(of_page))
            run_rows = connection.execute(of_runs.order_by(runs.c.id))
            page = [Message.model_validate(pair.message) for pair in pairs]
            return _conversation_record(row, page, [run_record(run_row) for run_row in run_rows], earlier)

        return await self._db.run(f"read conversation {conversation_id}", read, write=False)

    async def list_conversations(self, limit: int, *, tenant: str | None = None) -> list[ConversationSummary]:
        """The ``limit`` conversations updated last (of ``tenant`` only, unless ``None``), newest first: each with
        its run count, its newest run's status and its first user message's text, in one query (correlated
        subqueries that the index on ``runs (conversation_id, id)`` answers; the message's ``content`` is read out
        of its JSON by the database, so no message is loaded whole)."""
        of_conversation = sa.and_(
            runs.c.tenant == conversations.c.tenant,
            runs.c.conversation_id == conversations.c.conversation_id,
            in_conversation(),
        )
        run_count = sa.select(sa.func.count()).select_from(runs).where(of_conversation).scalar_subquery()
        latest_status = (
            sa.select(runs.c.status).where(of_conversation).order_by(runs.c.id.desc()).limit(1).scalar_subquery()
        )
        first_user_text = (
            sa.select(run_messages.c.message["content"].as_string())
            .join(runs, runs.c.run_id == run_messages.c.run_id)
            .where(of_conversation, run_messages.c.message["role"].as_string() == "user")
            .order_by(runs.c.id, run_messages.c.position)
            .limit(1)
            .scalar_subquery()
        )
        query = (
            sa.select(
                conversations.c.conversation_id,
                conversations.c.created_at,
                conversations.c.updated_at,
                conversations.c.settings,
                run_count.label("run_count"),
                latest_status.label("latest_status"),
                first_user_text.label("first_user_text"),
            )
            # A conversation whose runs all failed before the model answered has no run in it: it is not listed.
            # The query leaves it out, so that the limit counts listed conversations only.
            .where(sa.exists().where(of_conversation))
            .order_by(conversations.c.updated_at.desc(), conversations.c.conversation_id.desc())
            .limit(limit)
        )
        if tenant is not None:
            query = query.where(conversations.c.tenant == tenant)

        def read(connection: Connection) -> list[ConversationSummary]:
            return [
                ConversationSummary(
                    conversation_id=row.conversation_id,
                    created_at=row.created_at,
                    updated_at=row.updated_at,
                    first_user_text=row.first_user_text,
                    runs=row.run_count,
                    latest_status=row.latest_status,
                    settings=_stored_settings(row.settings),
                )
                for row in connection.execute(query)
            ]

        return await self._db.run("list the conversations", read, write=False)
