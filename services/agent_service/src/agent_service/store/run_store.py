"""The run store: one class over SQLAlchemy Core, for SQLite and PostgreSQL (asyncpg).

Every method is one short transaction. Every failure of the database surfaces as ``StoreError``
(``LeaseLost`` and ``ConversationBusy`` are its kinds), never as a driver's own exception.
Times are the replica's wall clock, in UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite

from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.store._engine import Database, database_url, open_database
from agent_service.store._migrations import current_revision, head_revision, upgrade
from agent_service.store.caller_keys import CallerKeyStore
from agent_service.store.records import (
    ACTIVE_STATUSES,
    ConversationBusy,
    ConversationFull,
    ConversationLimits,
    ConversationRecord,
    ConversationSummary,
    ConversationTooLarge,
    LeaseLost,
    ModelUsage,
    NewRun,
    RunRecord,
    Step,
    StoredEvent,
    StoreError,
    UnknownCursor,
)
from agent_service.store.schema import conversations, run_events, run_messages, runs, usage_log
from suite_common.wire import ConversationSettings, Message, RunError, RunErrorDetail, Usage, dump

if TYPE_CHECKING:
    from agent_service.core.run import LlmCall

__all__ = ["RunStore"]

_FINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


_INSERT_RUN = runs.insert()
_INSERT_MESSAGES = run_messages.insert()
_INSERT_USAGE = usage_log.insert()


_USAGE_SUMS = (
    sa.func.coalesce(sa.func.sum(usage_log.c.input_tokens), 0).label("input_tokens"),
    sa.func.coalesce(sa.func.sum(usage_log.c.output_tokens), 0).label("output_tokens"),
    # NULL when no call had a price (SUM skips NULLs, and is NULL over none).
    sa.func.sum(usage_log.c.cost_usd).label("cost_usd"),
)


def _usage_of(tenant: str, user: str | None) -> list[sa.ColumnElement[bool]]:
    """The usage log rows of ``tenant`` (and of ``user``): the index's leading columns, as equalities."""
    conditions = [usage_log.c.tenant == tenant]
    if user is not None:
        conditions.append(usage_log.c.user_id == user)
    return conditions


def _usage(row: sa.Row[Any]) -> Usage:
    cost = row.cost_usd
    return Usage(
        input_tokens=int(row.input_tokens),
        output_tokens=int(row.output_tokens),
        cost_usd=float(cost) if cost is not None else None,
    )


def _now() -> datetime:
    return datetime.now(UTC)


