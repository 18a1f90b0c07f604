"""The run store's usage log, on both backends: one row per LLM call, written with the run's step (once, however
often the step is written), summed per model for a tenant (``usage_by_model``) and since a moment (``usage_since``);
and the end user, cost and budget of a run.

Every test uses tenants of its own, so the session's PostgreSQL database needs no emptying between them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from agent_service.core.errors import UpstreamError
from agent_service.core.run import LlmCall, RunOutcome
from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.runs.journal import RunJournal
from agent_service.store import LeaseLost, ModelUsage, NewRun, RunRecord, RunStore, Step, StoreError
from agent_service.store.schema import conversations, usage_log
from suite_common.wire import Message, ToolCall, Usage

pytestmark = pytest.mark.anyio

LEASE = 30.0


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    url = (
        f"sqlite:///{tmp_path}/store/agent.db" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    )
    opened = await RunStore.open(url)
    try:
        yield opened
    finally:
        await opened.aclose()


def tenant_name() -> str:
    return f"tenant-{uuid.uuid4().hex[:12]}"


async def started(
    store: RunStore, tenant: str | None, *, user: str | None = None, conversation_id: str | None = None
) -> str:
    run = NewRun(
        run_id=f"run_{uuid.uuid4().hex}",
        model="gpt-4o",
        plan={},
        input_messages=[Message(role="user", content="Hello?")],
        conversation_id=conversation_id,
        caller="acme-platform",
        tenant=tenant,
        user=user,
    )
    await store.create_run(run, owner="replica-a", lease_seconds=LEASE)
    return run.run_id


def call(
    input_tokens: int,
    output_tokens: int,
    cost: float | None = None,
    *,
    model: str = "gpt-4o",
    iteration: int = 1,
    attempt: int = 0,
) -> LlmCall:
    """An LLM call of a run's round ``iteration`` (each call of a run has a round of its own), made on ``attempt``."""
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost)
    return LlmCall(model, "openai", usage, iteration=iteration, attempt=attempt)


async def taken_over(store: RunStore, run_id: str) -> RunRecord:
    """``run_id``'s record as replica-b claims it once replica-a has let it go (as after a crash)."""
    await store.release("replica-a", [run_id])
    [claimed] = [
        record
        for record in await store.claim_expired(
            "replica-b", lease_seconds=LEASE, abandon_before=datetime(2000, 1, 1, tzinfo=UTC), limit=100
        )
        if record.run_id == run_id
    ]
    return claimed


async def rows(store: RunStore, **where: Any) -> list[Any]:
    query = sa.select(usage_log).where(*(usage_log.c[name] == value for name, value in where.items()))
    return await store._db.run(
        "read the usage log", lambda c: list(c.execute(query.order_by(usage_log.c.id))), write=False
    )


async def test_each_llm_call_is_a_usage_row_of_the_runs_tenant_user_and_caller_written_with_its_step(
    store: RunStore,
) -> None:
    tenant = tenant_name()
    run_id = await started(store, tenant, user="user-7")
    turn = Message(role="assistant", content="Looking.")
    before = datetime.now(UTC)

    await store.record(
        run_id,
        Step(
            messages=[(1, turn)],
            status="tool_loop",
            iterations=1,
            usage=Usage(input_tokens=10, output_tokens=3, cost_usd=0.25),
            calls=[call(10, 3, 0.25)],
        ),
        owner="replica-a",
    )
    assert len(await rows(store, run_id=run_id)) == 1  # with the step, not later
    await store.finish(
        run_id,
        Step(
            status="completed",
            finish_reason="budget",
            budget="run_tokens",
            iterations=2,
            usage=Usage(input_tokens=30, output_tokens=8, cost_usd=0.5),
            calls=[call(20, 5, 0.25, iteration=2)],
        ),
        owner="replica-a",
    )

    logged = await rows(store, run_id=run_id)
    assert [(row.tenant, row.user_id, row.caller, row.model, row.provider) for row in logged] == [
        (tenant, "user-7", "acme-platform", "gpt-4o", "openai")
    ] * 2
    assert [(row.input_tokens, row.output_tokens, row.cost_usd) for row in logged] == [(10, 3, 0.25), (20, 5, 0.25)]
    assert all(
        before - timedelta(seconds=1) <= row.created_at.replace(tzinfo=UTC) <= datetime.now(UTC) for row in logged
    )
    record = await store.get_run(run_id)
    assert record is not None
    assert (record.user, record.budget, record.usage) == (
        "user-7",
        "run_tokens",
        Usage(input_tokens=30, output_tokens=8, cost_usd=0.5),
    )


