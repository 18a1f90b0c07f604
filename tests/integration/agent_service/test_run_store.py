"""The run store on both backends: SQLite (a file of the test's) and PostgreSQL (this session's database).

Every test runs against both; PostgreSQL being unreachable fails them (see ``support.databases``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from agent_service.core.context import ContextSummary
from agent_service.core.images import DecodedImage
from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.store import (
    ConversationBusy,
    ConversationFull,
    ConversationLimits,
    ConversationTooLarge,
    LeaseLost,
    NewApproval,
    NewRun,
    Parked,
    RunStore,
    Step,
    StoredEvent,
    StoreError,
    UnknownCursor,
)
from agent_service.store._engine import database_url, open_database
from agent_service.store._migrations import MIGRATIONS
from agent_service.store.schema import metadata, run_events, run_messages, runs, usage_log
from suite_common.sql import Database
from suite_common.wire import (
    ConversationSettings,
    Message,
    ReasoningBlock,
    ReasoningControl,
    RunErrorDetail,
    ToolCall,
    Usage,
)
from support.databases import fresh_database, fresh_postgres_database

pytestmark = pytest.mark.anyio

BACKENDS = ["sqlite", "postgresql"]
LEASE = 30.0
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)
"""An ``abandon_before`` that abandons nothing."""


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store/agent.db"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def open_store(store_url: str) -> AsyncIterator[Callable[[], Awaitable[RunStore]]]:
    """Opens stores on the test's database (each its own engine and connections, like replicas); closes them."""
    opened: list[RunStore] = []

    async def open_one() -> RunStore:
        store = await RunStore.open(store_url)
        opened.append(store)
        return store

    cleaner = await open_one()
    if cleaner.backend == "postgresql":
        # The session's database is shared: each test starts from empty tables (claims see every run).
        # CASCADE: the tables that refer to these (summaries, approvals, ...) are emptied with them.
        truncate = sa.text("TRUNCATE run_events, run_messages, runs, conversations CASCADE")
        await cleaner._db.run("empty the tables", lambda connection: connection.execute(truncate), write=True)
    try:
        yield open_one
    finally:
        for store in opened:
            await store.aclose()


@pytest.fixture
async def store(open_store: Callable[[], Awaitable[RunStore]]) -> RunStore:
    return await open_store()


def new_run(
    *, conversation_id: str | None = None, messages: list[Message] | None = None, plan: dict[str, Any] | None = None
) -> NewRun:
    return NewRun(
        run_id=f"run_{uuid.uuid4().hex}",
        model="fake/model",
        plan=plan if plan is not None else {"tools": ["search"], "limits": {"max_iterations": 5}},
        input_messages=messages if messages is not None else [Message(role="user", content="Hello?")],
        conversation_id=conversation_id,
        caller="alice",
    )


def event(seq: int, text: str = "x") -> StoredEvent:
    return StoredEvent(seq=seq, type="text", data=json.dumps({"type": "text", "delta": text}))


async def test_a_created_run_reads_back_exactly_as_stored(store: RunStore) -> None:
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Wetter in Zürich? 🌦"),
        Message(
            role="assistant",
            reasoning=[ReasoningBlock(text="Look it up.", signature="sig-1")],
            tool_calls=[ToolCall(id="call_1", name="search", arguments={"q": "Zürich", "n": 3, "deep": {"a": [1]}})],
        ),
        Message(role="tool", tool_call_id="call_1", content="sunny", is_error=False),
    ]
    plan = {"tools": ["search"], "limits": {"max_iterations": 5, "deadline": 12.5}, "nested": [None, True, "é"]}
    run = new_run(messages=messages, plan=plan)
    before = datetime.now(UTC)

    assert await store.create_run(run, owner="replica-a", lease_seconds=LEASE) == []
    await store.record(
        run.run_id, Step(iterations=2, usage=Usage(input_tokens=120, output_tokens=34)), owner="replica-a"
    )

    record = await store.get_run(run.run_id)
    assert record is not None
    assert (record.model, record.status, record.caller, record.conversation_id) == (
        "fake/model",
        "processing",
        "alice",
        None,
    )
    assert record.plan == plan
    assert record.iterations == 2
    assert record.usage == Usage(input_tokens=120, output_tokens=34)
    assert record.lease_owner == "replica-a"
    assert record.lease_expires_at is not None
    assert record.lease_expires_at.tzinfo is not None
    assert before - timedelta(seconds=1) <= record.created_at <= datetime.now(UTC)
    assert record.created_at.utcoffset() == timedelta(0)
    assert record.lease_expires_at - record.created_at == pytest.approx(
        timedelta(seconds=LEASE), abs=timedelta(seconds=1)
    )
    assert (record.resumes, record.cancel_requested, record.last_seq, record.error, record.finish_reason) == (
        0,
        False,
        0,
        None,
        None,
    )
    assert await store.run_messages(run.run_id) == messages
    assert await store.get_run("run_unknown") is None
    await store.ping()


async def test_a_step_writes_its_messages_events_and_counters_together(store: RunStore) -> None:
    run = new_run()
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    answer = Message(role="assistant", content="Hi!")

    await store.record(
        run.run_id,
        Step(messages=[(1, answer)], events=[event(1), event(2), event(3)], status="tool_loop", iterations=1),
        owner="replica-a",
    )

    record = await store.get_run(run.run_id)
    assert record is not None
    assert (record.status, record.iterations, record.last_seq) == ("tool_loop", 1, 3)
    assert await store.run_messages(run.run_id) == [run.input_messages[0], answer]
    assert [stored.seq for stored in await store.events_after(run.run_id, 0)] == [1, 2, 3]


async def test_a_step_of_an_owner_that_lost_the_lease_writes_nothing(store: RunStore) -> None:
    run = new_run()
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    step = Step(messages=[(1, Message(role="assistant", content="late"))], events=[event(1)], status="tool_loop")

    with pytest.raises(LeaseLost):
        await store.record(run.run_id, step, owner="replica-b")

    record = await store.get_run(run.run_id)
    assert record is not None
    assert (record.status, record.last_seq, record.lease_owner) == ("processing", 0, "replica-a")
    assert await store.run_messages(run.run_id) == run.input_messages
    assert await store.events_after(run.run_id, 0) == []

    await store.finish(run.run_id, Step(status="completed", finish_reason="stop"), owner="replica-a")
    with pytest.raises(LeaseLost):
        await store.record(run.run_id, step, owner="replica-a")
    assert await store.events_after(run.run_id, 0) == []


async def test_a_run_whose_cancel_was_asked_for_is_not_parked_to_wait_for_approvals(store: RunStore) -> None:
    # A waiting run is not stopped by its lease: parked, the cancel asked for just before would be lost.
    run = new_run()
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    await store.request_cancel(run.run_id)
    held = [NewApproval("call_pay", 1, "send_payment", "ledger", {"amount": 42})]
    parked = await store.park(run.run_id, [event(1)], held, owner="replica-a", wait_seconds=60, deadline_left_seconds=5)
    assert parked is Parked.CANCELLED
    record = await store.get_run(run.run_id)
    assert record is not None
    assert (record.status, record.lease_owner, record.last_seq) == ("processing", "replica-a", 0)
    assert await store.approvals(run.run_id) == []
    with pytest.raises(LeaseLost):
        await store.park(run.run_id, [], held, owner="replica-b", wait_seconds=60, deadline_left_seconds=5)


