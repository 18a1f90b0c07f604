"""A round's tool calls: refused, answered from the tool-result cache, or made through the gateway (in parallel when
there are several), each result told, recorded and audited as it comes."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import anyio
from opentelemetry.trace import Span

from agent_service.core.errors import OUTBOUND_BLOCKED, AuthorizationNeeded, UpstreamError
from agent_service.core.images import DEFAULT_RUN_IMAGES_MAX_BYTES
from agent_service.core.run import EventSink, RunPlan, RunRecorder, ToolCallRecord
from agent_service.engine.images import image_room, image_summaries
from agent_service.engine.questions import ask_input, call_id_of, can_ask, continue_call
from agent_service.engine.state import RunState
from agent_service.engine.tool_cache import ToolCache
from agent_service.engine.tool_results import tool_result_content
from agent_service.infra.peers import ProgressSink, ToolsClient
from agent_service.infra.telemetry import RunTelemetry
from suite_common.echo import clip
from suite_common.logging import logged_with
from suite_common.tracing import mark_span_failed
from suite_common.wire import (
    CallToolElicitation,
    CallToolProgress,
    CallToolResponse,
    ContentPart,
    ElicitationAnswer,
    Message,
    RunAuthorizationRequired,
    RunToolProgress,
    RunToolResult,
    ToolCall,
    ToolCallStatus,
    ToolInfo,
)

__all__ = ["ToolDispatch"]


class ToolDispatch:
    """Makes a run's tool calls; the loop hands it each round's calls (``dispatch``) and the results it has without a
    call (``finished``)."""

    def __init__(
        self,
        tools: ToolsClient,
        *,
        tool_result_max_chars: int,
        telemetry: RunTelemetry,
        tool_cache: ToolCache | None,
        images_max_bytes: int = DEFAULT_RUN_IMAGES_MAX_BYTES,
    ) -> None:
        """``images_max_bytes``: what a run's images may hold together (``AGENT_RUN_IMAGES_MAX_BYTES``)."""
        self.tools = tools
        self.images_max_bytes = images_max_bytes
        self.tool_result_max_chars = tool_result_max_chars
        self.telemetry = telemetry
        self.tool_cache = tool_cache

    async def dispatch(
        self,
        plan: RunPlan,
        state: RunState,
        emit: EventSink,
        calls: list[ToolCall],
        recorder: RunRecorder | None,
        stream_text: bool,
        answers: dict[str, tuple[str, ElicitationAnswer]] | None = None,
    ) -> None:
        """Run ``calls``, in parallel when there are several; raises the tool service's own failure. ``answers``: the
        calls of a resumed run that waited for their server's question, continued with these answers
        (``ResumePoint.answers``) instead of being made."""
        allowed = {tool.name for tool in plan.tools}
        failures: list[UpstreamError] = []
        answers = answers or {}
        if len(calls) == 1:  # the common case: no task group to pay for
            await self._call_tool(plan, calls[0], allowed, emit, state, recorder, failures, None, stream_text, answers)
        else:
            async with anyio.create_task_group() as tg:
                scope = tg.cancel_scope
                for call in calls:
                    tg.start_soon(
                        self._call_tool,
                        plan,
                        call,
                        allowed,
                        emit,
                        state,
                        recorder,
                        failures,
                        scope,
                        stream_text,
                        answers,
                    )
        if failures:
            # The tool service itself failed (not a tool): the run cannot go on.
            raise failures[0]

    async def _call_tool(
        self,
        plan: RunPlan,
        call: ToolCall,
        allowed: set[str],
        emit: EventSink,
        state: RunState,
        recorder: RunRecorder | None,
        failures: list[UpstreamError],
        siblings: anyio.CancelScope | None,
        streamed: bool,
        answers: dict[str, tuple[str, ElicitationAnswer]],
    ) -> None:
        """``siblings``: the scope of the round's other calls, when there are any. ``streamed``: the run
        is streamed, so the tool's progress is reported as ``tool_progress`` events. ``answers``: as
        ``dispatch``'s."""
        iteration = state.iterations
        position = next(index for index, pending in enumerate(state.pending) if pending.id == call.id)
        started, started_at = time.perf_counter(), datetime.now(UTC)
        # The catalog's entry of the tool (its server, "-" for a name the run does not list: the model's invention).
        tool = next((tool for tool in plan.tools if tool.name == call.name), None)
        server = tool.server if tool is not None else "-"
        status: ToolCallStatus = "refused"
        cached = False

        def audit(status: ToolCallStatus, *, logged: str | None = None) -> ToolCallRecord:
            """The call's audit line and metric (under ``logged`` when given), and its audit row."""
            own = tool is not None and tool.tenant is not None  # a tool of a server its tenant registered
            seconds = self._audit(plan, iteration, position, call, server, own, logged or status, started)
            return ToolCallRecord(
                iteration=iteration,
                call_index=position,
                tool_call_id=call.id,
                tool=call.name,
                server=server if server != "-" else None,
                status=status,
                latency_ms=round(seconds * 1000, 2),
                started_at=started_at,
            )

        with (
            logged_with(tool_call_id=call.id),
            self.telemetry.span("tool_call", attributes={"tool.name": call.name, "tool.call_id": call.id}) as span,
        ):
            content: str | list[ContentPart]
            answered = answers.get(call.id)
            if answered is None and (refusal := _refusal(call, allowed)) is not None:
                content, is_error = refusal, True
            elif answered is None and (hit := await self._cached(plan, tool, call)) is not None:
                content, is_error, status, cached = hit, False, "cached", True  # nothing called: the earlier result
            else:
                try:
                    # Progress is told to a streamed run only: nobody else would see it.
                    progress = _progress_reporter(plan, iteration, call, emit) if streamed else _unseen
                    if answered is not None:
                        result = await continue_call(self.tools, plan, call, answered, progress, recorder)
                    else:
                        result = await self._execute(plan, tool, call, progress, streamed, can_ask(plan, recorder))
                except AuthorizationNeeded as needed:
                    # Nothing was called (the planned server is audited): the person is asked to consent, the model
                    # told why; never cached.
                    await _ask_consent(plan, iteration, call, needed, emit)
                    content, is_error, status = _consent_text(call, needed), True, "refused"
                except UpstreamError as error:
                    failures.append(error)
                    _gateway_failed(span, server, error, siblings)
                    # Not called (the outbound policy refused the connection), or the gateway failed it.
                    ended = audit("refused" if error.code == OUTBOUND_BLOCKED else "error", logged="failed")
                    if recorder is not None:
                        recorder.unanswered(ended)
                    return
                except anyio.get_cancelled_exc_class():
                    span.set_attributes({"tool.server": server, "tool.status": "cancelled"})
                    mark_span_failed(span, "cancelled")
                    ended = audit("cancelled")
                    if recorder is not None:
                        recorder.unanswered(ended)
                    raise
                else:
                    if isinstance(result, CallToolElicitation):  # the call waits at the gateway for a person's answer
                        span.set_attributes({"tool.server": server, "tool.status": "waiting"})
                        await ask_input(
                            plan, state, emit, recorder, call, tool.server if tool is not None else None, result
                        )
                        return
                    room = image_room(state.image_bytes, self.images_max_bytes)
                    content, image_bytes = tool_result_content(result, self.tool_result_max_chars, image_room=room)
                    state.image_bytes += image_bytes
                    is_error = result.is_error
                    # The server that ran it (the planned one: the gateway runs the call there or nowhere); a call
                    # that no server ran (refused, the gateway unreachable) keeps the planned one.
                    server, status = result.server or server, "error" if result.is_error else "ok"
                    if status == "ok" and isinstance(content, str):  # a result with images is not cached
                        await self._remember(plan, tool, call, server, content)
            span.set_attributes({"tool.server": server, "tool.status": status})
            if status not in ("ok", "cached"):
                mark_span_failed(span, status)
            # Inside the binding, so that the audit line carries the tool_call_id the stream reported.
            ended = audit(status)
        message = Message(role="tool", tool_call_id=call.id, content=content, is_error=is_error or None)
        await self.finished(
            plan, state, emit, recorder, call, message, duration_ms=ended.latency_ms, cached=cached, audit=ended
        )

    async def _execute(
        self,
        plan: RunPlan,
        tool: ToolInfo | None,
        call: ToolCall,
        progress: ProgressSink,
        streamed: bool,
        asks: bool,
    ) -> CallToolResponse | CallToolElicitation:
        """The tool call made through the gateway (routed to ``tool``'s server); raises the gateway's failure.
        ``asks``: the run can wait for a person (``questions.can_ask``), so the call is made with its ``callId`` and
        its server's question is returned."""
        if streamed or asks:
            return await self.tools.call_tool_streamed(
                call.name,
                call.arguments,
                plan.limits.deadline,
                progress,
                route=tool,
                caller=plan.caller,
                call_id=call_id_of(plan, call) if asks else None,
            )
        # the cheaper JSON answer: nobody would see the progress, nobody could answer a question (declined)
        return await self.tools.call_tool(
            call.name, call.arguments, plan.limits.deadline, route=tool, caller=plan.caller
        )

    async def _remember(self, plan: RunPlan, tool: ToolInfo | None, call: ToolCall, server: str, content: str) -> None:
        """A successful result kept in the tool-result cache: under the server that ran it, never under another (a
        gateway that ignored the route)."""
        if tool is not None and tool.server == server and self.tool_cache is not None:
            await self.tool_cache.remember(
                plan.caller, tool, call.arguments, content, max_seconds=plan.tool_cache_seconds
            )

    async def _cached(self, plan: RunPlan, tool: ToolInfo | None, call: ToolCall) -> str | None:
        """The earlier result of this very call, if the tool-result cache has one (``engine.tool_cache``)."""
        if self.tool_cache is None or tool is None:
            return None
        return await self.tool_cache.lookup(plan.caller, tool, call.arguments, max_seconds=plan.tool_cache_seconds)

    async def finished(
        self,
        plan: RunPlan,
        state: RunState,
        emit: EventSink,
        recorder: RunRecorder | None,
        call: ToolCall,
        message: Message,
        *,
        duration_ms: float,
        cached: bool = False,
        audit: ToolCallRecord | None = None,
    ) -> None:
        """A call of the current round has its result: kept for the round's end, told, recorded (with ``audit``, the
        call's audit row; ``None``: no call was made here). ``cached``: the result is an earlier identical call's,
        from the tool-result cache."""
        state.finished[call.id] = message
        await emit(
            RunToolResult(
                run_id=plan.run_id,
                iteration=state.iterations,
                tool_call_id=call.id,
                name=call.name,
                content=message.text or "",
                is_error=bool(message.is_error),
                duration_ms=duration_ms,
                cached=cached or None,
                images=image_summaries(message),
            )
        )
        if recorder is not None:
            position = next(index for index, pending in enumerate(state.pending) if pending.id == call.id)
            await recorder.result(state.turn_position + 1 + position, message, audit=audit)

    def _audit(
        self,
        plan: RunPlan,
        iteration: int,
        position: int,
        call: ToolCall,
        server: str,
        tenant_server: bool,
        status: str,
        started: float,
    ) -> float:
        """``server``: the one that answered (``-`` for a tool the run does not list); ``tenant_server``: one its
        tenant registered (counted under one label)."""
        seconds = time.perf_counter() - started
        self.telemetry.tool_call(
            run_id=plan.run_id,
            round_index=iteration,
            call_index=position,
            server=server,
            tool=call.name,
            tenant_server=tenant_server,
            status=status,
            seconds=seconds,
        )
        return seconds


