"""The run store's writes on PostgreSQL: a pool of connections that are kept (a burst of writes within its size
opens none), a new run in one statement stored as SQLAlchemy stored it, and a step's write that stores its messages,
events, usage rows and audit rows together, or none of them.

Each test has a PostgreSQL database of its own (``own_postgres_url``): the connections counted are the test's.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import anyio
import asyncpg
import pytest
import sqlalchemy as sa

from agent_service.core.run import LlmCall, ToolCallRecord
from agent_service.store import NewRun, RunStore, Step, StoredEvent, StoreError
from agent_service.store.schema import run_events, run_messages, tool_calls, usage_log
from suite_common.sql import PostgresDatabase
from suite_common.wire import Message, Usage
from support.processes import polled

pytestmark = pytest.mark.anyio

LEASE = 30.0
OWNER = "replica-a"


def new_run(*, conversation_id: str | None = None) -> NewRun:
    return NewRun(
        run_id=f"run_{uuid.uuid4().hex}",
        model="fake/model",
        plan={"tools": ["search"], "note": "Grüße, 東京"},
        input_messages=[
            Message(role="system", content="Be brief."),
            Message(role="user", content="Wie ist das Wetter in Zürich?"),
        ],
        conversation_id=conversation_id,
        caller="alice",
        tenant="acme",
        user="u-1",
        user_role="admin",
    )


async def backends(url: str) -> set[int]:
    """The server processes connected to the test's database for agent-service (its store's connections)."""
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 "
            "AND pid <> pg_backend_pid()",
            "agent-service",
        )
    finally:
        await connection.close()
    return {row["pid"] for row in rows}


async def burst(store: RunStore, run_ids: list[str], seq: int) -> None:
    """One step of each run, all at once."""

    async def write(run_id: str) -> None:
        await store.record(run_id, Step(events=[StoredEvent(seq, "text", "{}")]), owner=OWNER)

    async with anyio.create_task_group() as group:
        for run_id in run_ids:
            group.start_soon(write, run_id)


async def test_a_burst_of_writes_within_the_pool_opens_no_connection(own_postgres_url: str) -> None:
    store = await RunStore.open(own_postgres_url, pool_size=4)
    try:
        run_ids = []
        for _ in range(12):
            run = new_run()
            await store.create_run(run, owner=OWNER, lease_seconds=LEASE)
            run_ids.append(run.run_id)
        await burst(store, run_ids[:4], 1)  # the pool opens what a burst of its size needs
        database = store._db
        assert isinstance(database, PostgresDatabase)
        opened = database.driver_connections()
        before = await backends(own_postgres_url)
        for seq in range(2, 7):
            await burst(store, run_ids[:4], seq)
        # More writes at once than the pool holds wait for a connection: none is opened for them either.
        await burst(store, run_ids, 7)
        assert database.driver_connections() == opened <= 4
        assert await backends(own_postgres_url) == before
        events = await store.events_after(run_ids[-1], 0)
        assert [event.seq for event in events] == [7]
    finally:
        await store.aclose()


async def test_the_pool_is_closed_with_the_store(own_postgres_url: str) -> None:
    store = await RunStore.open(own_postgres_url, pool_size=2)
    await store.create_run(new_run(), owner=OWNER, lease_seconds=LEASE)
    assert await backends(own_postgres_url)
    await store.aclose()

    async def none_left() -> bool:
        return not await backends(own_postgres_url)

    await polled(none_left, 5.0)  # a backend ends a moment after its client closed it


async def test_a_new_run_in_one_statement_reads_back_as_one_stored_through_sqlalchemy(own_postgres_url: str) -> None:
    store = await RunStore.open(own_postgres_url)
    try:
        alone, in_conversation = new_run(), new_run(conversation_id="c-1")  # the second through SQLAlchemy
        assert await store.create_run(alone, owner=OWNER, lease_seconds=LEASE) == []
        assert await store.create_run(in_conversation, owner=OWNER, lease_seconds=LEASE) == []
        first, second = await store.get_run(alone.run_id), await store.get_run(in_conversation.run_id)
        assert first is not None
        assert second is not None
        assert (first.status, first.lease_owner, first.tenant, first.user, first.user_role, first.caller) == (
            "processing",
            OWNER,
            "acme",
            "u-1",
            "admin",
            "alice",
        )
        assert first.plan == second.plan == alone.plan
        assert first.lease_expires_at is not None
        assert first.lease_expires_at > datetime.now(UTC)
        assert await store.run_messages(alone.run_id) == alone.input_messages
        # The same bytes for the same message, whichever way it was written.
        stored = sa.select(run_messages.c.run_id, sa.cast(run_messages.c.message, sa.Text).label("text"))

        def texts(connection: sa.Connection) -> dict[str, list[str]]:
            rows: dict[str, list[str]] = {}
            for row in connection.execute(stored.order_by(run_messages.c.position)):
                rows.setdefault(row.run_id, []).append(row.text)
            return rows

        written = await store._db.run("read", texts, write=False)
        assert written[alone.run_id] == written[in_conversation.run_id]
        with pytest.raises(StoreError):  # a run id stored already: nothing more stored
            await store.create_run(alone, owner=OWNER, lease_seconds=LEASE)
        assert await store.run_messages(alone.run_id) == alone.input_messages
    finally:
        await store.aclose()


def llm_call(iteration: int, model: str = "fake/model") -> LlmCall:
    return LlmCall(model=model, provider="fake", usage=Usage(input_tokens=10, output_tokens=3), iteration=iteration)


def audited(iteration: int) -> ToolCallRecord:
    return ToolCallRecord(iteration, 0, f"call_{iteration}", "search", "docs", "ok", 4.0, datetime.now(UTC))


async def rows_of(store: RunStore, run_id: str) -> tuple[int, int, int, int]:
    """The run's stored messages, events, usage rows and audit rows, counted."""

    def count(connection: sa.Connection) -> tuple[int, int, int, int]:
        counts = []
        for table in (run_messages, run_events, usage_log, tool_calls):
            query = sa.select(sa.func.count()).select_from(table).where(table.c.run_id == run_id)
            counts.append(connection.execute(query).scalar_one())
        return counts[0], counts[1], counts[2], counts[3]

    return await store._db.run("count", count, write=False)