async def test_a_structured_answer_is_stored_with_the_runs_end_and_reads_back(store: RunStore) -> None:
    run = new_run()
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    await store.record(run.run_id, Step(iterations=1), owner="replica-a")  # a step without output leaves it unset
    before = await store.get_run(run.run_id)
    assert before is not None
    assert before.output is None
    output = {"city": "Zürich", "population": 443037, "tags": ["lake", None], "ok": True}
    step = Step(status="completed", finish_reason="stop", output=output)
    await store.finish(run.run_id, step, owner="replica-a")
    record = await store.get_run(run.run_id)
    assert record is not None
    assert (record.status, record.output) == ("completed", output)


async def test_a_failed_step_rolls_back_everything_it_wrote(store: RunStore) -> None:
    run = new_run()
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    await store.record(run.run_id, Step(events=[event(1)]), owner="replica-a")

    # An event without a type: the events' insert fails after the run and the message were written.
    broken = StoredEvent(seq=3, type=None, data="{}")  # type: ignore[arg-type]  # what the database refuses
    with pytest.raises(StoreError) as failure:
        await store.record(
            run.run_id,
            Step(messages=[(1, Message(role="assistant", content="x"))], events=[event(2), broken], iterations=4),
            owner="replica-a",
        )

    assert not isinstance(failure.value, LeaseLost)
    assert f"store a step of run {run.run_id}" in str(failure.value)
    assert "INSERT" not in str(failure.value)  # the driver's message, not the statement and its parameters
    record = await store.get_run(run.run_id)
    assert record is not None
    assert (record.iterations, record.last_seq) == (0, 1)
    assert await store.run_messages(run.run_id) == run.input_messages


async def test_an_event_written_again_is_kept_once_as_it_was(store: RunStore) -> None:
    """A write that committed unseen (its caller cut off) may be sent again: the events it carried stay as stored."""
    run = new_run()
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    await store.record(run.run_id, Step(events=[event(1), event(2)]), owner="replica-a")
    await store.record(run.run_id, Step(events=[event(1), event(2), event(3)]), owner="replica-a")
    assert [stored.seq for stored in await store.events_after(run.run_id, 0)] == [1, 2, 3]


async def test_writing_a_position_again_replaces_its_message(store: RunStore) -> None:
    run = new_run()
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    await store.record(run.run_id, Step(messages=[(1, Message(role="assistant", content="draft"))]), owner="replica-a")

    final = Message(role="assistant", content="final", tool_calls=[ToolCall(id="c1", name="search")])
    await store.record(
        run.run_id,
        Step(messages=[(1, final), (2, Message(role="tool", tool_call_id="c1", content="r"))]),
        owner="replica-a",
    )

    assert await store.run_messages(run.run_id) == [
        run.input_messages[0],
        final,
        Message(role="tool", tool_call_id="c1", content="r"),
    ]


async def test_events_are_read_after_a_sequence_number_at_most_a_limit(store: RunStore) -> None:
    run = new_run()
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    await store.record(run.run_id, Step(events=[event(seq, f"d{seq}") for seq in range(1, 6)]), owner="replica-a")
    await store.record(run.run_id, Step(events=[event(6, "d6")]), owner="replica-a")

    assert [stored.seq for stored in await store.events_after(run.run_id, 2)] == [3, 4, 5, 6]
    assert await store.events_after(run.run_id, 1, limit=2) == [event(2, "d2"), event(3, "d3")]
    assert await store.events_after(run.run_id, 6) == []
    assert await store.events_after("run_unknown", 0) == []
    record = await store.get_run(run.run_id)
    assert record is not None
    assert record.last_seq == 6


async def test_a_conversations_summary_is_kept_per_tenant_and_never_replaced_by_a_smaller_one(store: RunStore) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    await store.create_run(new_run(conversation_id=conversation), owner="replica-a", lease_seconds=LEASE)
    assert await store.get_summary(DEFAULT_TENANT, conversation) is None
    made = ContextSummary(covers=40, summary="Earlier: the user asked about leases.", tokens=12, model="small")
    await store.put_summary(DEFAULT_TENANT, conversation, made)
    # A run that folded less (made concurrently from an older state) does not replace it; a larger fold does.
    await store.put_summary(DEFAULT_TENANT, conversation, dataclasses.replace(made, covers=20, summary="older"))
    assert await store.get_summary(DEFAULT_TENANT, conversation) == made
    grown = dataclasses.replace(made, covers=60, summary="Earlier: leases, then budgets.")
    await store.put_summary(DEFAULT_TENANT, conversation, grown)
    assert await store.get_summary(DEFAULT_TENANT, conversation) == grown
    assert await store.get_summary("another-tenant", conversation) is None


async def test_a_conversation_gives_each_run_the_messages_of_the_runs_before_it(store: RunStore) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    first = new_run(conversation_id=conversation, messages=[Message(role="user", content="one")])
    assert await store.create_run(first, owner="replica-a", lease_seconds=LEASE) == []
    first_answer = Message(role="assistant", content="first answer")
    await store.finish(
        first.run_id, Step(messages=[(1, first_answer)], status="completed", finish_reason="stop"), owner="replica-a"
    )
    second = new_run(conversation_id=conversation, messages=[Message(role="user", content="two")])

    earlier = await store.create_run(second, owner="replica-b", lease_seconds=LEASE)

    assert earlier == [Message(role="user", content="one"), first_answer]
    assert await store.earlier_messages(second.run_id) == earlier
    assert await store.earlier_messages(first.run_id) == []
    await store.finish(
        second.run_id,
        Step(messages=[(1, Message(role="assistant", content="second answer"))], status="completed"),
        owner="replica-b",
    )
    record = await store.get_conversation(conversation)
    assert record is not None
    assert [run.run_id for run in record.runs] == [first.run_id, second.run_id]
    assert [message.content for message in record.messages] == ["one", "first answer", "two", "second answer"]
    assert record.created_at <= record.updated_at
    assert await store.get_conversation("conv_unknown") is None
    without = new_run()
    await store.create_run(without, owner="replica-a", lease_seconds=LEASE)
    assert await store.earlier_messages(without.run_id) == []