async def test_a_call_cut_off_is_logged_as_an_estimate_without_a_provider_beside_the_calls_answered(
    store: RunStore,
) -> None:
    tenant = tenant_name()
    run_id = await started(store, tenant)
    await store.record(run_id, Step(iterations=1, calls=[call(10, 3)]), owner="replica-a")
    cut = LlmCall("gpt-4o", "", Usage(input_tokens=76, output_tokens=3000), iteration=2, estimated=True)
    await store.finish(run_id, Step(status="cancelled", iterations=2, calls=[cut]), owner="replica-a")
    await store.log_usage(replace(cut, iteration=None), tenant=tenant, user=None, caller="acme-platform")
    logged = await rows(store, tenant=tenant)
    assert [(row.run_id, row.provider, row.output_tokens, row.estimated) for row in logged] == [
        (run_id, "openai", 3, False),
        (run_id, None, 3000, True),
        (None, None, 3000, True),
    ]


async def test_a_step_the_lease_guard_refuses_logs_no_usage(store: RunStore) -> None:
    run_id = await started(store, tenant_name())
    with pytest.raises(LeaseLost):
        await store.record(run_id, Step(iterations=1, calls=[call(10, 3)]), owner="replica-b")
    assert await rows(store, run_id=run_id) == []


async def test_a_run_without_a_tenant_logs_its_usage_as_the_default_tenants(store: RunStore) -> None:
    run_id = await started(store, None)
    await store.record(run_id, Step(iterations=1, calls=[call(1, 1)]), owner="replica-a")
    assert [row.tenant for row in await rows(store, run_id=run_id)] == [DEFAULT_TENANT]


async def test_usage_is_summed_per_model_over_the_range_for_the_tenant_and_user_asked(store: RunStore) -> None:
    tenant, other = tenant_name(), tenant_name()
    start = datetime.now(UTC) - timedelta(seconds=1)
    alice = await started(store, tenant, user="alice")
    bob = await started(store, tenant, user="bob")
    theirs = await started(store, other, user="alice")
    await store.record(
        alice, Step(calls=[call(10, 1, 0.5), call(20, 2, None, model="claude", iteration=2)]), owner="replica-a"
    )
    await store.record(alice, Step(calls=[call(30, 3, 0.25, iteration=3)]), owner="replica-a")
    await store.record(bob, Step(calls=[call(100, 10, None)]), owner="replica-a")
    await store.record(theirs, Step(calls=[call(1000, 100, 9.0)]), owner="replica-a")
    end = datetime.now(UTC) + timedelta(seconds=1)

    assert await store.usage_by_model(tenant, start, end) == [
        ModelUsage("claude", 1, Usage(input_tokens=20, output_tokens=2)),
        ModelUsage("gpt-4o", 3, Usage(input_tokens=140, output_tokens=14, cost_usd=0.75)),
    ]
    assert await store.usage_by_model(tenant, start, end, user="bob") == [
        ModelUsage("gpt-4o", 1, Usage(input_tokens=100, output_tokens=10)),
    ]
    assert await store.usage_by_model(tenant, start, end, user="nobody") == []
    # [start, end): a range ending where the calls began, or starting after them, has none.
    assert await store.usage_by_model(tenant, start - timedelta(days=1), start) == []
    assert await store.usage_by_model(tenant, end, end + timedelta(days=1)) == []


