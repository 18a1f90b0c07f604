"""Where a run resumes after its round's decisions, as the store keeps them: resumed by the decision itself, or
taken over after the replica that resumed it died (kill -9 before the round's results were stored)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any, cast

import pytest
from integration.agent_service.test_run_store import LEASE, event, open_store, store, store_url
from unit.agent_service.test_planning import SETTINGS

from agent_service.admission.budgets import Budgets
from agent_service.admission.run_slots import LocalRunSlots
from agent_service.admission.spend_ledgers import LocalSpendLedger
from agent_service.core.limits import RunLimits
from agent_service.core.run import RunPlan
from agent_service.core.tenancy import TenantRules
from agent_service.runs.plans import stored_plan
from agent_service.runs.running import RunExecutor
from agent_service.store import Decision, NewApproval, NewRun, RunStore, Step
from suite_common.deadline import Deadline
from suite_common.lifecycle import Lifecycle
from suite_common.wire import Message, ToolCall, ToolInfo

pytestmark = pytest.mark.anyio

__all__ = ["open_store", "store", "store_url"]  # the fixtures, imported to be used here

TOOLS = [
    ToolInfo(name="send_payment", input_schema={"type": "object"}, server="ledger"),
    ToolInfo(name="get_status", input_schema={"type": "object"}, server="ledger", annotations={"readOnlyHint": True}),
]


async def _decided_run(store: RunStore) -> str:
    """A run of acme's conversation whose round of three held calls was decided: two approved, one denied."""
    plan = RunPlan(
        run_id=f"run_{uuid.uuid4().hex}",
        model="scripted",
        messages=[],
        tools=TOOLS,
        tool_choice="auto",
        limits=RunLimits(max_iterations=5, deadline=Deadline.after(60)),
        approval_tools=frozenset({"send_payment", "get_status"}),
    )
    run_id = plan.run_id
    user = Message(role="user", content="Pay twice.")
    new = NewRun(
        run_id, "scripted", stored_plan(plan), [user], conversation_id=f"conv_{uuid.uuid4().hex}", tenant="acme"
    )
    await store.create_run(new, owner="replica-a", lease_seconds=LEASE)
    calls = [
        ToolCall(id="call_pay", name="send_payment", arguments={}),
        ToolCall(id="call_status", name="get_status", arguments={}),
        ToolCall(id="call_again", name="send_payment", arguments={}),
    ]
    turn = Message(role="assistant", tool_calls=calls)
    await store.record(
        run_id, Step(messages=[(1, turn)], events=[event(1)], status="tool_loop", iterations=1), owner="replica-a"
    )
    held = [NewApproval(call.id, 1, call.name, "ledger", {}) for call in calls]
    assert await store.park(run_id, [event(2)], held, owner="replica-a", wait_seconds=60, deadline_left_seconds=30)
    decisions = [
        Decision("call_pay", True),
        Decision("call_status", True),
        Decision("call_again", False, "once is enough"),
    ]
    decided = await store.decide(run_id, decisions, decided_by="acme-app", owner="replica-b", lease_seconds=LEASE)
    assert decided.resumed
    return run_id


def _executor(store: RunStore) -> RunExecutor:
    budgets = Budgets(LocalSpendLedger(), rules={"acme": TenantRules(monthly_tokens=1000)})
    loop = cast(Any, SimpleNamespace(telemetry=None))
    return RunExecutor(loop, store, SETTINGS, Lifecycle(grace_seconds=1), LocalRunSlots(60), budgets)


async def test_a_run_resumed_by_its_decision_makes_each_approved_call_and_tells_the_denied_one(store: RunStore) -> None:
    run_id = await _decided_run(store)
    record = await store.get_run(run_id)
    assert record is not None
    _, taken = await _executor(store).reopen(record, next_seq=record.last_seq + 1, decided=True)
    assert taken.resume.redispatch == {"call_pay", "call_status"}
    assert taken.resume.answered == {"call_again": "Not approved: once is enough"}
    # Rebuilt in the one place both ways share: its conversation's summary and its tenant's budgets.
    assert taken.plan.summaries is not None
    assert taken.plan.spending is not None


async def test_a_run_taken_over_after_its_decision_keeps_them_and_repeats_only_a_call_safe_to_repeat(
    store: RunStore,
) -> None:
    run_id = await _decided_run(store)
    record = await store.get_run(run_id)
    assert record is not None
    # The replica that resumed it may have died during the approved payment: its outcome is unknown, not made twice.
    _, taken = await _executor(store).reopen(record, next_seq=record.last_seq + 100)
    assert taken.resume.redispatch == {"call_status"}
    assert taken.resume.answered == {"call_again": "Not approved: once is enough"}
    assert taken.plan.summaries is not None
    assert taken.plan.spending is not None