async def test_conversations_are_listed_newest_first_with_their_title_run_count_and_latest_status(
    store: RunStore,
) -> None:
    older, newer = f"conv_{uuid.uuid4().hex}", f"conv_{uuid.uuid4().hex}"
    first = new_run(
        conversation_id=older,
        messages=[Message(role="system", content="Be brief."), Message(role="user", content="Weather in Zürich? 🌦")],
    )
    await store.create_run(first, owner="replica-a", lease_seconds=LEASE)
    await store.finish(first.run_id, Step(status="completed", finish_reason="stop"), owner="replica-a")
    second = new_run(conversation_id=older, messages=[Message(role="user", content="And tomorrow?")])
    await store.create_run(second, owner="replica-a", lease_seconds=LEASE)
    only = new_run(conversation_id=newer, messages=[Message(role="user", content="Hi")])
    await store.create_run(only, owner="replica-a", lease_seconds=LEASE)
    answered_then_failed = Step(
        messages=[(1, Message(role="assistant", content="Calling a tool."))],
        status="failed",
        error=RunErrorDetail(code="x", message="y"),
    )
    await store.finish(only.run_id, answered_then_failed, owner="replica-a")
    await store.create_run(new_run(), owner="replica-a", lease_seconds=LEASE)  # no conversation: not listed

    listed = await store.list_conversations(10)

    assert [(c.conversation_id, c.first_user_text, c.runs, c.latest_status) for c in listed] == [
        (newer, "Hi", 1, "failed"),
        (older, "Weather in Zürich? 🌦", 2, "processing"),
    ]
    assert listed[0].updated_at >= listed[1].updated_at
    assert listed[1].created_at <= listed[1].updated_at
    assert [c.conversation_id for c in await store.list_conversations(1)] == [newer]


async def test_a_conversation_is_read_and_listed_by_its_own_tenant_only(store: RunStore) -> None:
    acme_conversation, legacy_conversation = f"conv_{uuid.uuid4().hex}", f"conv_{uuid.uuid4().hex}"
    acme = dataclasses.replace(new_run(conversation_id=acme_conversation), tenant="acme")
    legacy = new_run(conversation_id=legacy_conversation)  # stored without a tenant: the default tenant's
    await store.create_run(acme, owner="replica-a", lease_seconds=LEASE)
    await store.create_run(legacy, owner="replica-a", lease_seconds=LEASE)

    assert await store.get_conversation(acme_conversation, tenant="globex") is None
    assert await store.get_conversation(acme_conversation, tenant=DEFAULT_TENANT) is None
    found = await store.get_conversation(acme_conversation, tenant="acme")
    assert found is not None
    assert [run.tenant for run in found.runs] == ["acme"]
    assert await store.get_conversation(legacy_conversation, tenant=DEFAULT_TENANT) is not None
    assert [c.conversation_id for c in await store.list_conversations(10, tenant="acme")] == [acme_conversation]
    assert [c.conversation_id for c in await store.list_conversations(10, tenant=DEFAULT_TENANT)] == [
        legacy_conversation
    ]
    assert await store.list_conversations(10, tenant="globex") == []
    assert len(await store.list_conversations(10)) == 2  # no tenant: every tenant's


async def test_the_same_conversation_id_of_two_tenants_is_two_conversations(store: RunStore) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    first = dataclasses.replace(new_run(conversation_id=conversation), tenant="acme")
    await store.create_run(first, owner="replica-a", lease_seconds=LEASE)  # still active: globex is not kept waiting
    other = dataclasses.replace(
        new_run(conversation_id=conversation, messages=[Message(role="user", content="globex's")]), tenant="globex"
    )

    assert await store.create_run(other, owner="replica-a", lease_seconds=LEASE) == []

    await store.finish(first.run_id, Step(status="completed", finish_reason="stop"), owner="replica-a")
    again = dataclasses.replace(new_run(conversation_id=conversation), tenant="acme")
    assert await store.create_run(again, owner="replica-a", lease_seconds=LEASE) == first.input_messages
    acme = await store.get_conversation(conversation, tenant="acme")
    globex = await store.get_conversation(conversation, tenant="globex")
    assert acme is not None
    assert globex is not None
    assert [run.run_id for run in acme.runs] == [first.run_id, again.run_id]
    assert [run.run_id for run in globex.runs] == [other.run_id]
    assert [message.content for message in globex.messages] == ["globex's"]
    assert await store.earlier_messages(again.run_id) == first.input_messages
    listed = await store.list_conversations(10, tenant="globex")
    assert [(c.conversation_id, c.runs, c.first_user_text) for c in listed] == [(conversation, 1, "globex's")]


async def test_a_run_ending_leaves_another_tenants_conversation_of_the_same_id_as_it_was(store: RunStore) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    globex = dataclasses.replace(new_run(conversation_id=conversation), tenant="globex")
    await store.create_run(globex, owner="replica-a", lease_seconds=LEASE)
    await store.finish(globex.run_id, Step(status="completed", finish_reason="stop"), owner="replica-a")
    older = dataclasses.replace(new_run(conversation_id=f"conv_{uuid.uuid4().hex}"), tenant="globex")
    await store.create_run(older, owner="replica-a", lease_seconds=LEASE)
    await store.finish(older.run_id, Step(status="completed", finish_reason="stop"), owner="replica-a")
    before = await store.list_conversations(10, tenant="globex")
    acme = dataclasses.replace(new_run(conversation_id=conversation), tenant="acme")
    await store.create_run(acme, owner="replica-a", lease_seconds=LEASE)

    await store.finish(acme.run_id, Step(status="completed", finish_reason="stop"), owner="replica-a")

    after = await store.list_conversations(10, tenant="globex")
    assert [(c.conversation_id, c.updated_at) for c in after] == [(c.conversation_id, c.updated_at) for c in before]
    assert [c.conversation_id for c in after] == [older.conversation_id, conversation]


async def _answered_run(store: RunStore, conversation: str, question: str, answer: str) -> NewRun:
    run = new_run(conversation_id=conversation, messages=[Message(role="user", content=question)])
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    step = Step(messages=[(1, Message(role="assistant", content=answer))], status="completed", finish_reason="stop")
    await store.finish(run.run_id, step, owner="replica-a")
    return run


async def test_a_run_that_failed_before_the_model_answered_leaves_its_conversation_as_it_was(store: RunStore) -> None:
    """Its input is stored with it (the run reads back whole) but is no part of the conversation: not sent again
    with the next run, not shown, not counted in its size (a run refused for its size would refuse every next one)."""
    conversation = f"conv_{uuid.uuid4().hex}"
    answered = await _answered_run(store, conversation, "one", "first answer")
    before = await store.get_conversation(conversation)
    [listed_before] = await store.list_conversations(10)
    refused = new_run(conversation_id=conversation, messages=[Message(role="user", content="x" * 5000)])
    await store.create_run(refused, owner="replica-a", lease_seconds=LEASE)
    error = RunErrorDetail(code="payload_too_large", message="completion-service: too large")
    await store.finish(refused.run_id, Step(status="failed", error=error, iterations=1), owner="replica-a")

    after = await store.get_conversation(conversation)
    assert before is not None
    assert after is not None
    assert (after.messages, [run.run_id for run in after.runs]) == (before.messages, [answered.run_id])
    [listed] = await store.list_conversations(10)
    assert (listed.runs, listed.latest_status, listed.first_user_text) == (1, "completed", "one")
    assert listed_before.runs == 1
    assert await store.run_messages(refused.run_id) == refused.input_messages
    limits = ConversationLimits(max_bytes=200, max_runs=10)
    next_run = new_run(conversation_id=conversation, messages=[Message(role="user", content="two")])
    earlier = await store.create_run(next_run, owner="replica-a", lease_seconds=LEASE, limits=limits)
    assert earlier == before.messages
    assert await store.earlier_messages(next_run.run_id) == before.messages
    only_refused = new_run(conversation_id=f"conv_{uuid.uuid4().hex}")
    await store.create_run(only_refused, owner="replica-a", lease_seconds=LEASE)
    await store.finish(only_refused.run_id, Step(status="failed", error=error), owner="replica-a")
    assert await store.get_conversation(only_refused.conversation_id or "") is None, "as if never used"


