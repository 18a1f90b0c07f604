"""The agent loop: LLM call, tool calls in parallel, results appended, until a text answer or a limit.

The loop is a coroutine that pushes events through ``emit``; it never yields from inside a
cancel scope, so its deadline and the cancellation of a departed client reach every
in-flight LLM and tool call.
"""

from __future__ import annotations

import time

import anyio

from agent_service.core.errors import OUTBOUND_BLOCKED, UpstreamError
from agent_service.core.images import DEFAULT_RUN_IMAGES_MAX_BYTES
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
)
from agent_service.engine.approvals import ask_approval, hold_for_approval, waiting_outcome
from agent_service.engine.context import ContextFitter
from agent_service.engine.images import ImageSource, RunImages
from agent_service.engine.metering import complete_counted
from agent_service.engine.output import AnswerCheck
from agent_service.engine.state import RunState
from agent_service.engine.tool_cache import ToolCache
from agent_service.engine.tool_calls import ToolDispatch
from agent_service.infra.peers import CompletionClient, ToolsClient
from agent_service.infra.telemetry import RunTelemetry
from suite_common.logging import get_logger, logged_with
from suite_common.wire import (
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
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = ["AgentLoop"]

_log = get_logger("agent_service.loop")


class AgentLoop:
    def __init__(
        self,
        completions: CompletionClient,
        tools: ToolsClient,
        *,
        tool_result_max_chars: int,
        telemetry: RunTelemetry | None = None,
        tool_cache: ToolCache | None = None,
        images: ImageSource | None = None,
        images_max_bytes: int = DEFAULT_RUN_IMAGES_MAX_BYTES,
    ) -> None:
        """``images``: where a stored run's images are read (``engine.images``)."""
        self.completions = completions
        self.images = images
        self.tools = tools
        self.telemetry = telemetry or RunTelemetry.disabled()
        self.context = ContextFitter(completions)
        self.dispatch = ToolDispatch(
            tools,
            tool_result_max_chars=tool_result_max_chars,
            telemetry=self.telemetry,
            tool_cache=tool_cache,
            images_max_bytes=images_max_bytes,
        )

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
        state = RunState(conversation=list(plan.messages))
        if resume is not None:
            state.iterations, state.usage = resume.iterations, resume.usage
        outcome = "cancelled"
        telemetry.run_started()
        attributes = {"agent.run_id": plan.run_id, "agent.model": plan.model}
        failed = False
        try:
            with (
                logged_with(run_id=plan.run_id),
                telemetry.span("agent_run", attributes=attributes) as span,
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
                finish_reason: str = "error" if result.error is not None else result.finish_reason
                if result.parks:  # not an end: the run waits for approvals or answers
                    outcome = finish_reason = "waiting"
                telemetry.run_outcome(span, outcome, finish_reason, result.error.message if result.error else None)
                return result
        finally:
            telemetry.run_ended(outcome, state.iterations, failed=failed)

    async def _run(
        self,
        plan: RunPlan,
        state: RunState,
        emit: EventSink,
        stream_text: bool,
        recorder: RunRecorder | None,
        resume: ResumePoint | None,
    ) -> RunOutcome:
        started = time.perf_counter()
        images = RunImages(self.images, plan.tenant)
        try:
            with anyio.CancelScope(deadline=plan.limits.deadline.at) as deadline_scope:
                if state.images:  # the run's cap counts its images so far, a resumed run's too
                    state.image_bytes = await images.held(state.conversation, resumed=resume is not None)
                if resume is not None and resume.calls:
                    await self._finish_round(plan, state, emit, resume, recorder, stream_text)
                repaired = resume is not None and resume.repaired
                stop = None
                if not state.asked:  # else a call continued after its answer asked again: the run waits once more
                    stop = await self._rounds(plan, state, emit, stream_text, recorder, images, repaired=repaired)
            if deadline_scope.cancelled_caught:
                stop = Stop("deadline")
        except UpstreamError as error:
            if not plan.limits.out_of_time():
                return await _failed(plan, state, emit, error)
            stop = Stop("deadline")
        except anyio.get_cancelled_exc_class():
            _log.info("run_cancelled", iterations=state.iterations)
            raise
        if stop is None:  # the round waits for approvals or answers: the run does not end, it waits
            return waiting_outcome(state)
        return await self._finish(plan, state, emit, stop, time.perf_counter() - started)

    async def _finish(self, plan: RunPlan, state: RunState, emit: EventSink, stop: Stop, elapsed: float) -> RunOutcome:
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
                output=state.output,
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
            output=state.output,
        )

    async def _finish_round(
        self,
        plan: RunPlan,
        state: RunState,
        emit: EventSink,
        resume: ResumePoint,
        recorder: RunRecorder | None,
        stream_text: bool,
    ) -> None:
        """The interrupted round of a resumed run: its stored results kept, the idempotent calls that have none
        made again, the calls that waited for a question continued with its answer, the others answered with an
        unknown outcome; then the round closes as any other, unless a continued call asked again."""
        state.conversation = state.conversation[: resume.turn_position + 1]
        state.turn_position, state.pending = resume.turn_position, list(resume.calls)
        state.finished = dict(resume.results)
        goes_on = resume.redispatch | resume.answers.keys()
        again = [call for call in resume.calls if call.id not in resume.results and call.id in goes_on]
        for call in resume.calls:
            if call.id not in resume.results and call.id not in goes_on:
                content = resume.answered.get(call.id, UNKNOWN_OUTCOME)  # a denied approval says so
                message = Message(role="tool", tool_call_id=call.id, content=content, is_error=True)
                await self.dispatch.finished(plan, state, emit, recorder, call, message, duration_ms=0.0)
        if again:
            await self.dispatch.dispatch(plan, state, emit, again, recorder, stream_text, answers=resume.answers)
        if not state.asked:
            state.close_round("The tool call did not finish.")

    async def _rounds(
        self,
        plan: RunPlan,
        state: RunState,
        emit: EventSink,
        stream_text: bool,
        recorder: RunRecorder | None,
        images: RunImages,
        *,
        repaired: bool,
    ) -> Stop | None:
        """Why the run ends; ``None``: it waits for approvals (``state.waiting``) or answers (``state.asked``).
        ``repaired``: a resumed run had its repair round (``responseFormat``) already."""
        specs = [ToolSpec(name=t.name, description=t.description, input_schema=t.input_schema) for t in plan.tools]
        specs += plan.client_tools
        tool_choice = plan.tool_choice
        answers = AnswerCheck.of(plan.response_format, repaired=repaired)
        while (stop := await _stop_before_call(plan, state)) is None:
            iteration = state.iterations = state.iterations + 1
            with (
                logged_with(round=iteration),
                self.telemetry.span("agent_round", attributes={"agent.round.index": iteration}),
            ):
                messages = with_system_prompt(state.conversation, plan.system_prompt)
                request = CompletionRequest(
                    model=plan.model,
                    messages=await images.resolve(messages) if state.images else messages,
                    tools=specs,
                    tool_choice=tool_choice,
                    max_tokens=plan.max_tokens,
                    temperature=plan.temperature,
                    reasoning=plan.reasoning,
                    verbosity=plan.verbosity,
                    response_format=plan.response_format,
                )
                finish = await self.context.answered(  # the request fitted to the model's context window
                    plan,
                    state,
                    emit,
                    recorder,
                    request,
                    lambda fitted: self._round(plan, state, emit, fitted, stream_text, recorder),
                )
            if finish == "stop" and answers is not None:
                verdict = answers.judge(state.conversation[-1])
                if verdict.failure is not None:
                    raise verdict.failure  # the run fails with invalid_output
                if verdict.repair is not None:
                    state.append(verdict.repair)  # the invalid answer stays, and the model is told what failed
                    if recorder is not None:
                        answer = state.conversation[-2]
                        await recorder.repair(
                            state.turn_position, answer, verdict.repair, iterations=iteration, usage=state.usage
                        )
                    tool_choice = "auto"
                    continue
                state.output = verdict.output
                if stream_text:  # the answer's text, held back while it could still be invalid (``_complete``)
                    await emit(
                        RunText(run_id=plan.run_id, iteration=iteration, delta=state.conversation[-1].text or "")
                    )
            if finish is not None:
                return Stop(finish)
            if state.waiting or state.asked:
                return None
            # A forced choice ("required" or a named tool) applies to the first round only;
            # forcing it again would keep the model from ever answering.
            tool_choice = "auto"
        if answers is not None and (failure := answers.unanswered()) is not None:
            raise failure  # out of iterations or budget with the repair unanswered: no valid output, invalid_output
        return stop

    async def _round(
        self,
        plan: RunPlan,
        state: RunState,
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
        calls, state.waiting = hold_for_approval(plan, calls)
        if calls:
            await self.dispatch.dispatch(plan, state, emit, calls, recorder, stream_text)
        if state.waiting or state.asked:  # the others have finished: the round stays open until decided and answered
            if state.waiting:
                await ask_approval(plan, state, emit)
            return None
        # Results go back in the order the model asked for them, whatever order they finished in.
        state.close_round("The tool call did not finish.")
        return None

    async def _complete(
        self,
        plan: RunPlan,
        state: RunState,
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

        with self.telemetry.span("llm_call", attributes={"llm.model": plan.model}) as span:
            response = await complete_counted(
                self.completions,
                request,
                plan.limits.deadline,
                # With responseFormat nothing is streamed as it comes: an answer is told once valid (``_rounds``).
                forward if stream_text and plan.response_format is None else None,
                on_cut_off=cut_off,
                stream=plan.spending is not None,
                prices=plan.prices,
            )
            span.set_attribute("llm.provider", response.provider)
            span.set_attribute("llm.finish_reason", response.finish_reason)
        return response


async def _failed(plan: RunPlan, state: RunState, emit: EventSink, error: UpstreamError) -> RunOutcome:
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


async def _stop_before_call(plan: RunPlan, state: RunState) -> Stop | None:
    """The one question before each LLM call: the run's own limits, then its tenant's and user's monthly budgets."""
    stop = plan.limits.stop_before_call(state.iterations, state.usage)
    if stop is None and plan.spending is not None and (budget := await plan.spending.exhausted()) is not None:
        stop = Stop("budget", budget)
    return stop
