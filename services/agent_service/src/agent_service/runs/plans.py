"""A run's plan as the store keeps it, and what a replica taking the run over rebuilds from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter

from agent_service.core.limits import RunLimits
from agent_service.core.run import ResumePoint, RunPlan
from agent_service.core.tenancy import DEFAULT_TENANT
from agent_service.engine.approvals import denied_result
from agent_service.store import ApprovalRecord, InputRecord, RunRecord
from suite_common.deadline import Deadline
from suite_common.wire import (
    AgentRunRequest,
    ConversationSettings,
    ElicitationAnswer,
    Message,
    ReasoningControl,
    ResponseFormat,
    RunFinishReason,
    ToolChoice,
    ToolInfo,
    ToolSpec,
    Verbosity,
)

__all__ = ["Takeover", "conversation_settings", "plan_from_record", "stored_plan", "takeover"]

_TOOL_CHOICE: TypeAdapter[ToolChoice] = TypeAdapter(ToolChoice)
_VERBOSITY: TypeAdapter[Verbosity | None] = TypeAdapter(Verbosity | None)


def conversation_settings(request: AgentRunRequest) -> ConversationSettings:
    """What ``request`` asked for, as its conversation keeps it: its own fields as sent (not the defaults a persona
    or the service filled in, so that a later run gets a changed default too), and its first system message."""
    system_prompt = next((message.text for message in request.messages if message.role == "system"), None)
    return ConversationSettings(
        model=request.model,
        persona=request.persona,
        tools=request.tools,
        reasoning=request.reasoning,
        verbosity=request.verbosity,
        max_tokens=request.max_tokens,
        system_prompt=system_prompt,
    )


def stored_plan(plan: RunPlan) -> dict[str, Any]:
    """What a replica needs to run ``plan`` on, the conversation apart (that is stored message by message).

    The tools are kept as the run saw them, annotations included: whether a call may be made again after a
    crash is decided by what its tool said when the run started.
    """
    return {
        "tools": [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in plan.tools],
        "toolChoice": _TOOL_CHOICE.dump_python(plan.tool_choice, mode="json", by_alias=True),
        "maxIterations": plan.limits.max_iterations,
        "deadlineSeconds": round(plan.limits.deadline.remaining(), 3),
        "maxTotalTokens": plan.limits.max_total_tokens,
        "maxCostUsd": plan.limits.max_cost_usd,
        "maxTokens": plan.max_tokens,
        "contextTokens": plan.context_tokens,
        "summaryModel": plan.summary_model,
        "temperature": plan.temperature,
        "reasoning": plan.reasoning.model_dump(mode="json", by_alias=True) if plan.reasoning is not None else None,
        "verbosity": plan.verbosity,
        "clientTools": [spec.model_dump(mode="json", by_alias=True) for spec in plan.client_tools],
        "systemPrompt": plan.system_prompt,
        "toolCacheSeconds": plan.tool_cache_seconds,
        "responseFormat": plan.response_format.model_dump(mode="json", by_alias=True, exclude_none=True)
        if plan.response_format is not None
        else None,
        "approvalTools": sorted(plan.approval_tools),
        "approvalTimeoutSeconds": plan.approval_timeout_seconds,
        "inputTimeoutSeconds": plan.input_timeout_seconds,
    }


def plan_from_record(record: RunRecord, messages: list[Message], *, deadline_seconds: float | None = None) -> RunPlan:
    """The plan of a run taken over: its own settings, a fresh deadline of the length it started with (the time
    the crash took is not the run's) or of ``deadline_seconds`` (what it had left when it began to wait for
    approvals: the wait is not the run's either), and ``messages`` as its conversation."""
    stored = record.plan
    if deadline_seconds is None:
        deadline_seconds = float(stored["deadlineSeconds"])
    return RunPlan(
        run_id=record.run_id,
        model=record.model,
        messages=messages,
        tools=[ToolInfo.model_validate(tool) for tool in stored["tools"]],
        # A forced choice applied to the first round only, which a stored turn means has happened.
        tool_choice=_TOOL_CHOICE.validate_python(stored["toolChoice"]) if record.iterations == 0 else "auto",
        limits=RunLimits(
            max_iterations=int(stored["maxIterations"]),
            deadline=Deadline.after(deadline_seconds),
            max_total_tokens=stored.get("maxTotalTokens"),
            max_cost_usd=stored.get("maxCostUsd"),
        ),
        max_tokens=stored.get("maxTokens"),
        context_tokens=stored.get("contextTokens"),  # absent (a run stored before): not fitted, as it was not
        summary_model=stored.get("summaryModel"),
        temperature=stored.get("temperature"),
        # Absent from the plan of a run stored before they existed: the provider's defaults, as it had.
        reasoning=ReasoningControl.model_validate(stored["reasoning"]) if stored.get("reasoning") else None,
        verbosity=_VERBOSITY.validate_python(stored.get("verbosity")),
        client_tools=[ToolSpec.model_validate(spec) for spec in stored.get("clientTools", [])],
        system_prompt=stored.get("systemPrompt"),
        tool_cache_seconds=stored.get("toolCacheSeconds"),
        response_format=ResponseFormat.model_validate(stored["responseFormat"])
        if stored.get("responseFormat")
        else None,
        tenant=record.tenant or DEFAULT_TENANT,  # the run's own, stored with it
        user=record.user,
        role=record.user_role,  # the run's own column, like the user and the conversation
        conversation_id=record.conversation_id,
        approval_tools=frozenset(stored.get("approvalTools", ())),
        approval_timeout_seconds=float(stored.get("approvalTimeoutSeconds", 3600.0)),
        # Absent from a run stored before questions were asked: the default limit.
        input_timeout_seconds=stored.get("inputTimeoutSeconds", 600.0),
    )


def may_call_again(tool: ToolInfo | None) -> bool:
    """A call whose outcome a crash hid is made again only when its tool says that is harmless (MCP annotations:
    ``readOnlyHint`` or ``idempotentHint``)."""
    annotations = (tool.annotations or {}) if tool is not None else {}
    return annotations.get("readOnlyHint") is True or annotations.get("idempotentHint") is True


@dataclass(frozen=True)
class Takeover:
    """How a run taken over goes on: the loop from ``resume``, or, when its final answer was already stored, no
    further call at all (``finished``)."""

    plan: RunPlan
    resume: ResumePoint
    finished: RunFinishReason | None = None


def _repaired(own: list[Message]) -> bool:
    """Whether a run's own stored messages hold a repair: a user message after a final answer (an assistant turn
    without tool calls). Within a run a user message follows nothing else (its request's come first)."""
    return any(
        message.role == "user" and own[index - 1].role == "assistant" and not own[index - 1].tool_calls
        for index, message in enumerate(own)
        if index > 0
    )


def takeover(
    record: RunRecord,
    earlier: list[Message],
    own: list[Message],
    *,
    deadline_seconds: float | None = None,
    approvals: list[ApprovalRecord] | None = None,
    inputs: list[InputRecord] | None = None,
    decided: bool = False,
) -> Takeover:
    """``earlier``: the conversation's messages before the run; ``own``: the run's stored messages, by position;
    ``deadline_seconds``: as ``plan_from_record``'s; ``approvals``: the run's decisions (``RunStore.approvals``);
    ``inputs``: its tool servers' questions and their answers (``RunStore.inputs``);
    ``decided``: the run is resumed by the decision of its round itself, nothing crashed since (else it is taken
    over, and whoever resumed it after the decision may have died mid-call)."""
    base = len(earlier)
    last_turn = next((index for index in range(len(own) - 1, -1, -1) if own[index].role == "assistant"), None)
    resume = ResumePoint(iterations=record.iterations, usage=record.usage, repaired=_repaired(own))
    if last_turn is None:  # the crash came before the first answer was stored: the run starts over
        return Takeover(plan_from_record(record, earlier + own, deadline_seconds=deadline_seconds), resume)
    turn = own[last_turn]
    calls = turn.tool_calls or []
    plan = plan_from_record(record, earlier + own[: last_turn + 1], deadline_seconds=deadline_seconds)
    client_names = {spec.name for spec in plan.client_tools}
    if not calls:
        if any(message.role == "user" for message in own[last_turn + 1 :]):
            # A final answer that did not validate, and the repair message after it (``responseFormat``): the
            # repair round goes on; the answer is not the run's end.
            return Takeover(plan_from_record(record, earlier + own, deadline_seconds=deadline_seconds), resume)
        return Takeover(plan, resume, finished="stop")
    if all(call.name in client_names for call in calls):
        return Takeover(plan, resume, finished="tool_calls")
    results = {
        message.tool_call_id: message
        for message in own[last_turn + 1 :]
        if message.role == "tool" and message.tool_call_id is not None
    }
    tools = {tool.name: tool for tool in plan.tools}
    open_ids = {call.id for call in calls if call.id not in results}
    decisions = {approval.tool_call_id: approval for approval in approvals or [] if approval.tool_call_id in open_ids}
    # A denied call is told so, whoever resumes the run.
    answered = {
        call_id: denied_result(approval.message)
        for call_id, approval in decisions.items()
        if approval.status == "denied"
    }
    approved = {call_id for call_id, approval in decisions.items() if approval.status == "approved"}
    answers = _answers(inputs or [], open_ids)
    # The rule for an approved call without a result: resumed by its decision (no crash since: it was never made),
    # it is made, exactly once. Taken over after the decision, it is as any call a crash interrupted (the replica
    # that resumed the run may have died mid-call): made again only when its tool says that is harmless, else its
    # outcome is unknown. A held call without a decision (a crash before its run was parked) is never made.
    again = {
        call.id
        for call in calls
        if call.id in open_ids
        and call.id not in answered
        and call.id not in answers
        and (call.name not in plan.approval_tools or call.id in approved)
        and ((decided and call.id in approved) or may_call_again(tools.get(call.name)))
    }
    return Takeover(
        plan,
        ResumePoint(
            iterations=record.iterations,
            usage=record.usage,
            turn_position=base + last_turn,
            calls=list(calls),
            results=results,
            redispatch=again,
            answered=answered,
            answers=answers,
            repaired=resume.repaired,
        ),
    )


_ACTION: dict[str, Literal["accept", "decline", "cancel"]] = {
    "accepted": "accept",
    "declined": "decline",
    "cancelled": "cancel",
}


def _answers(inputs: list[InputRecord], open_ids: set[str]) -> dict[str, tuple[str, ElicitationAnswer]]:
    """The open calls that waited at the gateway for their server's last question, now answered: the answer to
    forward, then the call to follow, whoever resumes the run and however often (the gateway ignores an answer it
    has, and a call it no longer knows ends with ``INPUT_LOST``). Such a call is never made again: it is still
    running at the gateway, or its outcome is unknown."""
    last: dict[str, InputRecord] = {}
    for question in sorted(inputs, key=lambda record: record.requested_at):
        if question.tool_call_id in open_ids:
            last[question.tool_call_id] = question
    return {
        call_id: (question.input_id, ElicitationAnswer(action=_ACTION[question.status], content=question.answer))
        for call_id, question in last.items()
        if question.status in _ACTION
    }