async def test_conversations_whose_runs_all_failed_before_an_answer_take_no_place_in_a_listings_limit(
    store: RunStore,
) -> None:
    good = [await _answered_run(store, f"conv_{uuid.uuid4().hex}", "question", "answer") for _ in range(2)]
    error = RunErrorDetail(code="payload_too_large", message="completion-service: too large")
    for _ in range(3):  # newer than the good ones
        refused = new_run(conversation_id=f"conv_{uuid.uuid4().hex}")
        await store.create_run(refused, owner="replica-a", lease_seconds=LEASE)
        await store.finish(refused.run_id, Step(status="failed", error=error), owner="replica-a")

    listed = await store.list_conversations(2)

    assert [c.conversation_id for c in listed] == [run.conversation_id for run in reversed(good)]


async def test_non_ascii_input_counts_toward_a_conversations_size_as_the_utf8_bytes_it_is_stored_in(
    store: RunStore,
) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    await _answered_run(store, conversation, "one", "first answer")
    stored = await _stored_size(store, conversation)
    question = Message(role="user", content="Zürich 🌦 " * 30)
    adding = len(question.model_dump_json(by_alias=True, exclude_none=True).encode())
    assert adding < len(json.dumps(question.model_dump(mode="json", by_alias=True, exclude_none=True))) / 1.5

    run = new_run(conversation_id=conversation, messages=[question])
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE, limits=ConversationLimits(stored + adding, 10))
    await store.finish(run.run_id, Step(status="completed"), owner="replica-a")

    assert await _stored_size(store, conversation) == stored + adding


async def _stored_size(store: RunStore, conversation: str) -> int:
    """The conversation's stored bytes as the database measures them (a run refused at a limit of 0 says)."""
    with pytest.raises(ConversationTooLarge) as measured:
        await store.create_run(
            new_run(conversation_id=conversation),
            owner="replica-a",
            lease_seconds=LEASE,
            limits=ConversationLimits(0, 10),
        )
    return measured.value.stored


async def test_a_run_past_its_conversations_size_or_run_count_is_refused_storing_nothing(store: RunStore) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    await _answered_run(store, conversation, "one", "first answer")
    question = Message(role="user", content="y" * 100)
    adding = len(question.model_dump_json(by_alias=True, exclude_none=True).encode())
    too_large = new_run(conversation_id=conversation, messages=[question])
    with pytest.raises(ConversationTooLarge) as measured:
        await store.create_run(too_large, owner="replica-a", lease_seconds=LEASE, limits=ConversationLimits(1, 10))
    stored = measured.value.stored  # the stored JSON's bytes, however each was written (compact or not)
    assert len('{"role":"user","content":"one"}{"role":"assistant","content":"first answer"}') <= stored <= 100

    with pytest.raises(ConversationTooLarge) as large:
        await store.create_run(
            too_large, owner="replica-a", lease_seconds=LEASE, limits=ConversationLimits(stored + adding - 1, 10)
        )

    assert (large.value.stored, large.value.adding, large.value.limit) == (stored, adding, stored + adding - 1)
    assert await store.get_run(too_large.run_id) is None
    await store.create_run(
        too_large, owner="replica-a", lease_seconds=LEASE, limits=ConversationLimits(stored + adding, 10)
    )
    await store.finish(too_large.run_id, Step(status="completed"), owner="replica-a")
    third = new_run(conversation_id=conversation)

    with pytest.raises(ConversationFull) as full:
        await store.create_run(third, owner="replica-a", lease_seconds=LEASE, limits=ConversationLimits(10**6, 2))

    assert (full.value.runs, full.value.limit) == (2, 2)
    assert await store.get_run(third.run_id) is None
    record = await store.get_conversation(conversation)
    assert record is not None
    assert len(record.runs) == 2


async def test_a_conversation_keeps_its_newest_runs_settings_and_the_system_prompt_it_started_with(
    store: RunStore,
) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    first_settings = ConversationSettings(
        model="demo",
        persona="brief",
        tools=["search_documents"],
        reasoning=ReasoningControl(effort="high", summary="auto"),
        verbosity="low",
        max_tokens=300,
        system_prompt="Answer in one sentence.",
    )
    first = dataclasses.replace(new_run(conversation_id=conversation), settings=first_settings)
    await store.create_run(first, owner="replica-a", lease_seconds=LEASE)
    await store.finish(first.run_id, Step(status="completed"), owner="replica-a")

    record = await store.get_conversation(conversation)
    assert record is not None
    assert record.settings == first_settings
    (listed,) = await store.list_conversations(10)
    assert listed.settings == first_settings

    # A later run's settings replace them, but the system prompt the conversation started with stays.
    later_settings = ConversationSettings(model="other", reasoning=ReasoningControl(effort="minimal"))
    later = dataclasses.replace(new_run(conversation_id=conversation), settings=later_settings)
    await store.create_run(later, owner="replica-b", lease_seconds=LEASE)
    await store.finish(later.run_id, Step(status="completed"), owner="replica-b")
    record = await store.get_conversation(conversation, limit=1)
    assert record is not None
    assert record.settings == later_settings.model_copy(update={"system_prompt": "Answer in one sentence."})

    # A run that brings no settings (NewRun's default) leaves them as they are; a refused run changes nothing.
    await store.create_run(new_run(conversation_id=conversation), owner="replica-a", lease_seconds=LEASE)
    refused = dataclasses.replace(new_run(conversation_id=conversation), settings=ConversationSettings(model="x"))
    with pytest.raises(ConversationBusy):
        await store.create_run(refused, owner="replica-a", lease_seconds=LEASE)
    record = await store.get_conversation(conversation)
    assert record is not None
    assert record.settings is not None
    assert record.settings.model == "other"


