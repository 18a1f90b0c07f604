"""Tool calls that wait for a person's approval, as the loop sees them: held out of their round, announced
(``approval_required``), and the run's outcome that says it waits (``RunOutcome.waiting``).

The waiting itself is not the loop's: the executor parks the run in the store (``agent_service.runs.waiting``) and
a replica resumes it once the calls are decided, the approved ones made then and the denied ones answered with
``denied_result``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent_service.core.run import EventSink, RunOutcome, RunPlan
from agent_service.engine.state import RunState
from suite_common.wire import RunApprovalRequired, ToolCall

__all__ = ["NO_DECISION_IN_TIME", "ask_approval", "denied_result", "hold_for_approval", "waiting_outcome"]

NO_DECISION_IN_TIME = "no decision in time"
"""The message of a call denied because the wait's limit passed."""


def hold_for_approval(plan: RunPlan, calls: list[ToolCall]) -> tuple[list[ToolCall], list[ToolCall]]:
    """``(to run now, held for approval)``, each in the model's order."""
    if not plan.approval_tools:
        return calls, []
    return (
        [call for call in calls if call.name not in plan.approval_tools],
        [call for call in calls if call.name in plan.approval_tools],
    )


async def ask_approval(plan: RunPlan, state: RunState, emit: EventSink) -> None:
    """One ``approval_required`` per held call of the round (``state.waiting``)."""
    servers = {tool.name: tool.server for tool in plan.tools}
    expires_at = (datetime.now(UTC) + timedelta(seconds=plan.approval_timeout_seconds)).isoformat()
    for call in state.waiting:
        await emit(
            RunApprovalRequired(
                run_id=plan.run_id,
                iteration=state.iterations,
                tool_call_id=call.id,
                name=call.name,
                server=servers.get(call.name),
                arguments=call.arguments,
                expires_at=expires_at,
            )
        )


def waiting_outcome(state: RunState) -> RunOutcome:
    """The outcome of a run that stops to wait (for approvals, answers or both): nothing appended is final, no
    ``done`` was emitted."""
    return RunOutcome(
        "stop",
        state.iterations,
        state.usage,
        state.appended,
        appended_from=state.appended_from,
        waiting=list(state.waiting),
        asked=list(state.asked),
    )


def denied_result(message: str | None) -> str:
    """What the model is told of a call a person (or the wait's limit) did not approve."""
    return f"Not approved: {message}" if message else "Not approved."