async def test_usage_since_sums_the_tenants_or_its_users_calls_since_a_moment(store: RunStore) -> None:
    tenant = tenant_name()
    since = datetime.now(UTC) - timedelta(seconds=1)
    alice = await started(store, tenant, user="alice")
    anyone = await started(store, tenant)
    calls = [call(10, 1, 0.5), call(20, 2, model="claude", iteration=2)]
    await store.record(alice, Step(calls=calls), owner="replica-a")
    await store.record(anyone, Step(calls=[call(5, 5)]), owner="replica-a")

    assert await store.usage_since(tenant, since) == Usage(input_tokens=35, output_tokens=8, cost_usd=0.5)
    assert await store.usage_since(tenant, since, user="alice") == Usage(input_tokens=30, output_tokens=3, cost_usd=0.5)
    assert await store.usage_since(tenant, since, user="bob") == Usage()
    assert await store.usage_since(tenant, datetime.now(UTC) + timedelta(seconds=1)) == Usage()
    assert await store.usage_since(tenant_name(), since) == Usage()


async def test_the_end_user_is_stored_with_the_run_and_the_conversation_it_starts(store: RunStore) -> None:
    tenant, conversation = tenant_name(), f"conv_{uuid.uuid4().hex}"
    first = await started(store, tenant, user="alice", conversation_id=conversation)
    await store.finish(first, Step(status="completed", finish_reason="stop"), owner="replica-a")
    second = await started(store, tenant, user="bob", conversation_id=conversation)

    assert [(await store.get_run(run_id)).user for run_id in (first, second)] == ["alice", "bob"]  # type: ignore[union-attr]
    query = sa.select(conversations.c.user_id).where(conversations.c.conversation_id == conversation)
    owner = await store._db.run("read", lambda c: c.execute(query).scalar_one(), write=False)
    assert owner == "alice"  # the user who started it


async def test_a_run_taken_over_logs_its_calls_as_its_own_tenants_and_users(store: RunStore) -> None:
    tenant = tenant_name()
    run_id = await started(store, tenant, user="alice")
    claimed = await taken_over(store, run_id)
    assert (claimed.tenant, claimed.user) == (tenant, "alice")

    await store.record(run_id, Step(iterations=1, calls=[call(7, 2)]), owner="replica-b")

    assert [(row.tenant, row.user_id) for row in await rows(store, run_id=run_id)] == [(tenant, "alice")]


async def test_a_call_outside_any_run_is_logged_on_its_own_and_summed_with_the_others(store: RunStore) -> None:
    tenant = tenant_name()
    since = datetime.now(UTC) - timedelta(seconds=1)
    await store.log_usage(call(4, 2, 0.125), tenant=tenant, user="alice", caller="acme-app")
    await store.log_usage(call(4, 2, 0.125), tenant=tenant, user="alice", caller="acme-app")

    # Alike but for their ids: two calls all the same, each a row (no run, round nor attempt to make them one).
    [row, again] = await rows(store, tenant=tenant)
    assert (row.run_id, row.iteration, row.attempt, row.user_id, row.caller, row.provider) == (
        None,
        None,
        None,
        "alice",
        "acme-app",
        "openai",
    )
    assert (again.run_id, again.iteration, again.attempt) == (None, None, None)
    assert await store.usage_since(tenant, since, user="alice") == Usage(input_tokens=8, output_tokens=4, cost_usd=0.25)


async def test_a_step_written_again_logs_each_of_its_calls_once(store: RunStore) -> None:
    """A write that committed unseen (a timeout after the commit) is written again: its calls are not logged twice,
    neither by the same step nor by the run's end that carries them again."""
    tenant = tenant_name()
    since = datetime.now(UTC) - timedelta(seconds=1)
    run_id = await started(store, tenant)
    step = Step(status="tool_loop", iterations=2, calls=[call(10, 3, 0.25), call(20, 5, 0.5, iteration=2)])

    await store.record(run_id, step, owner="replica-a")
    await store.record(run_id, step, owner="replica-a")
    end = Step(status="failed", finish_reason="error", calls=[*step.calls, call(40, 7, iteration=3)])
    await store.finish(run_id, end, owner="replica-a")

    assert [(row.iteration, row.attempt, row.input_tokens) for row in await rows(store, run_id=run_id)] == [
        (1, 0, 10),
        (2, 0, 20),
        (3, 0, 40),
    ]
    assert await store.usage_since(tenant, since) == Usage(input_tokens=70, output_tokens=15, cost_usd=0.75)


