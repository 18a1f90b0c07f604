"""The agent loop: LLM call, tool calls in parallel, results appended, until a text answer or a limit.

The loop is a coroutine that pushes events through ``emit``; it never yields from inside a
cancel scope, so its deadline and the cancellation of a departed client reach every
in-flight LLM and tool call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import anyio
import structlog
from opentelemetry.trace import Span

from agent_service.core.errors import OUTBOUND_BLOCKED, UpstreamError
from agent_service.core.limits import Stop
from agent_service.core.personas import with_system_prompt
from agent_service.core.run import (
    UNKNOWN_OUTCOME,
    EventSink,
    LlmCall,
    ResumePoint,
    RunOutcome,
    RunPlan,
    RunRecorder,
    ToolCallRecord,
)
from agent_service.engine.metering import complete_counted
from agent_service.engine.tool_cache import ToolCache
from agent_service.engine.tool_results import render_tool_result
from agent_service.infra.peers import CompletionClient, ProgressSink, ToolsClient
from agent_service.infra.telemetry import RunTelemetry
from suite_common.echo import clip
from suite_common.logging import get_logger
from suite_common.tracing import mark_span_failed
from suite_common.wire import (
    CallToolProgress,
    CallToolResponse,
    CompletionRequest,
    CompletionResponse,
    Message,
    ReasoningDelta,
    RunDone,
    RunError,
    RunFinishReason,
    RunReasoning,
    RunText,
    RunToolCall,
    RunToolProgress,
    RunToolResult,
    TextDelta,
    ToolCall,
    ToolCallStatus,
    ToolInfo,
    ToolSpec,
    Usage,
)

__all__ = ["AgentLoop"]

_log = get_logger("agent_service.loop")


@dataclass
class _RunState:
    conversation: list[Message]
    appended: list[Message] = field(default_factory=list)
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)
    pending: list[ToolCall] = field(default_factory=list)
    """Tool calls of the current round, in the order the model made them."""
    finished: dict[str, Message] = field(default_factory=dict)
    """Result messages of the current round's calls that have finished, by tool call id."""
    turn_position: int = 0
    """The position in ``conversation`` of the current round's assistant turn."""
    warnings: dict[str, None] = field(default_factory=dict)
    """The LLM calls' warnings, each once, in the order they came (a dict keeps it)."""

    @property
    def appended_from(self) -> int:
        return len(self.conversation) - len(self.appended)

    def append(self, message: Message) -> None:
        self.conversation.append(message)
        self.appended.append(message)

    def close_round(self, reason: str) -> None:
        """Append the round's results in call order; a call without one gets an error saying ``reason``.

        Every tool call then has its result, so the caller can continue the conversation.
        """
        for call in self.pending:
            result = self.finished.get(call.id)
            self.append(result or Message(role="tool", tool_call_id=call.id, content=reason, is_error=True))
        self.pending, self.finished = [], {}


