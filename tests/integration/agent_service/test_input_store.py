"""The questions of a waiting run in the store, on SQLite and PostgreSQL: parked with the round's approvals in one
wait, answered (the last answer claims the run), and run out one by one: a question whose limit passed is declined
while an approval with a later limit keeps the run waiting, parked again until that limit."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from integration.agent_service.test_run_store import LEASE, event, open_store, store, store_url

from agent_service.core.run import AskedInput
from agent_service.store import (
    Decision,
    InputDecision,
    InputNotPending,
    NewApproval,
    NewRun,
    Parked,
    RunStore,
    Step,
)
from suite_common.wire import Message, ToolCall

pytestmark = pytest.mark.anyio

__all__ = ["open_store", "store", "store_url"]  # the fixtures, imported to be used here

SCHEMA = {"type": "object", "properties": {"sure": {"type": "boolean"}}}


async def _waiting_run(store: RunStore, *, question_expires: datetime) -> str:
    """A run of acme parked with one held call (``call_pay``, a minute to wait) and one question of ``call_ask``."""
    run_id = f"run_{uuid.uuid4().hex}"
    new = NewRun(run_id, "scripted", {}, [Message(role="user", content="Pay.")], tenant="acme")
    await store.create_run(new, owner="replica-a", lease_seconds=LEASE)
    calls = [ToolCall(id="call_pay", name="pay", arguments={}), ToolCall(id="call_ask", name="ask", arguments={})]
    turn = Message(role="assistant", tool_calls=calls)
    await store.record(
        run_id, Step(messages=[(1, turn)], events=[event(1)], status="tool_loop", iterations=1), owner="replica-a"
    )
    held = [NewApproval("call_pay", 1, "pay", "s", {})]
    asked = [AskedInput("el_1", "call_ask", 1, "ask", "s", "Sure?", SCHEMA, question_expires)]
    parked = await store.park(
        run_id, [event(2)], held, owner="replica-a", wait_seconds=60, deadline_left_seconds=30, asked=asked
    )
    assert parked
    return run_id


async def test_a_run_waiting_for_an_approval_and_an_answer_is_claimed_by_the_last_of_them(store: RunStore) -> None:
    run_id = await _waiting_run(store, question_expires=datetime.now(UTC) + timedelta(minutes=5))
    [question] = await store.inputs(run_id)
    assert (question.status, question.requested_schema, question.answer) == ("pending", SCHEMA, None)

    answered = await store.answer(
        run_id, [InputDecision("el_1", "accept", {"sure": True})], decided_by="acme-app", owner="b", lease_seconds=LEASE
    )
    assert not answered.resumed  # the approval is still undecided: one wait
    assert answered.record.status == "waiting"
    assert (answered.inputs[0].status, answered.inputs[0].answer) == ("accepted", {"sure": True})
    with pytest.raises(InputNotPending):
        await store.answer(
            run_id, [InputDecision("el_1", "decline")], decided_by="acme-app", owner="b", lease_seconds=LEASE
        )

    decided = await store.decide(
        run_id, [Decision("call_pay", True)], decided_by="acme-app", owner="b", lease_seconds=LEASE
    )
    assert decided.resumed
    assert (decided.record.status, decided.record.lease_owner) == ("tool_loop", "b")
    kinds = [stored.type for stored in await store.events_after(run_id, 0)]
    assert kinds[-2:] == ["input_decided", "approval_decided"]


async def test_a_question_that_ran_out_is_declined_and_the_run_waits_on_for_the_later_approval(store: RunStore) -> None:
    run_id = await _waiting_run(store, question_expires=datetime.now(UTC) - timedelta(seconds=1))
    waiting = await store.get_run(run_id)
    assert waiting is not None
    assert waiting.lease_expires_at is not None
    # The wait's limit is the earliest of what it waits for: the question's, already past.
    assert waiting.lease_expires_at < datetime.now(UTC)

    [claimed] = await store.claim_expired(
        "sweeper", lease_seconds=LEASE, abandon_before=datetime.now(UTC) - timedelta(days=1), limit=10
    )
    assert claimed.run_id == run_id
    assert await store.expire_wait(run_id, owner="sweeper", message="no decision in time") is None

    [question] = await store.inputs(run_id)
    assert (question.status, question.decided_by) == ("declined", None)
    [approval] = await store.approvals(run_id)
    assert approval.status == "pending"
    again = await store.get_run(run_id)
    assert again is not None
    assert (again.status, again.lease_owner) == ("waiting", None)
    assert again.lease_expires_at is not None
    assert again.lease_expires_at > datetime.now(UTC) + timedelta(seconds=30)


async def _asking_run(store: RunStore) -> tuple[str, AskedInput]:
    """A run of acme whose round runs: ``call_ask``'s question stored as it was asked, the run not parked yet."""
    run_id = f"run_{uuid.uuid4().hex}"
    new = NewRun(run_id, "scripted", {}, [Message(role="user", content="Ask.")], tenant="acme")
    await store.create_run(new, owner="replica-a", lease_seconds=LEASE)
    turn = Message(role="assistant", tool_calls=[ToolCall(id="call_ask", name="ask", arguments={})])
    await store.record(
        run_id, Step(messages=[(1, turn)], events=[event(1)], status="tool_loop", iterations=1), owner="replica-a"
    )
    question = AskedInput("el_1", "call_ask", 1, "ask", "s", "Sure?", SCHEMA, datetime.now(UTC) + timedelta(minutes=5))
    await store.ask(run_id, question, owner="replica-a")
    return run_id, question