async def test_a_conversation_is_read_in_bounded_pages_newest_first_each_in_order(store: RunStore) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    for index in range(5):
        await _answered_run(store, conversation, f"q{index}", f"a{index}" + "z" * 100 * index)
    whole = await store.get_conversation(conversation)
    assert whole is not None
    assert len(whole.messages) == 10

    pages: list[list[Message]] = []
    before: tuple[str, int] | None = None
    while True:
        page = await store.get_conversation(conversation, limit=3, max_bytes=400, before=before)
        assert page is not None
        sizes = [len(m.model_dump_json(by_alias=True, exclude_none=True).encode()) for m in page.messages]
        assert 1 <= len(page.messages) <= 3
        assert len(page.messages) == 1 or sum(sizes) <= 400
        run_of = {run.run_id for run in page.runs}
        assert [run.run_id for run in page.runs] == [run.run_id for run in whole.runs if run.run_id in run_of]
        pages.insert(0, page.messages)
        if page.earlier is None:
            break
        before = page.earlier
    assert [message for page in pages for message in page] == whole.messages
    assert len(pages) > 10 / 3, "the bytes bound the pages as well as the count"
    latest = await store.get_conversation(conversation, limit=2)
    assert latest is not None
    assert [m.content for m in latest.messages] == ["q4", "a4" + "z" * 400]
    assert [run.run_id for run in latest.runs] == [whole.runs[-1].run_id]
    assert latest.earlier == (whole.runs[-1].run_id, 0)
    everything = await store.get_conversation(conversation, limit=10)
    assert everything is not None
    assert (everything.messages, everything.earlier) == (whole.messages, None)
    with pytest.raises(UnknownCursor):
        await store.get_conversation(conversation, limit=2, before=("run_of_nobody", 0))
    other = await _answered_run(store, f"conv_{uuid.uuid4().hex}", "elsewhere", "answer")
    with pytest.raises(UnknownCursor):
        await store.get_conversation(conversation, limit=2, before=(other.run_id, 1))


async def test_a_conversation_without_a_user_message_is_listed_without_a_title(store: RunStore) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    run = new_run(conversation_id=conversation, messages=[Message(role="system", content="Say hello.")])
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)

    [listed] = await store.list_conversations(5)

    assert (listed.conversation_id, listed.first_user_text, listed.runs) == (conversation, None, 1)


async def test_a_conversation_takes_one_active_run_at_a_time(store: RunStore) -> None:
    conversation = f"conv_{uuid.uuid4().hex}"
    first = new_run(conversation_id=conversation)
    await store.create_run(first, owner="replica-a", lease_seconds=LEASE)
    second = new_run(conversation_id=conversation)

    with pytest.raises(ConversationBusy) as busy:
        await store.create_run(second, owner="replica-a", lease_seconds=LEASE)

    assert (busy.value.conversation_id, busy.value.run_id) == (conversation, first.run_id)
    assert await store.get_run(second.run_id) is None
    await store.finish(first.run_id, Step(status="cancelled", finish_reason="cancelled"), owner=None)
    await store.create_run(second, owner="replica-a", lease_seconds=LEASE)
    record = await store.get_conversation(conversation)
    assert record is not None
    assert len(record.runs) == 2


async def test_two_replicas_starting_a_run_of_one_conversation_at_once_start_one(
    open_store: Callable[[], Awaitable[RunStore]],
) -> None:
    replicas = [await open_store(), await open_store()]
    for attempt in range(6):
        conversation = f"conv_{attempt}_{uuid.uuid4().hex}"
        if attempt % 2:  # a conversation that exists, its earlier run ended; otherwise a new one
            earlier = new_run(conversation_id=conversation)
            await replicas[0].create_run(earlier, owner="r", lease_seconds=LEASE)
            await replicas[0].finish(earlier.run_id, Step(status="completed"), owner="r")
        outcomes: list[str] = []

        async def start(replica: RunStore, conversation: str = conversation, outcomes: list[str] = outcomes) -> None:
            try:
                await replica.create_run(new_run(conversation_id=conversation), owner="r", lease_seconds=LEASE)
                outcomes.append("started")
            except ConversationBusy:
                outcomes.append("busy")

        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                for replica in replicas:
                    group.start_soon(start, replica)

        assert sorted(outcomes) == ["busy", "started"], f"attempt {attempt}"


async def test_two_replicas_claiming_at_once_never_take_the_same_run(
    open_store: Callable[[], Awaitable[RunStore]],
) -> None:
    first, second = await open_store(), await open_store()
    run_ids = set()
    for _ in range(40):
        run = new_run()
        await first.create_run(run, owner="dead-replica", lease_seconds=-1)
        run_ids.add(run.run_id)
    claims: dict[str, list[str]] = {"first": [], "second": []}

    async def claim_until_none(name: str, replica: RunStore) -> None:
        while claimed := await replica.claim_expired(name, lease_seconds=LEASE, abandon_before=LONG_AGO, limit=3):
            claims[name].extend(record.run_id for record in claimed)
            assert all(record.lease_owner == name and record.resumes == 1 for record in claimed)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(claim_until_none, "first", first)
            group.start_soon(claim_until_none, "second", second)

    assert not set(claims["first"]) & set(claims["second"])
    assert sorted(claims["first"] + claims["second"]) == sorted(run_ids)
    assert await first.claim_expired("third", lease_seconds=LEASE, abandon_before=LONG_AGO, limit=100) == []


async def test_a_runs_end_user_and_role_are_stored_and_a_claimed_run_carries_them(store: RunStore) -> None:
    run = dataclasses.replace(new_run(), tenant="acme", user="gina", user_role="guest")
    await store.create_run(run, owner="dead-replica", lease_seconds=-1)
    before_roles = new_run()
    await store.create_run(before_roles, owner="replica-a", lease_seconds=LEASE)

    stored = await store.get_run(run.run_id)
    assert stored is not None
    assert (stored.user, stored.user_role) == ("gina", "guest")
    [claimed] = await store.claim_expired("replica-b", lease_seconds=LEASE, abandon_before=LONG_AGO, limit=10)
    assert (claimed.run_id, claimed.user, claimed.user_role) == (run.run_id, "gina", "guest")
    unnamed = await store.get_run(before_roles.run_id)
    assert unnamed is not None
    assert unnamed.user_role is None


async def test_a_claimed_run_moves_to_its_new_owner(store: RunStore) -> None:
    run = new_run()
    await store.create_run(run, owner="dead-replica", lease_seconds=-1)
    fresh = new_run()
    await store.create_run(fresh, owner="replica-a", lease_seconds=LEASE)

    [claimed] = await store.claim_expired("replica-b", lease_seconds=LEASE, abandon_before=LONG_AGO, limit=10)

    assert (claimed.run_id, claimed.lease_owner, claimed.resumes, claimed.status) == (
        run.run_id,
        "replica-b",
        1,
        "processing",
    )
    assert claimed.lease_expires_at is not None
    assert claimed.lease_expires_at > datetime.now(UTC)
    with pytest.raises(LeaseLost):
        await store.record(run.run_id, Step(events=[event(1)]), owner="dead-replica")
    await store.record(run.run_id, Step(events=[event(1)]), owner="replica-b")


