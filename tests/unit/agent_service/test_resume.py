"""A run taken over after a crash: what is called again, what is answered as unknown, and where the loop goes on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from agent_service.core.limits import RunLimits
from agent_service.core.run import UNKNOWN_OUTCOME, AskedInput, LlmCall, RunPlan, ToolCallRecord
from agent_service.runs.plans import stored_plan, takeover
from agent_service.store import ApprovalRecord, InputRecord, RunRecord
from suite_common.deadline import Deadline
from suite_common.wire import (
    ApprovalStatus,
    InputStatus,
    Message,
    ReasoningControl,
    RunToolResult,
    ToolCall,
    ToolInfo,
    Usage,
)
from support.scripted import Scripted, answer
from unit.agent_service.test_loop import Recorder

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 11, 26, tzinfo=UTC)


def tool(name: str, **annotations: bool) -> ToolInfo:
    return ToolInfo(
        name=name, input_schema={"type": "object"}, server="s", annotations={**annotations} if annotations else None
    )


TOOLS = [
    tool("lookup", readOnlyHint=True),
    tool("set_flag", idempotentHint=True),
    tool("send_email"),
    tool("charge_card", readOnlyHint=False, idempotentHint=False),
]


def record(**fields: Any) -> RunRecord:
    plan = RunPlan(
        run_id="run_1",
        model="scripted",
        messages=[],
        tools=TOOLS,
        tool_choice="required",
        limits=RunLimits(max_iterations=15, deadline=Deadline.after(60)),
    )
    values: dict[str, Any] = {
        "run_id": "run_1",
        "conversation_id": None,
        "caller": None,
        "tenant": None,
        "user": None,
        "model": "scripted",
        "status": "tool_loop",
        "iterations": 1,
        "usage": Usage(input_tokens=10, output_tokens=5),
        "finish_reason": None,
        "budget": None,
        "error": None,
        "plan": stored_plan(plan),
        "created_at": NOW,
        "updated_at": NOW,
        "lease_owner": "replica-b",
        "lease_expires_at": NOW,
        "resumes": 1,
        "cancel_requested": False,
        "last_seq": 4,
        **fields,
    }
    return RunRecord(**values)


def turn(*names: str) -> Message:
    return Message(
        role="assistant", tool_calls=[ToolCall(id=f"call_{name}", name=name, arguments={}) for name in names]
    )


def result(name: str, content: str) -> Message:
    return Message(role="tool", tool_call_id=f"call_{name}", content=content)


USER = Message(role="user", content="do things")


async def test_only_calls_whose_tools_say_they_are_safe_to_repeat_are_made_again() -> None:
    own = [USER, turn("lookup", "set_flag", "send_email", "charge_card")]
    resumed = takeover(record(), [], own).resume
    assert resumed.redispatch == {"call_lookup", "call_set_flag"}
    assert resumed.results == {}
    assert resumed.turn_position == 1
    assert [call.id for call in resumed.calls] == [
        "call_lookup",
        "call_set_flag",
        "call_send_email",
        "call_charge_card",
    ]


async def test_a_call_whose_result_was_stored_is_neither_made_again_nor_unknown() -> None:
    own = [USER, turn("lookup", "send_email"), result("send_email", "sent")]
    resumed = takeover(record(), [], own).resume
    assert resumed.results == {"call_send_email": own[2]}
    assert resumed.redispatch == {"call_lookup"}


async def test_a_takeover_continues_after_the_conversations_earlier_messages() -> None:
    earlier = [Message(role="user", content="hi"), Message(role="assistant", content="hello")]
    taken = takeover(record(), earlier, [USER, turn("lookup")])
    assert taken.resume.turn_position == 3
    assert taken.plan.messages == [*earlier, USER, turn("lookup")]


async def test_a_run_whose_final_answer_was_stored_is_finished_without_another_call() -> None:
    taken = takeover(record(), [], [USER, Message(role="assistant", content="All done.")])
    assert taken.finished == "stop"


async def test_a_run_that_crashed_before_its_first_answer_starts_over_with_its_forced_tool_choice() -> None:
    taken = takeover(record(iterations=0, status="processing"), [], [USER])
    assert taken.finished is None
    assert taken.resume.calls == []
    assert taken.plan.messages == [USER]
    assert taken.plan.tool_choice == "required"


async def test_a_run_past_its_first_round_is_resumed_with_tool_choice_auto() -> None:
    assert takeover(record(), [], [USER, turn("lookup")]).plan.tool_choice == "auto"


def decision(name: str, status: ApprovalStatus, message: str | None = None) -> ApprovalRecord:
    return ApprovalRecord(
        run_id="run_1",
        tool_call_id=f"call_{name}",
        iteration=1,
        tool=name,
        server="s",
        arguments={},
        status=status,
        message=message,
        decided_by="acme-app",
        requested_at=NOW,
        decided_at=NOW,
        expires_at=NOW,
    )


def approval_record() -> RunRecord:
    return record(plan={**record().plan, "approvalTools": ["charge_card", "lookup", "send_email"]})


async def test_a_run_resumed_by_its_decision_makes_each_approved_call_and_tells_each_denied_one() -> None:
    own = [USER, turn("lookup", "send_email", "charge_card")]
    approvals = [decision("lookup", "approved"), decision("send_email", "approved"), decision("charge_card", "denied")]
    resumed = takeover(approval_record(), [], own, approvals=approvals, decided=True).resume
    assert resumed.redispatch == {"call_lookup", "call_send_email"}
    assert resumed.answered == {"call_charge_card": "Not approved."}


async def test_a_run_taken_over_after_its_decision_keeps_it_and_repeats_only_what_is_safe_to_repeat() -> None:
    # The replica that resumed it may have died mid-call: an approved call is as any call a crash interrupted.
    own = [USER, turn("lookup", "send_email", "charge_card")]
    approvals = [
        decision("lookup", "approved"),
        decision("send_email", "approved"),
        decision("charge_card", "denied", "too much"),
    ]
    resumed = takeover(approval_record(), [], own, approvals=approvals).resume
    assert resumed.redispatch == {"call_lookup"}  # read-only; send_email's outcome is unknown
    assert resumed.answered == {"call_charge_card": "Not approved: too much"}


async def test_a_held_call_without_a_decision_is_never_made_again() -> None:
    resumed = takeover(approval_record(), [], [USER, turn("lookup")]).resume
    assert resumed.redispatch == set()


def question(name: str, input_id: str, status: InputStatus, *, at: int = 0, answer: Any = None) -> InputRecord:
    return InputRecord(
        run_id="run_1",
        input_id=input_id,
        tool_call_id=f"call_{name}",
        iteration=1,
        name=name,
        server="s",
        message="Sure?",
        requested_schema={"type": "object"},
        status=status,
        answer=answer,
        decided_by=None,
        requested_at=NOW.replace(second=at),
        decided_at=NOW,
        expires_at=NOW,
    )


async def test_a_call_whose_question_was_answered_is_continued_with_its_last_answer_and_never_made_again() -> None:
    # lookup may be repeated, but it waits at the gateway: it is followed, not made again (nor told unknown).
    own = [USER, turn("lookup", "send_email", "set_flag"), result("set_flag", "set")]
    inputs = [
        question("lookup", "el_1", "accepted", at=1, answer={"sure": True}),
        question("lookup", "el_2", "declined", at=2),
        question("send_email", "el_3", "cancelled", at=1),
        question("set_flag", "el_4", "accepted", at=1, answer={}),  # its result is stored: nothing to continue
    ]
    resumed = takeover(record(), [], own, inputs=inputs, decided=True).resume
    assert resumed.redispatch == set()
    assert {call_id: (input_id, answer.action) for call_id, (input_id, answer) in resumed.answers.items()} == {
        "call_lookup": ("el_2", "decline"),
        "call_send_email": ("el_3", "cancel"),
    }


async def test_an_accepted_answer_is_forwarded_with_its_content() -> None:
    own = [USER, turn("send_email")]
    inputs = [question("send_email", "el_1", "accepted", answer={"to": "ops"})]
    [(input_id, answer)] = takeover(record(), [], own, inputs=inputs).resume.answers.values()
    assert (input_id, answer.action, answer.content) == ("el_1", "accept", {"to": "ops"})


class Steps:
    """The loop's recorder: what it reports, in order."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, int, Message]] = []
        self.audited: list[ToolCallRecord] = []

    async def turn(self, position: int, message: Message, *, iterations: int, usage: Usage, call: LlmCall) -> None:
        self.steps.append(("turn", position, message))

    async def result(self, position: int, message: Message, *, audit: ToolCallRecord | None) -> None:
        self.steps.append(("result", position, message))
        if audit is not None:
            self.audited.append(audit)

    async def asked(self, question: AskedInput) -> None:
        raise AssertionError("no tool server asks here")

    async def forwarded(self, input_id: str) -> None:
        raise AssertionError("no answer is forwarded here")

    def unanswered(self, audit: ToolCallRecord) -> None:
        raise AssertionError("every call here is answered")

    async def cut_off(self, call: LlmCall, *, usage: Usage) -> None:
        raise AssertionError("no call is cut off here")

    async def repair(self, position: int, answer: Message, prompt: Message, *, iterations: int, usage: Usage) -> None:
        raise AssertionError("no answer is repaired here")