class AgentLoop:
    def __init__(
        self,
        completions: CompletionClient,
        tools: ToolsClient,
        *,
        tool_result_max_chars: int,
        telemetry: RunTelemetry | None = None,
        tool_cache: ToolCache | None = None,
    ) -> None:
        self.completions = completions
        self.tools = tools
        self.tool_result_max_chars = tool_result_max_chars
        self.telemetry = telemetry or RunTelemetry.disabled()
        self.tool_cache = tool_cache

    async def run(
        self,
        plan: RunPlan,
        emit: EventSink,
        *,
        stream_text: bool,
        recorder: RunRecorder | None = None,
        resume: ResumePoint | None = None,
    ) -> RunOutcome:
        """Run to the end; emits ``done`` or ``error`` last. Raises only when cancelled.

        ``resume``: a run taken over after a crash, whose stored conversation is ``plan.messages``; its last round's
        tool calls are finished first."""
        telemetry = self.telemetry
        state = _RunState(conversation=list(plan.messages))
        if resume is not None:
            state.iterations, state.usage = resume.iterations, resume.usage
        outcome = "cancelled"
        telemetry.run_started()
        attributes = {"agent.run_id": plan.run_id, "agent.model": plan.model}
        failed = False
        try:
            with (
                structlog.contextvars.bound_contextvars(run_id=plan.run_id),
                telemetry.tracer.start_as_current_span("agent_run", attributes=attributes) as span,
            ):
                try:
                    result = await self._run(plan, state, emit, stream_text, recorder, resume)
                except anyio.get_cancelled_exc_class():
                    telemetry.run_outcome(span, "cancelled", "cancelled")
                    raise
                except Exception:
                    outcome, failed = "internal_error", True  # a bug: the span records the exception
                    raise
                failed = result.error is not None
                outcome = result.error.code if result.error is not None else result.finish_reason
                finish_reason = "error" if result.error is not None else result.finish_reason
                telemetry.run_outcome(span, outcome, finish_reason, result.error.message if result.error else None)
                return result
        finally:
            telemetry.run_ended(outcome, state.iterations, failed=failed)

    async def _run(
        self,
        plan: RunPlan,
        state: _RunState,
        emit: EventSink,
        stream_text: bool,
        recorder: RunRecorder | None,
        resume: ResumePoint | None,
    ) -> RunOutcome:
        started = time.perf_counter()
        try:
            with anyio.CancelScope(deadline=plan.limits.deadline.at) as deadline_scope:
                if resume is not None and resume.calls:
                    await self._finish_round(plan, state, emit, resume, recorder, stream_text)
                stop = await self._rounds(plan, state, emit, stream_text, recorder)
            if deadline_scope.cancelled_caught:
                stop = Stop("deadline")
        except UpstreamError as error:
            if not plan.limits.out_of_time():
                return await _failed(plan, state, emit, error)
            stop = Stop("deadline")
        except anyio.get_cancelled_exc_class():
            _log.info("run_cancelled", iterations=state.iterations)
            raise
        return await self._finish(plan, state, emit, stop, time.perf_counter() - started)

    async def _finish(self, plan: RunPlan, state: _RunState, emit: EventSink, stop: Stop, elapsed: float) -> RunOutcome:
        """The run ends with ``stop`` (not a failure): logged, told in ``done``, its outcome returned."""
        finish, budget = stop.reason, stop.budget
        if finish == "deadline":
            state.close_round("The run's deadline passed before this tool call finished.")
        if finish in ("deadline", "max_iterations", "budget"):
            self.telemetry.budget_exhausted(
                run_id=plan.run_id, budget=budget or finish, rounds=state.iterations, seconds=elapsed
            )
        _log.info(
            "run_finished",
            finish_reason=finish,
            budget=budget,
            iterations=state.iterations,
            duration_ms=round(elapsed * 1000, 1),
        )
        warnings = list(state.warnings) or None
        await emit(
            RunDone(
                run_id=plan.run_id,
                finish_reason=finish,
                iterations=state.iterations,
                usage=state.usage,
                budget=budget,
                warnings=warnings,
            )
        )
        return RunOutcome(
            finish,
            state.iterations,
            state.usage,
            state.appended,
            appended_from=state.appended_from,
            budget=budget,
            warnings=warnings,
        )

    async def _finish_round(
        self,
        plan: RunPlan,
        state: _RunState,
        emit: EventSink,
        resume: ResumePoint,
        recorder: RunRecorder | None,
        stream_text: bool,
    ) -> None:
        """The interrupted round of a resumed run: its stored results kept, the idempotent calls that have none
        made again, the others answered with an unknown outcome; then the round closes as any other."""
        state.conversation = state.conversation[: resume.turn_position + 1]
        state.turn_position, state.pending = resume.turn_position, list(resume.calls)
        state.finished = dict(resume.results)
        again = [call for call in resume.calls if call.id not in resume.results and call.id in resume.redispatch]
        for call in resume.calls:
            if call.id not in resume.results and call.id not in resume.redispatch:
                message = Message(role="tool", tool_call_id=call.id, content=UNKNOWN_OUTCOME, is_error=True)
                await self._finished(plan, state, emit, recorder, call, message, duration_ms=0.0)
        if again:
            await self._dispatch(plan, state, emit, again, recorder, stream_text)
        state.close_round("The tool call did not finish.")

    async def _rounds(
        self, plan: RunPlan, state: _RunState, emit: EventSink, stream_text: bool, recorder: RunRecorder | None
    ) -> Stop:
        specs = [ToolSpec(name=t.name, description=t.description, input_schema=t.input_schema) for t in plan.tools]
        specs += plan.client_tools
        tool_choice = plan.tool_choice
        while (stop := await _stop_before_call(plan, state)) is None:
            iteration = state.iterations = state.iterations + 1
            with (
                structlog.contextvars.bound_contextvars(round=iteration),
                self.telemetry.tracer.start_as_current_span("agent_round", attributes={"agent.round.index": iteration}),
            ):
                request = CompletionRequest(
                    model=plan.model,
                    messages=with_system_prompt(state.conversation, plan.system_prompt),
                    tools=specs,
                    tool_choice=tool_choice,
                    max_tokens=plan.max_tokens,
                    temperature=plan.temperature,
                    reasoning=plan.reasoning,
                    verbosity=plan.verbosity,
                )
                finish = await self._round(plan, state, emit, request, stream_text, recorder)
            if finish is not None:
                return Stop(finish)
            # A forced choice ("required" or a named tool) applies to the first round only;
            # forcing it again would keep the model from ever answering.
            tool_choice = "auto"
        return stop

    async def _round(
        self,
        plan: RunPlan,
        state: _RunState,
        emit: EventSink,
        request: CompletionRequest,
        stream_text: bool,
        recorder: RunRecorder | None,
    ) -> RunFinishReason | None:
        """One LLM call and the tool calls it asks for; a finish reason when the run ends with this round."""
        iteration = state.iterations
        started = time.perf_counter()
        response = await self._complete(plan, state, emit, request, stream_text, recorder)
        latency_ms = _ms_since(started)
        state.usage += response.usage
        state.warnings.update(dict.fromkeys(response.warnings or ()))
        if plan.spending is not None:
            await plan.spending.spent(response.usage)
        llm_call = LlmCall(
            plan.model,
            response.provider,
            response.usage,
            iteration=iteration,
            answered_model=response.model,
            latency_ms=latency_ms,
        )
        message, calls = _hand_back(plan, response.message)
        state.turn_position = len(state.conversation)
        state.append(message)
        if not calls:
            if recorder is not None:
                await recorder.turn(
                    state.turn_position, message, iterations=iteration, usage=state.usage, call=llm_call
                )
            return "tool_calls" if message.tool_calls else "stop"
        state.pending = list(calls)
        for call in calls:
            await emit(
                RunToolCall(
                    run_id=plan.run_id, iteration=iteration, id=call.id, name=call.name, arguments=call.arguments
                )
            )
        if recorder is not None:  # stored before any tool runs: a crash from here on resumes these calls
            await recorder.turn(state.turn_position, message, iterations=iteration, usage=state.usage, call=llm_call)
        await self._dispatch(plan, state, emit, calls, recorder, stream_text)
        # Results go back in the order the model asked for them, whatever order they finished in.
        state.close_round("The tool call did not finish.")
        return None

    async def _complete(
        self,
        plan: RunPlan,
        state: _RunState,
        emit: EventSink,
        request: CompletionRequest,
        stream_text: bool,
        recorder: RunRecorder | None,
    ) -> CompletionResponse:
        """The round's LLM call, its deltas streamed when ``stream_text``; cut off, it is counted all the same."""
        iteration = state.iterations
        started = time.perf_counter()

        async def forward(delta: TextDelta | ReasoningDelta) -> None:
            if isinstance(delta, TextDelta):
                await emit(RunText(run_id=plan.run_id, iteration=iteration, delta=delta.delta))
            else:
                await emit(RunReasoning(run_id=plan.run_id, iteration=iteration, delta=delta.delta))

        async def cut_off(usage: Usage) -> None:  # counted like any call, as an estimate (``metering``)
            state.usage += usage
            if plan.spending is not None:
                await plan.spending.spent(usage)
            if recorder is not None:
                call = LlmCall(
                    plan.model, "", usage, iteration=iteration, estimated=True, latency_ms=_ms_since(started)
                )
                await recorder.cut_off(call, usage=state.usage)

        with self.telemetry.tracer.start_as_current_span("llm_call", attributes={"llm.model": plan.model}) as span:
            response = await complete_counted(
                self.completions,
                request,
                plan.limits.deadline,
                forward if stream_text else None,
                on_cut_off=cut_off,
                stream=plan.spending is not None,
                prices=plan.prices,
            )
            span.set_attribute("llm.provider", response.provider)
            span.set_attribute("llm.finish_reason", response.finish_reason)
        return response

    async def _dispatch(
        self,
        plan: RunPlan,
        state: _RunState,
        emit: EventSink,
        calls: list[ToolCall],
        recorder: RunRecorder | None,
        stream_text: bool,
    ) -> None:
        """Run ``calls``, in parallel when there are several; raises the tool service's own failure."""
        allowed = {tool.name for tool in plan.tools}
        failures: list[UpstreamError] = []
        if len(calls) == 1:  # the common case: no task group to pay for
            await self._call_tool(plan, calls[0], allowed, emit, state, recorder, failures, None, stream_text)
        else:
            async with anyio.create_task_group() as tg:
                scope = tg.cancel_scope
                for call in calls:
                    tg.start_soon(
                        self._call_tool, plan, call, allowed, emit, state, recorder, failures, scope, stream_text
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
        state: _RunState,
        recorder: RunRecorder | None,
        failures: list[UpstreamError],
        siblings: anyio.CancelScope | None,
        streamed: bool,
    ) -> None:
        """``siblings``: the scope of the round's other calls, when there are any. ``streamed``: the run
        is streamed, so the tool's progress is reported as ``tool_progress`` events."""
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
            structlog.contextvars.bound_contextvars(tool_call_id=call.id),
            self.telemetry.tracer.start_as_current_span(
                "tool_call", attributes={"tool.name": call.name, "tool.call_id": call.id}
            ) as span,
        ):
            if (refusal := _refusal(call, allowed)) is not None:
                content, is_error = refusal, True
            elif (hit := await self._cached(plan, tool, call)) is not None:
                content, is_error, status, cached = hit, False, "cached", True  # nothing called: the earlier result
            else:
                try:
                    result = await self._execute(plan, tool, call, iteration, emit, streamed)
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
                content, is_error = render_tool_result(result, self.tool_result_max_chars), result.is_error
                # The server that ran it (the planned one: the gateway runs the call there or nowhere); a call
                # that no server ran (refused, the gateway unreachable) keeps the planned one.
                server, status = result.server or server, "error" if result.is_error else "ok"
                if status == "ok":
                    await self._remember(plan, tool, call, server, content)
            span.set_attributes({"tool.server": server, "tool.status": status})
            if status not in ("ok", "cached"):
                mark_span_failed(span, status)
            # Inside the binding, so that the audit line carries the tool_call_id the stream reported.
            ended = audit(status)
        message = Message(role="tool", tool_call_id=call.id, content=content, is_error=is_error or None)
        await self._finished(
            plan, state, emit, recorder, call, message, duration_ms=ended.latency_ms, cached=cached, audit=ended
        )

    async def _execute(
        self, plan: RunPlan, tool: ToolInfo | None, call: ToolCall, iteration: int, emit: EventSink, streamed: bool
    ) -> CallToolResponse:
        """The tool call made through the gateway (routed to ``tool``'s server); raises the gateway's failure."""
        if streamed:
            progress = _progress_reporter(plan, iteration, call, emit)
            return await self.tools.call_tool_streamed(
                call.name, call.arguments, plan.limits.deadline, progress, route=tool, caller=plan.caller
            )
        # the cheaper JSON answer: nobody would see the progress
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

    async def _finished(
        self,
        plan: RunPlan,
        state: _RunState,
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
                content=message.content or "",
                is_error=bool(message.is_error),
                duration_ms=duration_ms,
                cached=cached or None,
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


async def _failed(plan: RunPlan, state: _RunState, emit: EventSink, error: UpstreamError) -> RunOutcome:
    """The run fails with ``error`` (a peer's failure, not its deadline): told in an ``error`` event. A call the
    outbound policy refused closes its round without saying why: the conversation, which a model may read again in a
    later run, keeps no trace of what the policy blocked."""
    if error.code == OUTBOUND_BLOCKED:
        state.close_round("The run was stopped before this tool call finished.")
    else:
        state.close_round(f"The run failed before this tool call finished: {error.message}")
    _log.warning("run_failed", code=error.code, message=error.message, iterations=state.iterations)
    await emit(RunError(run_id=plan.run_id, code=error.code, message=error.message))
    return RunOutcome("error", state.iterations, state.usage, state.appended, error, state.appended_from)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def _hand_back(plan: RunPlan, message: Message) -> tuple[Message, list[ToolCall]]:
    """The assistant turn as kept, and the tool calls of ours to run now. A turn calling one of the caller's own
    tools (``RunPlan.client_tools``) hands only those back, and runs none of ours."""
    calls = message.tool_calls or []
    if plan.client_tools and calls:
        client_names = {spec.name for spec in plan.client_tools}
        handed_back = [call for call in calls if call.name in client_names]
        if handed_back:
            # The caller runs these and continues the conversation; our tools asked for in the same turn are
            # dropped unrun (their results could not reach the caller): the model asks again if it needs them.
            return message.model_copy(update={"tool_calls": handed_back}), []
    return message, calls


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


async def _stop_before_call(plan: RunPlan, state: _RunState) -> Stop | None:
    """The one question before each LLM call: the run's own limits, then its tenant's and user's monthly budgets."""
    stop = plan.limits.stop_before_call(state.iterations, state.usage)
    if stop is None and plan.spending is not None and (budget := await plan.spending.exhausted()) is not None:
        stop = Stop("budget", budget)
    return stop


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
