"""Questions a tool's server asks its user during a call (MCP ``elicitation/create``, relayed by the gateway as an
``elicitation`` event of ``call-tool``), as the loop sees them: announced (``input_required``) and kept with the
round (``RunState.asked``), the run then waiting in the store as for approvals (``agent_service.runs.waiting``).

A run that resumes forwards each answer to the gateway, where the call waited, and follows the call again to its
result (or its next question). A run nobody can ask (no store to wait in, the OpenAI front) sends no ``callId``: the
gateway's questions are declined at once (``ToolsClient.call_tool_streamed``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent_service.core.run import INPUT_LOST, AskedInput, EventSink, RunPlan, RunRecorder
from agent_service.engine.state import RunState
from agent_service.infra.call_answers import error_result
from agent_service.infra.peers import ProgressSink, ToolsClient
from suite_common.wire import CallToolElicitation, CallToolResponse, ElicitationAnswer, RunInputRequired, ToolCall

__all__ = ["ask_input", "call_id_of", "can_ask", "continue_call"]


def can_ask(plan: RunPlan, recorder: RunRecorder | None) -> bool:
    """Whether the run can wait for a person's answer: it is stored (it waits in the store) and its front asks."""
    return recorder is not None and plan.input_timeout_seconds is not None


def call_id_of(plan: RunPlan, call: ToolCall) -> str:
    """The gateway's key of the run's call (``CallToolRequest.call_id``): what the call is followed again by."""
    return f"{plan.run_id}/{call.id}"


def _expires_at(plan: RunPlan, question: CallToolElicitation) -> datetime:
    """The run's limit for the answer (its tenant's ``input_timeout_seconds``), or the gateway's when sooner: an
    answer after the gateway gave up on the question would reach nobody."""
    ours = datetime.now(UTC) + timedelta(seconds=plan.input_timeout_seconds or 0.0)
    try:
        theirs = datetime.fromisoformat(question.expires_at) if question.expires_at else None
    except ValueError:
        theirs = None
    if theirs is not None and theirs.tzinfo is not None and theirs < ours:
        return theirs.astimezone(UTC)
    return ours


async def ask_input(
    plan: RunPlan,
    state: RunState,
    emit: EventSink,
    recorder: RunRecorder | None,
    call: ToolCall,
    server: str | None,
    question: CallToolElicitation,
) -> None:
    """The call's server asked a question: stored, kept with the round (the run parks once the round's other calls
    have finished) and announced."""
    asked = AskedInput(
        input_id=question.elicitation_id,
        tool_call_id=call.id,
        iteration=state.iterations,
        name=call.name,
        server=question.server or server,
        message=question.message,
        requested_schema=question.requested_schema,
        expires_at=_expires_at(plan, question),
    )
    if recorder is not None:
        await recorder.asked(asked)
    state.asked.append(asked)
    await emit(
        RunInputRequired(
            run_id=plan.run_id,
            iteration=asked.iteration,
            input_id=asked.input_id,
            tool_call_id=call.id,
            name=call.name,
            server=asked.server,
            message=asked.message,
            requested_schema=asked.requested_schema,
            expires_at=asked.expires_at.isoformat(),
        )
    )


async def continue_call(
    tools: ToolsClient,
    plan: RunPlan,
    call: ToolCall,
    answered: tuple[str, ElicitationAnswer],
    on_progress: ProgressSink,
    recorder: RunRecorder | None = None,
) -> CallToolResponse | CallToolElicitation:
    """A call that waited for its server's question, resumed: the answer forwarded to the gateway, then the call
    followed to its result or next question (the answer, taken, is then forgotten by ``recorder``). A call the
    gateway no longer knows (it restarted while the run waited) ends with an error result saying its outcome is
    unknown."""
    input_id, answer = answered
    for _ in range(_ANSWER_ATTEMPTS):
        await tools.answer_question(input_id, answer, plan.limits.deadline, plan.caller)
        followed = await tools.follow_call(call_id_of(plan, call), plan.limits.deadline, on_progress, plan.caller)
        if followed is None:
            return error_result(INPUT_LOST)
        # The same question still waiting: the answer did not get through (the gateway was briefly unreachable).
        if not (isinstance(followed, CallToolElicitation) and followed.elicitation_id == input_id):
            if recorder is not None:
                await recorder.forwarded(input_id)
            return followed
    return error_result(
        "The tool service did not take the person's answer to this tool call's question; the call may still be "
        "waiting for it there, so whether it took effect is unknown."
    )


_ANSWER_ATTEMPTS = 2
"""How often a resumed call's answer is sent when following the call shows its question still waiting."""