async def test_an_answer_given_before_the_run_parks_is_kept_and_its_park_claims_the_run_again_at_once(
    store: RunStore,
) -> None:
    run_id, question = await _asking_run(store)
    answered = await store.answer(
        run_id, [InputDecision("el_1", "accept", {"sure": True})], decided_by="acme-app", owner="b", lease_seconds=LEASE
    )
    # Kept, but the run is its owner's still: no event written behind its back, no claim.
    assert not answered.resumed
    assert (answered.record.status, answered.record.lease_owner) == ("tool_loop", "replica-a")
    assert [(q.status, q.answer) for q in answered.inputs] == [("accepted", {"sure": True})]
    assert [stored.type for stored in await store.events_after(run_id, 0)] == ["text"]
    with pytest.raises(InputNotPending):
        await store.answer(run_id, [InputDecision("el_1", "decline")], decided_by="x", owner="b", lease_seconds=LEASE)

    parked = await store.park(
        run_id, [event(2)], [], owner="replica-a", wait_seconds=60, deadline_left_seconds=30, asked=[question]
    )

    assert parked is Parked.RESUMED
    record = await store.get_run(run_id)
    assert record is not None
    assert (record.status, record.lease_owner, record.last_seq) == ("tool_loop", "replica-a", 3)
    stored = await store.events_after(run_id, 0)
    assert [(e.seq, e.type) for e in stored] == [(1, "text"), (2, "text"), (3, "input_decided")]
    await store.forget_answer(run_id, "el_1")
    [kept] = await store.inputs(run_id)
    assert (kept.status, kept.answer, kept.decided_by) == ("accepted", None, "acme-app")


async def test_a_park_with_an_approval_still_pending_waits_and_announces_the_early_answer(store: RunStore) -> None:
    run_id, question = await _asking_run(store)
    await store.answer(
        run_id, [InputDecision("el_1", "decline")], decided_by="acme-app", owner="b", lease_seconds=LEASE
    )
    held = [NewApproval("call_pay", 1, "pay", "s", {})]

    parked = await store.park(
        run_id, [event(2)], held, owner="replica-a", wait_seconds=60, deadline_left_seconds=30, asked=[question]
    )

    assert parked is Parked.WAITING
    decided = await store.decide(
        run_id, [Decision("call_pay", True)], decided_by="acme-app", owner="b", lease_seconds=LEASE
    )
    assert decided.resumed
    kinds = [stored.type for stored in await store.events_after(run_id, 0)]
    assert kinds == ["text", "text", "input_decided", "approval_decided"]


async def test_a_question_pending_when_its_round_ends_without_parking_is_cancelled(store: RunStore) -> None:
    run_id, _ = await _asking_run(store)
    await store.close_inputs(run_id)
    [closed] = await store.inputs(run_id)
    assert closed.status == "cancelled"