async def test_runs_nobody_held_for_too_long_fail_with_an_error_event(store: RunStore) -> None:
    abandoned = new_run()
    await store.create_run(abandoned, owner="dead-replica", lease_seconds=-600)
    await store.record(abandoned.run_id, Step(events=[event(1), event(2)]), owner="dead-replica")
    recent = new_run()
    await store.create_run(recent, owner="dead-replica", lease_seconds=-1)
    alive = new_run()
    await store.create_run(alive, owner="replica-a", lease_seconds=LEASE)
    abandon_before = datetime.now(UTC) - timedelta(seconds=300)

    claimed = await store.claim_expired("replica-b", lease_seconds=LEASE, abandon_before=abandon_before, limit=10)

    assert [record.run_id for record in claimed] == [recent.run_id]
    record = await store.get_run(abandoned.run_id)
    assert record is not None
    assert (record.status, record.finish_reason, record.lease_owner, record.lease_expires_at, record.last_seq) == (
        "failed",
        "error",
        None,
        None,
        3,
    )
    assert record.error is not None
    assert record.error.code == "abandoned"
    assert "300 seconds" in record.error.message
    [error] = await store.events_after(abandoned.run_id, 2)
    assert (error.seq, error.type) == (3, "error")
    assert json.loads(error.data) == {
        "type": "error",
        "runId": abandoned.run_id,
        "code": "abandoned",
        "message": record.error.message,
    }

    # Then the sweeper alone: the claimed run, whose lease is fresh, stays; a new abandoned one fails.
    other = new_run()
    await store.create_run(other, owner="dead-replica", lease_seconds=-600)
    assert await store.fail_abandoned(abandon_before=abandon_before) == 1
    assert await store.fail_abandoned(abandon_before=abandon_before) == 0
    other_record, recent_record = await store.get_run(other.run_id), await store.get_run(recent.run_id)
    assert other_record is not None
    assert other_record.status == "failed"
    assert other_record.last_seq == 1
    assert recent_record is not None
    assert recent_record.status == "processing"


async def test_renewing_returns_the_runs_to_stop(store: RunStore) -> None:
    kept, cancelled, taken, ended = new_run(), new_run(), new_run(), new_run()
    for run in (kept, cancelled, taken, ended):
        await store.create_run(run, owner="replica-a", lease_seconds=5)
    assert await store.request_cancel(cancelled.run_id) is not None
    await store.release("replica-a", [taken.run_id])
    await store.claim_expired("replica-b", lease_seconds=LEASE, abandon_before=LONG_AGO, limit=10)
    await store.finish(ended.run_id, Step(status="completed"), owner="replica-a")
    before = await store.get_run(kept.run_id)

    to_stop = await store.renew_leases(
        "replica-a", [kept.run_id, cancelled.run_id, taken.run_id, ended.run_id, "run_unknown"], lease_seconds=LEASE
    )

    assert to_stop == {cancelled.run_id, taken.run_id, ended.run_id, "run_unknown"}
    after = await store.get_run(kept.run_id)
    assert before is not None
    assert after is not None
    assert before.lease_expires_at is not None
    assert after.lease_expires_at is not None
    assert after.lease_expires_at > before.lease_expires_at + timedelta(seconds=20)
    assert await store.renew_leases("replica-a", [], lease_seconds=LEASE) == set()


async def test_a_cancel_request_marks_an_active_run_and_leaves_a_final_one(store: RunStore) -> None:
    active, final = new_run(), new_run()
    await store.create_run(active, owner="replica-a", lease_seconds=LEASE)
    await store.create_run(final, owner="replica-a", lease_seconds=LEASE)
    await store.finish(final.run_id, Step(status="completed", finish_reason="stop"), owner="replica-a")

    marked = await store.request_cancel(active.run_id)
    unchanged = await store.request_cancel(final.run_id)

    assert marked is not None
    assert marked.cancel_requested
    assert marked.status == "processing"
    assert unchanged is not None
    assert not unchanged.cancel_requested
    assert unchanged.status == "completed"
    assert await store.request_cancel("run_unknown") is None
    await store.finish(active.run_id, Step(status="cancelled", finish_reason="cancelled"), owner=None)
    ended = await store.get_run(active.run_id)
    assert ended is not None
    assert (ended.status, ended.finish_reason, ended.lease_owner, ended.lease_expires_at) == (
        "cancelled",
        "cancelled",
        None,
        None,
    )
    with pytest.raises(LeaseLost):
        await store.finish(active.run_id, Step(status="failed"), owner=None)
    with pytest.raises(ValueError, match="final status"):
        await store.finish(active.run_id, Step(status="tool_loop"), owner=None)


