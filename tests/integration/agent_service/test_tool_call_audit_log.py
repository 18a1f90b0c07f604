"""The run store's tool-call audit log, on both backends: one row per tool call, written with the run's step that
records its result (once, however often the step is written; nothing when the step's guard refuses it), of the run's
tenant and user; read back a tenant's at a time, newest first, filtered and paged. And the usage log's answered model
and latency of each LLM call.

Every test uses tenants of its own, so the session's PostgreSQL database needs no emptying between them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from integration.agent_service.test_usage_log import started, store, tenant_name

from agent_service.core.run import LlmCall, ToolCallRecord
from agent_service.store import AuditFilter, LeaseLost, RunStore, Step
from agent_service.store.schema import usage_log
from suite_common.wire import Message, ToolCallStatus, Usage

pytestmark = pytest.mark.anyio

__all__ = ["store"]  # the usage log's fixture: a store on each backend

START = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def audited(
    index: int,
    *,
    status: ToolCallStatus = "ok",
    tool: str = "echo",
    iteration: int = 1,
    attempt: int = 0,
    seconds: float = 0,
) -> ToolCallRecord:
    """The audit row of call ``index`` of round ``iteration``, made ``seconds`` after ``START``."""
    return ToolCallRecord(
        iteration=iteration,
        call_index=index,
        tool_call_id=f"call_{iteration}_{index}",
        tool=tool,
        server="tools" if status != "refused" else None,
        status=status,
        latency_ms=12.5,
        started_at=START + timedelta(seconds=seconds),
        attempt=attempt,
    )


def result(position: int) -> list[tuple[int, Message]]:
    return [(position, Message(role="tool", tool_call_id=f"call_{position}", content="done"))]


async def everything(store: RunStore, tenant: str, where: AuditFilter | None = None) -> list[tuple[str, int, str]]:
    calls, _ = await store.audited_calls(tenant, where or AuditFilter(), limit=1000)
    return [(call.tool_call_id, call.attempt, call.status) for call in calls]


async def test_each_tool_call_is_a_row_of_the_runs_tenant_and_user_written_with_its_results_step(
    store: RunStore,
) -> None:
    tenant = tenant_name()
    run_id = await started(store, tenant, user="user-7")
    await store.record(run_id, Step(messages=result(2), tool_calls=[audited(0)]), owner="replica-a")
    await store.finish(
        run_id,
        Step(messages=result(3), status="failed", tool_calls=[audited(1, status="cancelled")]),
        owner="replica-a",
    )

    calls, following = await store.audited_calls(tenant, AuditFilter(), limit=10)
    assert following is None
    assert [
        (call.tenant, call.user, call.run_id, call.iteration, call.call_index, call.server, call.status)
        for call in calls
    ] == [
        (tenant, "user-7", run_id, 1, 1, "tools", "cancelled"),  # newest first
        (tenant, "user-7", run_id, 1, 0, "tools", "ok"),
    ]
    assert calls[1].created_at == START
    assert calls[1].latency_ms == 12.5


async def test_a_step_written_again_writes_its_rows_once_and_a_takeovers_attempt_is_a_row_of_its_own(
    store: RunStore,
) -> None:
    tenant = tenant_name()
    run_id = await started(store, tenant)
    step = Step(messages=result(2), tool_calls=[audited(0)])
    await store.record(run_id, step, owner="replica-a")
    await store.record(run_id, step, owner="replica-a")  # a write retried after it committed unseen
    await store.record(run_id, Step(tool_calls=[audited(0, attempt=1, seconds=5)]), owner="replica-a")
    assert await everything(store, tenant) == [("call_1_0", 1, "ok"), ("call_1_0", 0, "ok")]


async def test_a_step_the_lease_guard_refuses_writes_no_audit_row(store: RunStore) -> None:
    tenant = tenant_name()
    run_id = await started(store, tenant)
    with pytest.raises(LeaseLost):
        await store.record(run_id, Step(tool_calls=[audited(0)]), owner="replica-b")
    assert await everything(store, tenant) == []


async def test_a_run_without_a_tenant_audits_its_calls_as_the_default_tenants(store: RunStore) -> None:
    run_id = await started(store, None)
    await store.record(run_id, Step(tool_calls=[audited(0, seconds=3600 * 24 * 365 * 5)]), owner="replica-a")
    calls, _ = await store.audited_calls("default", AuditFilter(start=START + timedelta(days=365 * 5)), limit=10)
    assert [call.run_id for call in calls] == [run_id]


async def test_the_audit_is_filtered_by_time_tool_status_and_user_and_another_tenants_rows_never_show(
    store: RunStore,
) -> None:
    tenant, other = tenant_name(), tenant_name()
    alice, bob = await started(store, tenant, user="alice"), await started(store, tenant, user="bob")
    theirs = await started(store, other, user="alice")
    await store.record(
        alice,
        Step(tool_calls=[audited(0, seconds=0), audited(1, tool="web", status="error", seconds=10)]),
        owner="replica-a",
    )
    await store.record(
        bob, Step(tool_calls=[audited(0, status="refused", tool="invented", seconds=20)]), owner="replica-a"
    )
    await store.record(theirs, Step(tool_calls=[audited(0, seconds=5)]), owner="replica-a")

    def window(start: float | None = None, end: float | None = None) -> AuditFilter:
        return AuditFilter(
            start=START + timedelta(seconds=start) if start is not None else None,
            end=START + timedelta(seconds=end) if end is not None else None,
        )

    assert [tool for tool, _, _ in await everything(store, tenant)] == ["call_1_0", "call_1_1", "call_1_0"]
    calls, _ = await store.audited_calls(tenant, window(5, 20), limit=10)
    assert [(call.tool, call.status) for call in calls] == [("web", "error")]  # [from, to)
    calls, _ = await store.audited_calls(tenant, AuditFilter(tool="invented"), limit=10)
    assert [call.user for call in calls] == ["bob"]
    calls, _ = await store.audited_calls(tenant, AuditFilter(status="ok"), limit=10)
    assert [(call.run_id, call.tool) for call in calls] == [(alice, "echo")]
    calls, _ = await store.audited_calls(tenant, AuditFilter(user="alice"), limit=10)
    assert {call.run_id for call in calls} == {alice}
    calls, _ = await store.audited_calls(other, AuditFilter(), limit=10)
    assert [call.run_id for call in calls] == [theirs]


async def test_pages_follow_each_other_newest_first_without_gaps_or_repeats_calls_of_one_instant_included(
    store: RunStore,
) -> None:
    tenant = tenant_name()
    run_id = await started(store, tenant)
    # Seven calls over three rounds, the three of round 2 at the same instant.
    rows = [audited(index, iteration=1, seconds=index) for index in range(2)]
    rows += [audited(index, iteration=2, seconds=10) for index in range(3)]
    rows += [audited(index, iteration=3, seconds=20 + index) for index in range(2)]
    await store.record(run_id, Step(tool_calls=rows), owner="replica-a")

    seen: list[tuple[int, int]] = []
    after = None
    for _ in range(10):
        calls, after = await store.audited_calls(tenant, AuditFilter(), limit=2, after=after)
        seen += [(call.iteration, call.call_index) for call in calls]
        if after is None:
            break
    assert len(seen) == len(set(seen)) == 7
    assert [iteration for iteration, _ in seen] == [3, 3, 2, 2, 2, 1, 1]


async def test_each_llm_call_keeps_the_model_that_answered_and_its_latency(store: RunStore) -> None:
    tenant = tenant_name()
    run_id = await started(store, tenant)
    answered = LlmCall(
        "gpt-4o",
        "anthropic",
        Usage(input_tokens=10, output_tokens=3),
        iteration=1,
        answered_model="claude-fallback",
        latency_ms=812.5,
    )
    cut = LlmCall("gpt-4o", "", Usage(input_tokens=5, output_tokens=1), iteration=2, estimated=True, latency_ms=40.0)
    await store.record(run_id, Step(calls=[answered, cut]), owner="replica-a")
    await store.log_usage(answered, tenant=tenant, user=None, caller="acme-platform")  # a call outside any run

    query = sa.select(usage_log.c.run_id, usage_log.c.answered_model, usage_log.c.latency_ms).where(
        usage_log.c.tenant == tenant
    )
    logged = await store._db.run(
        "read the usage log", lambda c: list(c.execute(query.order_by(usage_log.c.id))), write=False
    )
    assert [tuple(row) for row in logged] == [
        (run_id, "claude-fallback", 812.5),
        (run_id, None, 40.0),
        (None, "claude-fallback", 812.5),
    ]