def _gateway_failed(span: Span, server: str, error: UpstreamError, siblings: anyio.CancelScope | None) -> None:
    """The gateway itself failed a call (not the tool): its span marked, the round's other calls cancelled."""
    span.set_attributes({"tool.server": server, "tool.status": "failed"})
    mark_span_failed(span, error.code, error.message)
    if siblings is not None:
        siblings.cancel()  # the round's other calls cannot help now


def _refusal(call: ToolCall, allowed: set[str]) -> str | None:
    """Why the model's ``call`` is not made (a tool result it can act on), or None."""
    if call.name not in allowed:
        return f"Tool '{clip(call.name)}' is not available in this run. Available tools: {', '.join(sorted(allowed))}."
    if call.invalid_arguments is not None:
        return (
            f"The arguments for '{call.name}' were not a JSON object: {call.invalid_arguments[:200]!r}. "
            "Call the tool again with a JSON object that matches its input schema."
        )
    return None


async def _ask_consent(
    plan: RunPlan, iteration: int, call: ToolCall, needed: AuthorizationNeeded, emit: EventSink
) -> None:
    """The run's ``authorization_required`` event: who may consent, never the gateway's URL. A per-user server's
    user asks their own consent from their browser (the console's "Connect": a consent bound to it); a machine
    server's token serves the whole tenant, so only an admin gives it — a URL here would let any end user who
    clicks make their own account everyone's token."""
    await emit(
        RunAuthorizationRequired(
            run_id=plan.run_id,
            iteration=iteration,
            tool_call_id=call.id,
            name=call.name,
            server=needed.detail.server,
            tokens=needed.detail.tokens,
        )
    )


def _consent_text(call: ToolCall, needed: AuthorizationNeeded) -> str:
    """What the model reads of a call its server's OAuth kept from being made: who must connect it first."""
    server = clip(needed.detail.server)
    if needed.detail.tokens == "perUser":
        return (
            f"The tool '{clip(call.name)}' was not called: its MCP server '{server}' needs the user's authorization "
            "first. The user has been asked to connect it; tell them so, and try again once they have."
        )
    return (
        f"The tool '{clip(call.name)}' was not called: its MCP server '{server}' is not connected, and only an "
        "administrator can connect it (its authorization serves everyone). Tell the user an administrator must "
        "connect it; the user cannot do it themselves."
    )


async def _unseen(progress: CallToolProgress) -> None:
    """The progress of a call of a run that is not streamed: nobody would see it."""


def _progress_reporter(plan: RunPlan, iteration: int, call: ToolCall, emit: EventSink) -> ProgressSink:
    async def report(progress: CallToolProgress) -> None:
        await emit(
            RunToolProgress(
                run_id=plan.run_id,
                iteration=iteration,
                tool_call_id=call.id,
                progress=progress.progress,
                total=progress.total,
                message=progress.message,
            )
        )

    return report