async def test_released_runs_can_be_claimed_at_once(store: RunStore) -> None:
    released, kept = new_run(), new_run()
    await store.create_run(released, owner="replica-a", lease_seconds=LEASE)
    await store.create_run(kept, owner="replica-a", lease_seconds=LEASE)
    assert await store.claim_expired("replica-b", lease_seconds=LEASE, abandon_before=LONG_AGO, limit=10) == []

    await store.release("replica-a", [released.run_id])
    await store.release("replica-c", [kept.run_id])  # not its run: nothing happens

    claimed = await store.claim_expired("replica-b", lease_seconds=LEASE, abandon_before=LONG_AGO, limit=10)
    assert [record.run_id for record in claimed] == [released.run_id]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_migrated_schema_is_the_schema_the_store_declares(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    def differences(connection: sa.Connection) -> list[Any]:
        return list(compare_metadata(MigrationContext.configure(connection), metadata))

    async def migrate_and_compare(url: str) -> None:
        database = open_database(database_url(url))
        try:
            assert await MIGRATIONS.upgrade(database) == MIGRATIONS.head()
            assert await database.run("compare the schema", differences, write=False) == []
        finally:
            await database.dispose()

    with fresh_database(backend, tmp_path, "agent_fresh") as url:
        await migrate_and_compare(url)


async def test_a_sqlite_store_is_never_downgraded_past_a_table_rebuild_that_would_delete_its_runs(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/store/agent.db"
    store = await RunStore.open(url)
    run = new_run(conversation_id=f"conv_{uuid.uuid4().hex}")
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    await store.aclose()
    database = open_database(database_url(url))

    def downgrade_on(connection: sa.Connection) -> None:
        config = MIGRATIONS.config(connection)
        command.downgrade(config, "0003")

    try:
        with pytest.raises(NotImplementedError, match="never downgraded on SQLite"):
            await database.run("downgrade", downgrade_on, write=True)
    finally:
        await database.dispose()
    store = await RunStore.open(url)
    try:
        assert await store.get_run(run.run_id) is not None
    finally:
        await store.aclose()


def _upgrade_to(revision: str) -> Callable[[sa.Connection], None]:
    def upgrade_on(connection: sa.Connection) -> None:
        config = MIGRATIONS.config(connection)
        command.upgrade(config, revision)

    return upgrade_on


_LEGACY_ROWS = """
INSERT INTO conversations (conversation_id, caller, tenant, created_at, updated_at) VALUES
    ('legacy', NULL, NULL, '2026-11-01 10:00:00', '2026-11-01 10:05:00'),
    ('acme-talk', 'acme-key', 'acme', '2026-11-02 10:00:00', '2026-11-02 10:00:00');
INSERT INTO runs (run_id, conversation_id, caller, tenant, model, status, iterations, input_tokens, output_tokens,
    plan, created_at, updated_at, resumes, cancel_requested, last_seq) VALUES
    ('run_l1', 'legacy', NULL, NULL, 'm', 'completed', 1, 1, 1, '{}', '2026-11-01 10:00:00', '2026-11-01 10:00:00',
     0, false, 2),
    ('run_l2', 'legacy', NULL, NULL, 'm', 'completed', 1, 1, 1, '{}', '2026-11-01 10:05:00', '2026-11-01 10:05:00',
     0, false, 1),
    ('run_a1', 'acme-talk', 'acme-key', 'acme', 'm', 'completed', 1, 1, 1, '{}', '2026-11-02 10:00:00',
     '2026-11-02 10:00:00', 0, false, 0),
    ('run_alone', NULL, NULL, NULL, 'm', 'completed', 1, 1, 1, '{}', '2026-11-03 10:00:00', '2026-11-03 10:00:00',
     0, false, 0);
INSERT INTO run_messages (run_id, position, message) VALUES
    ('run_l1', 0, '{"role": "user", "content": "first"}'),
    ('run_l1', 1, '{"role": "assistant", "content": "first answer"}'),
    ('run_l2', 0, '{"role": "user", "content": "second"}'),
    ('run_a1', 0, '{"role": "user", "content": "acme asks"}'),
    ('run_alone', 0, '{"role": "user", "content": "alone"}');
INSERT INTO run_events (run_id, seq, type, data) VALUES
    ('run_l1', 1, 'text', '{}'), ('run_l1', 2, 'done', '{}'), ('run_l2', 1, 'done', '{}');
"""


@pytest.mark.parametrize("backend", BACKENDS)
async def test_conversations_stored_before_tenant_keys_stay_readable_by_their_tenant(
    backend: str, tmp_path: Path
) -> None:
    """A store at revision 0002 (conversations one namespace) upgraded: each conversation is its runs' tenant's
    (``default`` for those stored without one), nothing of its runs, messages or events is lost, and another tenant
    may then use the same id for a conversation of its own."""

    async def check(url: str) -> None:
        database = open_database(database_url(url))
        try:
            await database.run("migrate to 0002", _upgrade_to("0002"), write=True)

            def insert_legacy(connection: sa.Connection) -> None:
                for statement in _LEGACY_ROWS.split(";"):
                    if statement.strip():
                        connection.exec_driver_sql(statement)

            await database.run("store rows of 0002", insert_legacy, write=True)
            assert await MIGRATIONS.upgrade(database) == MIGRATIONS.head()
        finally:
            await database.dispose()
        store = await RunStore.open(url)
        try:
            legacy = await store.get_conversation("legacy", tenant=DEFAULT_TENANT)
            assert legacy is not None
            assert [run.run_id for run in legacy.runs] == ["run_l1", "run_l2"]
            assert [m.content for m in legacy.messages] == ["first", "first answer", "second"]
            assert legacy.settings is None  # stored before conversations kept their settings
            assert [e.seq for e in await store.events_after("run_l1", 0)] == [1, 2]
            assert await store.get_conversation("legacy", tenant="acme") is None
            acme = await store.get_conversation("acme-talk", tenant="acme")
            assert acme is not None
            assert [m.content for m in acme.messages] == ["acme asks"]
            assert await store.get_conversation("acme-talk", tenant=DEFAULT_TENANT) is None
            assert await store.run_messages("run_alone") == [Message(role="user", content="alone")]
            listed = await store.list_conversations(10, tenant="acme")
            assert [(c.conversation_id, c.runs) for c in listed] == [("acme-talk", 1)]
            continued = dataclasses.replace(new_run(conversation_id="acme-talk"), tenant="acme")
            assert await store.create_run(continued, owner="r", lease_seconds=LEASE) == acme.messages
            globex = dataclasses.replace(new_run(conversation_id="acme-talk"), tenant="globex")
            assert await store.create_run(globex, owner="r", lease_seconds=LEASE) == []
        finally:
            await store.aclose()

    with fresh_database(backend, tmp_path, "agent_legacy") as url:
        await check(url)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_replicas_starting_together_on_an_empty_database_migrate_it_once(backend: str, tmp_path: Path) -> None:
    async def start_together(url: str) -> None:
        replicas = [open_database(database_url(url)) for _ in range(4)]
        revisions: list[str] = []

        async def start(replica: Database) -> None:
            revisions.append(await MIGRATIONS.upgrade(replica))

        try:
            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    for replica in replicas:
                        group.start_soon(start, replica)
            assert revisions == [MIGRATIONS.head()] * 4
            assert await MIGRATIONS.current(replicas[0]) == MIGRATIONS.head()
        finally:
            for replica in replicas:
                await replica.dispose()

    with fresh_database(backend, tmp_path, "agent_together") as url:
        await start_together(url)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_store_opened_without_migrating_refuses_a_schema_behind(backend: str, tmp_path: Path) -> None:
    async def check(url: str) -> None:
        with pytest.raises(StoreError, match=re.escape("python -m agent_service.store.migrate")):
            await RunStore.open(url, migrate=False)
        await (await RunStore.open(url)).aclose()
        store = await RunStore.open(url, migrate=False)
        try:
            await store.ping()
        finally:
            await store.aclose()

    with fresh_database(backend, tmp_path, "agent_unmigrated") as url:
        await check(url)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_migrate_command_brings_a_database_to_the_newest_revision(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    def migrate(url: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "AGENT_DATABASE_URL": url}
        env.pop("AGENT_MCP_SERVICE_SECRET", None)  # a migration job needs only the database
        return subprocess.run(
            [sys.executable, "-m", "agent_service.store.migrate"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def check(url: str) -> None:
        done = migrate(url)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"The run store's schema is at revision {MIGRATIONS.head()}."
        assert migrate(url).returncode == 0  # again: nothing to do

    if backend == "sqlite":
        check("sqlite:///data/agent.db")  # relative to the working directory; the folder is created
        assert (tmp_path / "data" / "agent.db").is_file()
    else:
        with fresh_postgres_database("agent_migrate") as url:
            check(url)
    failed = migrate("mysql://root@localhost/agent")
    assert failed.returncode == 1
    assert "sqlite:///" in failed.stderr
    assert "Traceback" not in failed.stderr


@pytest.mark.parametrize(
    "url", ["mysql://root@localhost/agent", "sqlite://", "sqlite:///:memory:", "not a url", "postgresql+psycopg://x/y"]
)
async def test_a_database_url_the_store_does_not_take_is_refused_in_one_sentence(url: str) -> None:
    with pytest.raises(ValueError, match=r"^The run store's") as refused:
        await RunStore.open(url)
    message = str(refused.value)
    assert message.endswith(".")
    assert re.search(r"[.:]\s+[A-Z]", message) is None
    assert "\n" not in message


async def test_an_unreachable_postgresql_is_a_store_error_that_keeps_the_password_out() -> None:
    with anyio.fail_after(15):
        with pytest.raises(StoreError) as failure:
            await RunStore.open("postgresql://postgres:hunter2secret@127.0.0.1:1/agent")
    assert "schema" in str(failure.value)
    assert "hunter2secret" not in str(failure.value)


async def test_a_step_on_sqlite_waits_for_another_writer_of_the_file_then_is_written(tmp_path: Path) -> None:
    """A step is written on the event loop when SQLite's write lock is free, and waits for it on a worker thread
    when another writer holds it (here: another process's connection, as a migration would)."""
    path = tmp_path / "agent.db"
    store = await RunStore.open(f"sqlite:///{path}")
    try:
        run = new_run()
        await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        written = anyio.Event()

        async def write_step() -> None:
            await store.record(run.run_id, Step(events=[event(1)], iterations=1), owner="replica-a")
            written.set()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(write_step)
                await anyio.wait_all_tasks_blocked()
                assert not written.is_set()  # waiting for the other writer, without blocking the event loop
                other.execute("COMMIT")
        other.close()
        record = await store.get_run(run.run_id)
        assert record is not None
        assert (record.iterations, record.last_seq) == (1, 1)
    finally:
        await store.aclose()


async def test_usage_since_sums_a_tenants_usage_log_from_a_time_on_and_a_users_within_it(store: RunStore) -> None:
    tenant = f"tenant-{uuid.uuid4().hex[:8]}"  # the PostgreSQL database is the session's: a tenant of this test's own
    now = datetime.now(UTC)
    rows = [
        (tenant, "alice", 100, 10, 0.5, now - timedelta(minutes=5)),
        (tenant, "bob", 200, 20, None, now - timedelta(minutes=4)),  # a model without a price
        (tenant, None, 300, 30, 0.25, now - timedelta(minutes=3)),
        (tenant, "alice", 1000, 100, 9.0, now - timedelta(days=40)),  # before ``since``
        ("another-tenant", "alice", 5000, 500, 1.0, now),
    ]
    table = usage_log.insert()
    values = [
        {
            "tenant": t,
            "user_id": u,
            "model": "gpt-4o",
            "input_tokens": i,
            "output_tokens": o,
            "cost_usd": c,
            "created_at": at,
        }
        for t, u, i, o, c, at in rows
    ]
    await store._db.run("log usage", lambda connection: connection.execute(table, values), write=True)
    since = now - timedelta(days=1)
    assert await store.usage_since(tenant, since) == Usage(input_tokens=600, output_tokens=60, cost_usd=0.75)
    assert await store.usage_since(tenant, since, user="alice") == Usage(
        input_tokens=100, output_tokens=10, cost_usd=0.5
    )
    assert await store.usage_since(tenant, since, user="bob") == Usage(input_tokens=200, output_tokens=20)
    assert await store.usage_since(f"{tenant}-nobody", since) == Usage()


async def test_an_image_is_kept_once_per_tenant_and_read_back_by_that_tenant_only(store: RunStore) -> None:
    png = DecodedImage("image/png", b"\x89PNG\r\n\x1a\n" + uuid.uuid4().bytes)
    gif = DecodedImage("image/gif", b"GIF89a" + uuid.uuid4().bytes)
    await store.put_images("acme", [png, png])
    await store.put_images("acme", [png, gif])  # again: left as it is
    assert await store.images("acme", [png.sha256, gif.sha256, "0" * 64]) == {png.sha256: png, gif.sha256: gif}
    assert await store.images("globex", [png.sha256]) == {}
    assert await store.images("acme", []) == {}


async def test_a_runs_images_are_kept_as_its_tenants(store: RunStore) -> None:
    gif = DecodedImage("image/gif", b"GIF89a" + uuid.uuid4().bytes)
    run = dataclasses.replace(new_run(), tenant="initech")
    await store.create_run(run, owner="me", lease_seconds=LEASE)
    await store.put_run_images(run.run_id, [gif])
    assert await store.images("initech", [gif.sha256]) == {gif.sha256: gif}


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_store_at_0008_keeps_its_runs_messages_and_events_when_their_foreign_keys_are_dropped(
    backend: str, tmp_path: Path
) -> None:
    """Revision 0009 drops the foreign keys of a run's messages and events (each write of them is guarded by the run's
    row): what was stored reads back as it was, and the run's steps go on being stored."""

    def foreign_keys(connection: sa.Connection) -> dict[str, list[Any]]:
        inspector = sa.inspect(connection)
        return {table: inspector.get_foreign_keys(table) for table in ("run_messages", "run_events")}

    async def check(url: str) -> None:
        database = open_database(database_url(url))
        try:
            await database.run("migrate to 0008", _upgrade_to("0008"), write=True)
            assert all(await database.run("read the keys", foreign_keys, write=False))
        finally:
            await database.dispose()
        # A run and its first step stored at 0008 (the tables of a run's rows are the same there), then upgraded.
        database = open_database(database_url(url))
        run = new_run(messages=[Message(role="user", content="Grüße")])
        try:

            def write_at_0008(connection: sa.Connection) -> None:
                now = datetime.now(UTC)
                row = {"run_id": run.run_id, "model": run.model, "status": "processing", "iterations": 0}
                row |= {"input_tokens": 0, "output_tokens": 0, "plan": run.plan, "created_at": now, "updated_at": now}
                row |= {"lease_owner": "replica-a", "lease_expires_at": now + timedelta(seconds=LEASE)}
                connection.execute(runs.insert(), row | {"resumes": 0, "cancel_requested": False, "last_seq": 1})
                message = {"role": "user", "content": "Grüße"}
                connection.execute(run_messages.insert(), {"run_id": run.run_id, "position": 0, "message": message})
                connection.execute(run_events.insert(), {"run_id": run.run_id, "seq": 1, "type": "text", "data": "{}"})

            await database.run("store a run at 0008", write_at_0008, write=True)
            assert await MIGRATIONS.upgrade(database) == MIGRATIONS.head()
            assert await database.run("read the keys", foreign_keys, write=False) == {
                "run_messages": [],
                "run_events": [],
            }
        finally:
            await database.dispose()
        store = await RunStore.open(url)
        try:
            answer = Message(role="assistant", content="Hallo")
            step = Step(messages=[(1, answer)], events=[StoredEvent(2, "done", "{}")], status="completed", iterations=1)
            await store.finish(run.run_id, step, owner="replica-a")
            assert await store.run_messages(run.run_id) == [Message(role="user", content="Grüße"), answer]
            assert [(event.seq, event.type) for event in await store.events_after(run.run_id, 0)] == [
                (1, "text"),
                (2, "done"),
            ]
        finally:
            await store.aclose()

    with fresh_database(backend, tmp_path, "agent_0008") as url:
        await check(url)