async def test_a_step_stores_its_messages_events_usage_and_audit_together_or_none(own_postgres_url: str) -> None:
    store = await RunStore.open(own_postgres_url)
    try:
        run = new_run()
        await store.create_run(run, owner=OWNER, lease_seconds=LEASE)
        answer = Message(role="tool", tool_call_id="call_1", content="sunny")
        step = Step(
            messages=[(2, answer)],
            events=[StoredEvent(1, "tool_result", "{}")],
            calls=[llm_call(1)],
            tool_calls=[audited(1)],
        )
        await store.record(run.run_id, step, owner=OWNER)
        assert await rows_of(store, run.run_id) == (3, 1, 1, 1)
        # A usage row the log refuses (no model) fails the whole step: no message, event nor audit row of it stays.
        failing = Step(
            messages=[(3, answer)],
            events=[StoredEvent(2, "tool_result", "{}")],
            calls=[llm_call(2, model=None)],  # type: ignore[arg-type]  # what a defect would hand the store
            tool_calls=[audited(2)],
        )
        with pytest.raises(StoreError):
            await store.record(run.run_id, failing, owner=OWNER)
        assert await rows_of(store, run.run_id) == (3, 1, 1, 1)
        stored = await store.get_run(run.run_id)
        assert stored is not None
        assert stored.last_seq == 1
    finally:
        await store.aclose()


async def one_run_on_one_connection(url: str) -> tuple[RunStore, NewRun, set[int]]:
    """A store whose driver's pool holds one connection, a run it created, and the backends connected then."""
    store = await RunStore.open(url, pool_size=1)
    run = new_run()
    await store.create_run(run, owner=OWNER, lease_seconds=LEASE)
    return store, run, await backends(url)


async def replaced_connection(url: str, store: RunStore, run: NewRun, before: set[int]) -> None:
    """The next write of ``run`` goes through a connection opened for it, the only one of the pool."""
    await store.record(run.run_id, Step(events=[StoredEvent(1, "text", "{}")]), owner=OWNER)
    database = store._db
    assert isinstance(database, PostgresDatabase)
    assert database.driver_connections() == 1
    assert len(await backends(url) - before) == 1
    assert [event.seq for event in await store.events_after(run.run_id, 0)] == [1]


async def test_a_write_that_failed_leaves_its_connection_closed_and_the_next_write_opens_another(
    own_postgres_url: str,
) -> None:
    store, run, before = await one_run_on_one_connection(own_postgres_url)
    try:
        with pytest.raises(StoreError):  # the same run id again: the table's unique key refuses it
            await store.create_run(run, owner=OWNER, lease_seconds=LEASE)
        # Its state unknown, the failed write's connection is not reused.
        await replaced_connection(own_postgres_url, store, run, before)
    finally:
        await store.aclose()


async def test_a_connection_idle_too_long_is_replaced_when_next_needed(
    own_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run, before = await one_run_on_one_connection(own_postgres_url)
    try:
        database = store._db
        assert isinstance(database, PostgresDatabase)
        monkeypatch.setattr(database._driver_pool, "_idle_seconds", -1.0)  # every idle connection: idle too long
        await replaced_connection(own_postgres_url, store, run, before)
    finally:
        await store.aclose()