async def test_a_resumed_round_repeats_the_safe_calls_answers_the_others_unknown_and_the_run_goes_on() -> None:
    calls: list[str] = []

    async def run_tool(arguments: dict[str, Any]) -> str:
        calls.append("lookup")
        return "found it"

    own = [USER, turn("lookup", "send_email", "set_flag"), result("set_flag", "flag set")]
    taken = takeover(record(), [], own)
    scripted = Scripted([answer("Here is what happened.")], {"lookup": run_tool})
    events, steps = Recorder(), Steps()
    with anyio.fail_after(5):
        outcome = await scripted.loop().run(taken.plan, events, stream_text=True, recorder=steps, resume=taken.resume)
    assert calls == ["lookup"]
    assert outcome.finish_reason == "stop"
    assert outcome.iterations == 2  # the round before the crash counts
    assert outcome.usage.input_tokens == 20
    sent = scripted.completion_requests[0]["messages"]
    assert [(m["role"], m.get("toolCallId"), m.get("content")) for m in sent[2:]] == [
        ("tool", "call_lookup", "found it"),
        ("tool", "call_send_email", UNKNOWN_OUTCOME),
        ("tool", "call_set_flag", "flag set"),
    ]
    # Results are recorded where they belong (after the turn, in call order), then the new turn.
    assert sorted((kind, position) for kind, position, _ in steps.steps) == [
        ("result", 2),
        ("result", 3),
        ("turn", 5),
    ]
    assert {event.tool_call_id for event in events.of(RunToolResult)} == {"call_lookup", "call_send_email"}
    # Only the call made again is audited (in its place in the round): the unknown one was not made here.
    assert [(row.tool_call_id, row.call_index, row.iteration, row.status) for row in steps.audited] == [
        ("call_lookup", 0, 1, "ok")
    ]