async def test_the_journal_writes_again_the_calls_of_a_write_that_committed_unseen_and_they_are_logged_once(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal cannot tell a write that failed from one that committed and then failed to answer: it keeps the
    calls and the run's end carries them again (here the run fails, as a step that cannot be stored fails it)."""
    tenant = tenant_name()
    start = datetime.now(UTC) - timedelta(seconds=1)
    run_id = await started(store, tenant)
    record = store.record

    async def committed_then_failed(run_id: str, step: Step, *, owner: str) -> None:
        await record(run_id, step, owner=owner)
        raise StoreError("The database timed out after the commit.")

    monkeypatch.setattr(store, "record", committed_then_failed)
    journal = RunJournal(run_id, store=store, owner="replica-a", base=0)
    usage = Usage(input_tokens=10, output_tokens=3, cost_usd=0.25)
    turn = Message(role="assistant", tool_calls=[ToolCall(id="call_1", name="lookup")])
    with pytest.raises(UpstreamError) as failed:
        await journal.turn(1, turn, iterations=1, usage=usage, call=LlmCall("gpt-4o", "openai", usage, iteration=1))
    assert len(journal.unlogged) == 1
    await journal.finish(RunOutcome("error", 1, usage, [], failed.value))

    assert [(row.iteration, row.attempt) for row in await rows(store, run_id=run_id)] == [(1, 0)]
    assert await store.usage_by_model(tenant, start, datetime.now(UTC) + timedelta(seconds=1)) == [
        ModelUsage("gpt-4o", 1, usage)
    ]


async def test_a_round_made_again_by_a_run_taken_over_logs_its_second_call_as_a_row_of_its_own(
    store: RunStore,
) -> None:
    """A run taken over after a crash asks the model again for the round its replica had not stored: a real second
    call, of the run's next attempt (its ``resumes``, which the journal stamps on each call it logs)."""
    tenant = tenant_name()
    since = datetime.now(UTC) - timedelta(seconds=1)
    run_id = await started(store, tenant)
    await store.record(run_id, Step(calls=[call(10, 3, iteration=1)]), owner="replica-a")
    claimed = await taken_over(store, run_id)
    journal = RunJournal(run_id, store=store, owner="replica-b", base=0, attempt=claimed.resumes)
    usage = Usage(input_tokens=12, output_tokens=4)
    answer = Message(role="assistant", content="Done.")

    await journal.turn(1, answer, iterations=1, usage=usage, call=LlmCall("gpt-4o", "openai", usage, iteration=1))
    await journal.finish(RunOutcome("stop", 1, usage, [answer], appended_from=1))

    assert [(row.iteration, row.attempt, row.input_tokens) for row in await rows(store, run_id=run_id)] == [
        (1, 0, 10),
        (1, 1, 12),
    ]
    assert await store.usage_since(tenant, since) == Usage(input_tokens=22, output_tokens=7)


async def test_a_call_cut_off_by_a_shutdown_is_logged_before_the_run_is_handed_over(store: RunStore) -> None:
    """A shutdown ends the run without its end being written (another replica takes it over): the call it cut off,
    counted in the budgets with its estimate, is logged all the same, and the run's messages are left as stored."""
    tenant = tenant_name()
    since = datetime.now(UTC) - timedelta(seconds=1)
    run_id = await started(store, tenant)
    journal = RunJournal(run_id, store=store, owner="replica-a", base=0)
    estimate = Usage(input_tokens=25, output_tokens=10)
    await journal.cut_off(LlmCall("gpt-4o", "", estimate, iteration=1, estimated=True), usage=estimate)

    await journal.log_calls()

    assert [(row.iteration, row.attempt, row.estimated) for row in await rows(store, run_id=run_id)] == [(1, 0, True)]
    assert await store.usage_since(tenant, since) == estimate
    assert journal.unlogged == []
    record = await store.get_run(run_id)
    assert record is not None
    assert (record.status, record.usage.input_tokens) == ("processing", 25)