def _message_json(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json", by_alias=True, exclude_none=True)


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


def _abandoned_message(abandoned_for: timedelta) -> str:
    seconds = max(0, round(abandoned_for.total_seconds()))
    return (
        f"The run was abandoned: no replica of agent-service held it for more than {seconds} seconds (the one "
        "running it stopped and no other took it over in time). Start the run again."
    )


class RunStore:
    """The durable runs of agent-service: their messages, events, leases, and the conversations they belong to.

    Each method runs one transaction, written as a plain function of a ``Connection`` (``_engine.Database`` runs
    it on the backend's terms)."""

    def __init__(self, database: Database) -> None:
        """Use ``RunStore.open``."""
        self._db = database
        # Creating a conversation only when new needs the dialect's own INSERT (ON CONFLICT DO NOTHING).
        self._insert = postgresql.insert if database.backend == "postgresql" else sqlite.insert

    @classmethod
    async def open(cls, url: str, *, migrate: bool = True) -> RunStore:
        """``url``: ``sqlite:///path`` (the folder is created) or ``postgresql://...``; the drivers are chosen
        here. ``migrate``: bring the schema to the newest revision first (Alembic; several replicas starting at
        once take turns); without, a schema at another revision is a ``StoreError`` that says what to run."""
        database = open_database(database_url(url))
        try:
            if migrate:
                await upgrade(database)
            else:
                await _check_revision(database)
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

    # --- a run's life ---------------------------------------------------------------------------------

    async def create_run(
        self, run: NewRun, *, owner: str, lease_seconds: float, limits: ConversationLimits | None = None
    ) -> list[Message]:
        """Store a new run, status ``processing``, leased to ``owner``, with its input messages; creates its
        conversation when the id is new. Returns the conversation's earlier messages (every earlier run's, in
        order, but those of runs that failed before the model answered; empty without a conversation). A
        conversation is the run's tenant's: the same id of another tenant is another conversation. Raises (storing
        nothing) ``ConversationBusy`` when the conversation has an active run, ``ConversationFull`` or
        ``ConversationTooLarge`` when the run would take it past ``limits``."""
        # A run of a conversation always has its tenant stored: the key of its conversation.
        tenant = run.tenant if run.conversation_id is None else (run.tenant or DEFAULT_TENANT)
        adding = sum(_stored_bytes(message) for message in run.input_messages) if limits is not None else 0

        def create(connection: Connection) -> list[Message]:
            now = _now()
            earlier: list[Message] = []
            if run.conversation_id is not None:
                self._take_conversation(connection, run, tenant or DEFAULT_TENANT, run.conversation_id, now)
                if limits is not None:
                    _check_room(connection, tenant or DEFAULT_TENANT, run.conversation_id, adding, limits)
                earlier = _conversation_messages(connection, tenant or DEFAULT_TENANT, run.conversation_id)
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

        return await self._db.run(f"store the new run {run.run_id}", create, write=True)

    def _take_conversation(
        self, connection: Connection, run: NewRun, tenant: str, conversation_id: str, now: datetime
    ) -> None:
        """Create the tenant's conversation if new, lock its row (PostgreSQL), and check that no run of it is active
        (``ConversationBusy``)."""
        connection.execute(
            self._insert(conversations)
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
            .where(*_runs_of(tenant, conversation_id), runs.c.status.in_(ACTIVE_STATUSES))
            .limit(1)
        ).scalar_one_or_none()
        if active is not None:
            raise ConversationBusy(conversation_id, active)
        changes: dict[str, Any] = {"updated_at": now}
        if run.settings is not None:
            changes["settings"] = _settings_json(_merged_settings(stored, run.settings))
        connection.execute(conversations.update().where(*key).values(**changes))

    async def record(self, run_id: str, step: Step, *, owner: str) -> None:
        """Write one step in one transaction: upsert its messages, insert its events, update the run's status and
        counters (and ``updated_at``). Raises ``LeaseLost`` (writing nothing) when ``owner`` no longer holds the
        run's lease or the run is no longer active."""
        if not await self._db.write_step(f"store a step of run {run_id}", run_id, step, owner=owner, release=False):
            raise _lease_lost(run_id, owner)

    async def finish(self, run_id: str, step: Step, *, owner: str | None) -> None:
        """``record`` for a final step; with ``owner=None`` whatever holds the lease (a run failed by the sweeper,
        a cancel for a run nobody runs). Clears the lease. Raises ``LeaseLost`` (writing nothing) when ``owner``
        no longer holds the run, or when the run has ended already (a final run is left as it is)."""
        if step.status not in _FINAL_STATUSES:
            raise ValueError(f"finish() takes a final status (completed, failed or cancelled), not {step.status!r}.")
        if not await self._db.write_step(f"store the end of run {run_id}", run_id, step, owner=owner, release=True):
            raise _lease_lost(run_id, owner)

    # --- reading --------------------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._db.run(f"read run {run_id}", lambda connection: _get_run(connection, run_id), write=False)

    async def run_messages(self, run_id: str) -> list[Message]:
        """The run's own messages (input, then what the run added), by position."""
        query = (
            sa.select(run_messages.c.message).where(run_messages.c.run_id == run_id).order_by(run_messages.c.position)
        )
        return await self._db.run(
            f"read the messages of run {run_id}", lambda connection: _messages(connection, query), write=False
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
            .where(_in_conversation())
            .order_by(runs.c.id, run_messages.c.position)
        )
        return await self._db.run(
            f"read the conversation before run {run_id}", lambda connection: _messages(connection, query), write=False
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
            conditions = [*_runs_of(tenant, conversation_id), _in_conversation()]
            if before is not None:
                cursor_run = connection.execute(
                    sa.select(runs.c.id).where(*_runs_of(tenant, conversation_id), runs.c.run_id == before[0])
                ).scalar_one_or_none()
                if cursor_run is None:
                    raise UnknownCursor(f"{before[0]} is no run of conversation {conversation_id}.")
                conditions.append(_message_order() < _message_at(cursor_run, before[1]))
            earlier: tuple[str, int] | None = None
            if limit is not None:
                keys = connection.execute(
                    sa.select(runs.c.id, runs.c.run_id, run_messages.c.position, _size_of_message(connection))
                    .select_from(_MESSAGES_OF_RUNS)
                    .where(*conditions)
                    .order_by(runs.c.id.desc(), run_messages.c.position.desc())
                    .limit(limit + 1)
                ).all()
                taken = _page_length(keys, limit, max_bytes)
                if taken == 0:
                    return None if before is None else _empty_page(row)
                first = keys[taken - 1]
                if taken < len(keys):
                    earlier = (first.run_id, first.position)
                conditions.append(_message_order() >= _message_at(first.id, first.position))
            pairs = connection.execute(
                sa.select(runs.c.run_id, run_messages.c.message)
                .select_from(_MESSAGES_OF_RUNS)
                .where(*conditions)
                .order_by(runs.c.id, run_messages.c.position)
            ).all()
            if not pairs and before is None:
                return None
            of_page = {pair.run_id for pair in pairs}
            of_runs = sa.select(runs).where(*_runs_of(tenant, conversation_id), runs.c.run_id.in_(of_page))
            run_rows = connection.execute(of_runs.order_by(runs.c.id))
            return ConversationRecord(
                conversation_id=row.conversation_id,
                created_at=row.created_at,
                updated_at=row.updated_at,
                messages=[Message.model_validate(pair.message) for pair in pairs],
                runs=[_run_record(run_row) for run_row in run_rows],
                earlier=earlier,
                settings=_stored_settings(row.settings),
            )

        return await self._db.run(f"read conversation {conversation_id}", read, write=False)

    async def list_conversations(self, limit: int, *, tenant: str | None = None) -> list[ConversationSummary]:
        """The ``limit`` conversations updated last (of ``tenant`` only, unless ``None``), newest first: each with
        its run count, its newest run's status and its first user message's text, in one query (correlated
        subqueries that the index on ``runs (conversation_id, id)`` answers; the message's ``content`` is read out
        of its JSON by the database, so no message is loaded whole)."""
        of_conversation = sa.and_(
            runs.c.tenant == conversations.c.tenant,
            runs.c.conversation_id == conversations.c.conversation_id,
            _in_conversation(),
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

    # --- usage ----------------------------------------------------------------------------------------

    async def usage_by_model(
        self, tenant: str, start: datetime, end: datetime, *, user: str | None = None
    ) -> list[ModelUsage]:
        """The usage log of ``tenant`` (of its end user ``user`` only, unless ``None``) over ``[start, end)``, summed
        per model, by model name: one aggregate query over the index on ``(tenant, [user_id,] created_at)``."""
        query = (
            sa.select(usage_log.c.model, sa.func.count().label("calls"), *_USAGE_SUMS)
            .where(*_usage_of(tenant, user), usage_log.c.created_at >= start, usage_log.c.created_at < end)
            .group_by(usage_log.c.model)
            .order_by(usage_log.c.model)
        )

        def read(connection: Connection) -> list[ModelUsage]:
            rows = connection.execute(query)
            return [ModelUsage(model=row.model, calls=row.calls, usage=_usage(row)) for row in rows]

        return await self._db.run(f"sum the usage of tenant {tenant}", read, write=False)

    async def log_usage(self, call: LlmCall, *, tenant: str, user: str | None, caller: str | None) -> None:
        """One usage log row for an LLM call made outside any stored run (a plain completion of the OpenAI front;
        a run's calls are logged with its steps). Its run, round and attempt are NULL: the log's unique key never
        matches it (NULLs are distinct under UNIQUE on both backends), so every such call is a row of its own."""
        row = {
            "tenant": tenant,
            "user_id": user,
            "caller": caller,
            "run_id": None,
            "model": call.model,
            "provider": call.provider or None,
            "input_tokens": call.usage.input_tokens,
            "output_tokens": call.usage.output_tokens,
            "cost_usd": call.usage.cost_usd,
            "estimated": call.estimated,
            "created_at": _now(),
        }
        await self._db.run(
            f"log the usage of tenant {tenant}", lambda connection: connection.execute(_INSERT_USAGE, row), write=True
        )

    async def usage_since(self, tenant: str, since: datetime, *, user: str | None = None) -> Usage:
        """The tokens and cost of ``tenant``'s LLM calls (of its end user ``user`` only, unless ``None``) since
        ``since``: where a monthly budget starts from."""
        query = sa.select(*_USAGE_SUMS).where(*_usage_of(tenant, user), usage_log.c.created_at >= since)

        def read(connection: Connection) -> Usage:
            return _usage(connection.execute(query).one())

        return await self._db.run(f"sum the usage of tenant {tenant}", read, write=False)

    # --- leases ---------------------------------------------------------------------------------------

    async def request_cancel(self, run_id: str) -> RunRecord | None:
        """Mark the run's cancel request (the owner sees it when it renews its leases); ``None`` for an unknown id.
        A run already final is returned unchanged."""

        def mark(connection: Connection) -> RunRecord | None:
            connection.execute(
                runs.update()
                .where(runs.c.run_id == run_id, runs.c.status.in_(ACTIVE_STATUSES), runs.c.cancel_requested.is_(False))
                .values(cancel_requested=True, updated_at=_now())
            )
            return _get_run(connection, run_id)

        return await self._db.run(f"request the cancel of run {run_id}", mark, write=True)

    async def renew_leases(self, owner: str, run_ids: list[str], *, lease_seconds: float) -> set[str]:
        """Push the lease of ``owner``'s active runs among ``run_ids`` to now + ``lease_seconds``. Returns the ids
        among them whose cancel was requested, and those ``owner`` no longer holds (taken over, or no longer
        active): both stop."""
        if not run_ids:
            return set()

        def renew(connection: Connection) -> dict[str, bool]:
            # A run being cancelled keeps its lease too: its owner still has to finish it.
            result = connection.execute(
                runs.update()
                .where(runs.c.run_id.in_(run_ids), runs.c.lease_owner == owner, runs.c.status.in_(ACTIVE_STATUSES))
                .values(lease_expires_at=_now() + timedelta(seconds=lease_seconds))
                .returning(runs.c.run_id, runs.c.cancel_requested)
            )
            return {row.run_id: bool(row.cancel_requested) for row in result}

        held = await self._db.run(f"renew the leases of {owner}", renew, write=True)
        return {run_id for run_id in run_ids if held.get(run_id, True)}

    async def release(self, owner: str, run_ids: list[str]) -> None:
        """Let another replica take these runs at once (the lease expires now): a replica shutting down."""
        if not run_ids:
            return

        def release(connection: Connection) -> None:
            connection.execute(
                runs.update()
                .where(runs.c.run_id.in_(run_ids), runs.c.lease_owner == owner, runs.c.status.in_(ACTIVE_STATUSES))
                .values(lease_expires_at=_now())
            )

        await self._db.run(f"release the runs of {owner}", release, write=True)

    async def claim_expired(
        self, owner: str, *, lease_seconds: float, abandon_before: datetime, limit: int
    ) -> list[RunRecord]:
        """Take over active runs whose lease has expired: owner, lease and ``resumes + 1`` set, returned. Several
        replicas claim at once without taking the same run twice (``FOR UPDATE SKIP LOCKED`` on PostgreSQL).
        A run whose lease expired before ``abandon_before`` is not claimed but marked ``failed`` with the error
        ``abandoned`` (see ``fail_abandoned``)."""

        def claim(connection: Connection) -> list[RunRecord]:
            now = _now()
            _fail_abandoned(connection, abandon_before=abandon_before, now=now)
            expired = (
                connection.execute(
                    sa.select(runs.c.run_id)
                    .where(runs.c.status.in_(ACTIVE_STATUSES), runs.c.lease_expires_at < now)
                    .order_by(runs.c.lease_expires_at)
                    .limit(limit)
                    # Rows another replica is claiming right now are skipped, not waited for nor taken twice.
                    .with_for_update(skip_locked=True)
                )
                .scalars()
                .all()
            )
            if not expired:
                return []
            result = connection.execute(
                runs.update()
                # The same conditions again: a run is never taken over unless it is still active and expired.
                .where(runs.c.run_id.in_(expired), runs.c.status.in_(ACTIVE_STATUSES), runs.c.lease_expires_at < now)
                .values(
                    lease_owner=owner,
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                    resumes=runs.c.resumes + 1,
                    updated_at=now,
                )
                .returning(*runs.c)
            )
            claimed = {row.run_id: _run_record(row) for row in result}
            return [claimed[run_id] for run_id in expired if run_id in claimed]

        return await self._db.run(f"claim expired runs for {owner}", claim, write=True)

    async def fail_abandoned(self, *, abandon_before: datetime) -> int:
        """Mark ``failed`` (error ``abandoned``: no replica held the run's lease for too long) every active run whose
        lease expired before ``abandon_before``, with an ``error`` event appended; returns how many."""
        return await self._db.run(
            "fail abandoned runs",
            lambda connection: _fail_abandoned(connection, abandon_before=abandon_before, now=_now()),
            write=True,
        )


async def _check_revision(database: Database) -> None:
    current, head = await current_revision(database), head_revision()
    if current != head:
        raise StoreError(
            f"The run store's database schema is at revision {current or 'none (empty database)'}, this version "
            f"needs {head}: run python -m agent_service.store.migrate, or start with AGENT_DATABASE_MIGRATE=true."
        )


# --- the transactions' parts ----------------------------------------------------------------------------


def _lease_lost(run_id: str, owner: str | None) -> LeaseLost:
    return LeaseLost(
        f"Run {run_id} is no longer held by {owner}: another replica took it over, or it has ended."
        if owner is not None
        else f"Run {run_id} has already ended."
    )


def _fail_abandoned(connection: Connection, *, abandon_before: datetime, now: datetime) -> int:
    # SKIP LOCKED: a run another replica is claiming or failing right now is left to it (no waiting, and no
    # deadlock between two sweepers that would lock the same runs in another order).
    abandoned = connection.execute(
        sa.select(runs.c.run_id, runs.c.last_seq)
        .where(runs.c.status.in_(ACTIVE_STATUSES), runs.c.lease_expires_at < abandon_before)
        .with_for_update(skip_locked=True)
    ).all()
    if not abandoned:
        return 0
    message = _abandoned_message(now - abandon_before)
    for run_id, last_seq in abandoned:
        connection.execute(
            runs.update()
            .where(runs.c.run_id == run_id)
            .values(
                status="failed",
                finish_reason="error",
                error_code="abandoned",
                error_message=message,
                lease_owner=None,
                lease_expires_at=None,
                last_seq=last_seq + 1,
                updated_at=now,
            )
        )
    # The run's last event, so that a client following the stream sees it end.
    connection.execute(
        run_events.insert(),
        [
            {
                "run_id": run_id,
                "seq": last_seq + 1,
                "type": "error",
                "data": dump(RunError(run_id=run_id, code="abandoned", message=message)),
            }
            for run_id, last_seq in abandoned
        ],
    )
    return len(abandoned)


def _get_run(connection: Connection, run_id: str) -> RunRecord | None:
    row = connection.execute(sa.select(runs).where(runs.c.run_id == run_id)).one_or_none()
    return None if row is None else _run_record(row)


def _messages(connection: Connection, query: sa.Select[tuple[Any]]) -> list[Message]:
    return [Message.model_validate(message) for message in connection.execute(query).scalars()]


def _conversation_key(tenant: str, conversation_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    return conversations.c.tenant == tenant, conversations.c.conversation_id == conversation_id


def _runs_of(tenant: str, conversation_id: str) -> tuple[sa.ColumnElement[bool], ...]:
    """The runs of ``tenant``'s conversation: the leading columns of the index on ``runs``, as equalities."""
    return runs.c.tenant == tenant, runs.c.conversation_id == conversation_id


_MESSAGES_OF_RUNS = run_messages.join(runs, runs.c.run_id == run_messages.c.run_id)
_ANSWERS = run_messages.alias("answers")


def _in_conversation() -> sa.ColumnElement[bool]:
    """Whether a run (a row of ``runs`` in the query) is part of its conversation: unless it failed before the
    model answered it (refused by the provider, or by completion-service for its size, or its service gone): what
    it sent is then not sent again with every later run, nor counted in the conversation's size, nor shown."""
    answered = (
        sa.exists()
        .where(_ANSWERS.c.run_id == runs.c.run_id, _ANSWERS.c.message["role"].as_string() == "assistant")
        .correlate(runs)
    )
    return sa.or_(runs.c.status != "failed", answered)


def _conversation_messages(connection: Connection, tenant: str, conversation_id: str) -> list[Message]:
    return _messages(
        connection,
        sa.select(run_messages.c.message)
        .select_from(_MESSAGES_OF_RUNS)
        .where(*_runs_of(tenant, conversation_id), _in_conversation())
        .order_by(runs.c.id, run_messages.c.position),
    )


def _message_order() -> sa.Tuple:
    """A message's place in its conversation: its run's (row id, order of creation), then its position."""
    return sa.tuple_(runs.c.id, run_messages.c.position)


def _message_at(run: int, position: int) -> sa.Tuple:
    return sa.tuple_(sa.literal(run), sa.literal(position))


def _stored_bytes(message: Message) -> int:
    """The bytes of ``message`` as the store keeps it: compact JSON in UTF-8, as a step writes a message and as the
    engines' JSON serializer (``compact_json``) writes a run's input."""
    return len(message.model_dump_json(by_alias=True, exclude_none=True).encode())


def _size_of_message(connection: Connection) -> sa.ColumnElement[int]:
    """The bytes of a stored message's JSON, measured by the database (the message itself is not read)."""
    if connection.dialect.name == "postgresql":
        return sa.func.octet_length(sa.cast(run_messages.c.message, sa.Text)).label("size")
    return sa.func.length(sa.cast(run_messages.c.message, sa.LargeBinary)).label("size")


def _check_room(
    connection: Connection, tenant: str, conversation_id: str, adding: int, limits: ConversationLimits
) -> None:
    """Raise ``ConversationFull`` or ``ConversationTooLarge`` when a run adding ``adding`` bytes would take the
    conversation past ``limits``: every run counts, the messages of those part of it (``_in_conversation``)."""
    started = connection.execute(
        sa.select(sa.func.count()).select_from(runs).where(*_runs_of(tenant, conversation_id))
    ).scalar_one()
    if started >= limits.max_runs:
        raise ConversationFull(conversation_id, runs=started, limit=limits.max_runs)
    stored = connection.execute(
        sa.select(sa.func.coalesce(sa.func.sum(_size_of_message(connection)), 0))
        .select_from(_MESSAGES_OF_RUNS)
        .where(*_runs_of(tenant, conversation_id), _in_conversation())
    ).scalar_one()
    if stored + adding > limits.max_bytes:
        raise ConversationTooLarge(conversation_id, stored=int(stored), adding=adding, limit=limits.max_bytes)


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


def _empty_page(row: sa.Row[Any]) -> ConversationRecord:
    return ConversationRecord(
        conversation_id=row.conversation_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        messages=[],
        runs=[],
        settings=_stored_settings(row.settings),
    )


def _run_record(row: sa.Row[Any]) -> RunRecord:
    error = RunErrorDetail(code=row.error_code, message=row.error_message or "") if row.error_code is not None else None
    return RunRecord(
        run_id=row.run_id,
        conversation_id=row.conversation_id,
        caller=row.caller,
        tenant=row.tenant,
        user=row.user_id,
        model=row.model,
        status=row.status,
        iterations=row.iterations,
        usage=Usage(input_tokens=row.input_tokens, output_tokens=row.output_tokens, cost_usd=row.cost_usd),
        finish_reason=row.finish_reason,
        budget=row.budget,
        error=error,
        plan=row.plan,
        created_at=row.created_at,
        updated_at=row.updated_at,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        resumes=row.resumes,
        cancel_requested=bool(row.cancel_requested),
        last_seq=row.last_seq,
    )