async def test_a_run_taken_over_acts_for_its_own_user_role_and_conversation() -> None:
    plan = RunPlan(
        run_id="run_1",
        model="scripted",
        messages=[],
        tools=TOOLS,
        tool_choice="auto",
        limits=RunLimits(max_iterations=4, deadline=Deadline.after(60)),
        role="admin",
    )
    taken = takeover(
        record(plan=stored_plan(plan), tenant="acme", user="alice", user_role="admin", conversation_id="conv-1"),
        [],
        [USER],
    ).plan
    assert taken.caller.model_dump() == {
        "tenant": "acme",
        "user": "alice",
        "role": "admin",
        "run_id": "run_1",
        "conversation_id": "conv-1",
    }
    # A run stored before roles has none (its column is NULL).
    assert takeover(record(plan=stored_plan(plan)), [], [USER]).plan.caller.role is None


async def test_a_run_taken_over_keeps_its_token_and_cost_limits_and_a_plan_stored_without_them_has_none() -> None:
    limits = RunLimits(max_iterations=4, deadline=Deadline.after(60), max_total_tokens=900, max_cost_usd=0.25)
    plan = RunPlan(run_id="run_1", model="scripted", messages=[], tools=TOOLS, tool_choice="auto", limits=limits)
    taken = takeover(record(plan=stored_plan(plan)), [], [USER])
    assert (taken.plan.limits.max_iterations, taken.plan.limits.max_total_tokens) == (4, 900)
    assert taken.plan.limits.max_cost_usd == 0.25
    older = {key: value for key, value in stored_plan(plan).items() if key not in ("maxTotalTokens", "maxCostUsd")}
    unlimited = takeover(record(plan=older), [], [USER]).plan.limits
    assert (unlimited.max_total_tokens, unlimited.max_cost_usd) == (None, None)


async def test_a_run_taken_over_keeps_its_tenant_and_one_stored_without_is_the_default_tenants() -> None:
    assert takeover(record(tenant="acme"), [], [USER, turn("lookup")]).plan.tenant == "acme"
    assert takeover(record(), [], [USER, turn("lookup")]).plan.tenant == "default"


async def test_a_run_taken_over_sends_its_reasoning_and_verbosity_and_one_stored_without_sends_none() -> None:
    limits = RunLimits(max_iterations=4, deadline=Deadline.after(60))
    plan = RunPlan(
        run_id="run_1",
        model="scripted",
        messages=[],
        tools=TOOLS,
        tool_choice="auto",
        limits=limits,
        reasoning=ReasoningControl(effort="low", summary="none"),
        verbosity="high",
    )
    stored = json.loads(json.dumps(stored_plan(plan)))  # as the store's JSON column gives it back
    taken = takeover(record(plan=stored), [], [USER])
    scripted = Scripted([answer("done")])
    await scripted.loop().run(taken.plan, Recorder(), stream_text=False, resume=taken.resume)
    [sent] = scripted.completion_requests
    assert (sent["reasoning"], sent["verbosity"]) == ({"effort": "low", "summary": "none"}, "high")
    older = {key: value for key, value in stored.items() if key not in ("reasoning", "verbosity")}
    plain = takeover(record(plan=older), [], [USER]).plan
    assert (plain.reasoning, plain.verbosity) == (None, None)
