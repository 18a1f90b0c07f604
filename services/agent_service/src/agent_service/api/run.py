"""``POST /api/v1/agent/run``: a run planned, begun and streamed as SSE or answered as JSON.

A run executed apart from its request (stored runs) is only followed here; one the service stops while it streams
ends with an ``error`` event saying where it goes on (``shutting_down``).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from agent_service.admission.planning import plan_run
from agent_service.api.auth import caller_of
from agent_service.api.runs import event_sender
from agent_service.api.services import services_of
from agent_service.core.run import RunOutcome
from agent_service.runs import AgentRuns, LiveSink, StartedRun
from agent_service.store import StoredEvent
from suite_common.errors import ApiError
from suite_common.http import ModelResponse, read_model, run_for_client
from suite_common.lifecycle import Lifecycle, until_interrupted
from suite_common.logging import get_logger
from suite_common.openapi import ApiRoute, Operation
from suite_common.sse import Emit, EventStreamResponse
from suite_common.wire import (
    AgentRunFailure,
    AgentRunRequest,
    AgentRunResult,
    Message,
    RunError,
    RunErrorDetail,
    RunEvent,
)

__all__ = ["run_agent", "run_routes"]

_log = get_logger("agent_service.app")


_SHUTTING_DOWN = "The service is shutting down; the run was stopped. Start it again: another instance will take it."
_HANDED_OVER = (
    "The service is shutting down; another instance takes this run over from its last stored step: "
    "follow it at GET /api/v1/agent/runs/{run_id}/events."
)


def _live_sender(send: Emit) -> LiveSink:
    to_stream = event_sender(send)

    async def send_event(_: RunEvent, event: StoredEvent) -> None:
        await to_stream(event)

    return send_event


async def _stream_run(run: StartedRun, runs: AgentRuns, lifecycle: Lifecycle, send: Emit) -> None:
    journal = run.journal
    journal.send = _live_sender(send)
    run_id = run.plan.run_id
    try:
        finished, _ = await until_interrupted(lifecycle, runs.execute(run, stream_text=True))
    except Exception as error:  # a bug, not an upstream failure: still end the stream with an event
        _log.error("run_crashed", run_id=run_id, exc_info=error)
        await journal.tell(RunError(run_id=run_id, code="internal_error", message="The run failed unexpectedly."))
        return
    if finished and run.outcome is not None and run.outcome.parks:
        # The run waits in the store for approvals: the stream stays open (keep-alives) and follows its stored events
        # wherever it is resumed, to its end. Leaving now cancels nothing.
        finished, _ = await until_interrupted(lifecycle, runs.follow(run_id, journal.flushed_seq, event_sender(send)))
    if not finished:
        # Not a silent cut: the caller learns why the stream ends, and where the run goes on. Told to this client
        # only: the run's own events go on where it is taken over.
        _log.warning("run_interrupted_by_shutdown", run_id=run_id)
        message = _HANDED_OVER.format(run_id=run_id) if journal.store is not None else _SHUTTING_DOWN
        notice = RunError(run_id=run_id, code="shutting_down", message=message)
        await journal.tell(notice)


async def _follow_detached(run: StartedRun, runs: AgentRuns, send: Emit) -> None:
    await runs.follow(run.plan.run_id, 0, event_sender(send))


def _answer(run: StartedRun, outcome: RunOutcome) -> Response:
    plan = run.plan
    headers = {"X-Agent-Run-Id": plan.run_id}
    error = outcome.error
    if error is not None:
        # The error shape, plus what the run did before it failed: tools may have run, with effects.
        failure = AgentRunFailure(
            error=RunErrorDetail(code=error.code, message=error.message),
            run_id=plan.run_id,
            messages=outcome.appended,
            iterations=outcome.iterations,
            usage=outcome.usage,
        )
        return ModelResponse(failure, status_code=error.status, headers={**error.headers, **headers})
    final = next((m for m in reversed(outcome.appended) if m.role == "assistant"), Message(role="assistant"))
    result = AgentRunResult(
        run_id=plan.run_id,
        message=final,
        messages=outcome.appended,
        finish_reason=outcome.finish_reason,
        iterations=outcome.iterations,
        usage=outcome.usage,
        budget=outcome.budget,
        warnings=outcome.warnings,
        output=outcome.output,
    )
    return ModelResponse(result, headers=headers)


async def _answer_when_ended(
    request: Request, run: StartedRun, runs: AgentRuns, lifecycle: Lifecycle, outcome: RunOutcome
) -> Response:
    """The JSON answer of a run that ended, or, when it waits for approvals, once it has ended wherever it resumed
    (a client that leaves meanwhile cancels nothing)."""
    if not outcome.parks:
        return _answer(run, outcome)
    waited = await run_for_client(request, runs.waited_outcome(run), lifecycle=lifecycle)
    if waited.client_gone:
        return Response(status_code=499)  # the run goes on; nobody reads this
    if not waited.finished or waited.result is None:
        message = _HANDED_OVER.format(run_id=run.plan.run_id)
        raise ApiError(503, "shutting_down", message, headers={"Retry-After": "1", "X-Agent-Run-Id": run.plan.run_id})
    return _answer(run, waited.result)


async def run_agent(request: Request) -> Response | EventStreamResponse:
    services = services_of(request)
    lifecycle = services.lifecycle
    runs = services.runs
    try:
        if lifecycle.draining:
            raise ApiError(503, "shutting_down", _SHUTTING_DOWN, headers={"Retry-After": "1"})
        body = await read_model(request, AgentRunRequest)
        caller = caller_of(request)
        plan = await plan_run(
            body,
            services.settings,
            services.catalog,
            services.models,
            rules=caller.rules,
            tenant=caller.tenant,
            user=caller.user,
            role=caller.role,
            runtime=await services.runtimes.of(caller.tenant, caller.rules),
        )
        run = await runs.begin(plan, body, send=None, caller=caller)
    except ApiError as refusal:  # counted and logged: a run refused is a run an operator should see
        services.loop.telemetry.run_refused(code=refusal.code, status=refusal.status, message=refusal.message)
        raise
    headers = {"X-Agent-Run-Id": plan.run_id}
    if run.detached:  # executed apart from this request, which only follows it
        runs.detach(run, stream_text=body.stream)
        if body.stream:
            return EventStreamResponse(lambda send: _follow_detached(run, runs, send), headers=headers)
        waited = await run_for_client(request, run.journal.ended.wait(), lifecycle=lifecycle)
        if waited.client_gone:
            return Response(status_code=499)  # the run goes on; nobody reads this
        if run.outcome is None:
            raise ApiError(503, "shutting_down", _HANDED_OVER.format(run_id=plan.run_id), headers={"Retry-After": "1"})
        return await _answer_when_ended(request, run, runs, lifecycle, run.outcome)
    if body.stream:
        return EventStreamResponse(lambda send: _stream_run(run, runs, lifecycle, send), headers=headers)
    outcome = await run_for_client(request, runs.execute(run, stream_text=False), lifecycle=lifecycle)
    if outcome.client_gone:
        return Response(status_code=499)  # the client has gone; nobody reads this
    if not outcome.finished or outcome.result is None:
        message = _HANDED_OVER.format(run_id=plan.run_id) if run.journal.store is not None else _SHUTTING_DOWN
        raise ApiError(503, "shutting_down", message, headers={"Retry-After": "1", **headers})
    return await _answer_when_ended(request, run, runs, lifecycle, outcome.result)


_RUN = Operation(
    "Run the agent loop: LLM calls and tool calls until a final answer",
    body=AgentRunRequest,
    answer=AgentRunResult,
    events=RunEvent,
    errors={
        400: (
            "The body is not valid JSON, or not a valid request (the message names the field; an image URL that is "
            "not https:// or data:image/<png|jpeg|gif|webp>;base64 too); or it names a persona "
            "the caller's tenant does not have (unknown_persona, listing those it has); or responseFormat's "
            "schema is not a valid JSON Schema."
        ),
        403: "The tenant may not run this model (model_not_allowed) or use a tool the run names, nor may the end "
        "user's role (X-User-Role, the tenant's tool_roles) (tool_not_allowed); or the run is under a cost limit "
        "and the model, or one of its fallbacks, has no price (model_not_priced).",
        409: "The conversation (conversationId) has a run in progress (conversation_busy), or as many runs as it may "
        "have (conversation_full).",
        422: "With stream false: the run's final answer was still not valid against its responseFormat after one "
        "repair round (invalid_output); the body keeps what the run did (a streamed run ends with that error event).",
        413: "The body is larger than the service accepts; or the run's messages would take its conversation past the "
        "size it may have (conversation_too_large); or its images hold more than a run's may "
        "(AGENT_RUN_IMAGES_MAX_BYTES: images_too_large).",
        429: "The tenant has its cap of runs in progress (too_many_runs), or the tenant or end user has used up a "
        "monthly budget (budget_exhausted), or the end user is new past the tenant's bound of end users a month "
        "(too_many_users); Retry-After says when to try again.",
        503: "The service is shutting down, or the run store or the run limits (Redis) are unavailable (Retry-After).",
    },
    example={"model": "demo", "messages": [{"role": "user", "content": "What time is it?"}], "stream": False},
)


def run_routes() -> list[ApiRoute]:
    return [ApiRoute("/api/v1/agent/run", run_agent, method="POST", operation=_RUN)]
