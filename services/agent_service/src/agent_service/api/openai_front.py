"""agent-service's OpenAI-compatible face: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Any OpenAI client gets agent runs: the suite calls its own tools, the client sees an answer. A request goes through
the loop when tools may be used, and straight to one completion otherwise (no tool available, the tool list
unavailable, ``tool_choice: "none"``, ``X-Agent-Disabled``, or the tenant's runtime with ``agentEnabled: false``,
which never asks the gateway). The tenant's runtime also sets the stream mode. Translation lives in
``openai_wire``; this module is the I/O around it. Reference: docs/openai-front.md.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from agent_service.admission.planning import plan_run
from agent_service.api.auth import caller_of
from agent_service.api.openai_wire import (
    AgentInfo,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkWriter,
    ModelList,
    OpenAIError,
    StreamMode,
    WireError,
    chat_completion,
    client_tool_specs,
    error_body,
    error_status,
    final_reasoning,
    final_text,
    model_list,
    to_messages,
    to_reasoning,
    to_tool_choice,
    utf8_pieces,
)
from agent_service.api.services import Services, services_of
from agent_service.core.errors import UpstreamError
from agent_service.core.personas import with_system_prompt
from agent_service.core.run import EventSink, LlmCall, RunPlan
from agent_service.core.tenancy import Caller
from agent_service.engine.metering import complete_counted
from agent_service.infra.peers import CompletionClient
from agent_service.runs import AgentRuns, StartedRun
from agent_service.store import StoredEvent
from suite_common.deadline import Deadline
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.http import ModelResponse, read_model, run_for_client
from suite_common.lifecycle import until_interrupted
from suite_common.logging import get_logger
from suite_common.openapi import ApiRoute, Operation
from suite_common.sse import Emit, EventStreamResponse
from suite_common.wire import (
    AgentRunRequest,
    CompletionRequest,
    ReasoningDelta,
    RunEvent,
    TextDelta,
    ToolCall,
    Usage,
    dump,
)

__all__ = [
    "DISABLED_HEADER",
    "EVENTS_HEADER",
    "PERSONA_HEADER",
    "REASONING_HEADER",
    "STREAM_MODE_HEADER",
    "openai_routes",
]

_log = get_logger("agent_service.openai_front")

DISABLED_HEADER = "X-Agent-Disabled"
"""Truthy: one plain completion, no run (no tool of ours, no per-round work)."""
STREAM_MODE_HEADER = "X-Agent-Stream-Mode"
"""``live``, ``final_only`` or ``disabled``: this request's stream mode instead of the setting's."""
EVENTS_HEADER = "X-Agent-Events"
"""Truthy: a streamed answer also carries the run's tool events, as extra frames OpenAI clients skip."""
PERSONA_HEADER = "X-Agent-Persona"
"""A persona of the callers file, as a run request's ``persona``: its system prompt, tools and limits (the body's
``model`` is required by OpenAI's clients, so it wins over the persona's)."""
_MAX_PERSONA_CHARS = 64
REASONING_HEADER = "X-Agent-Reasoning"
"""Truthy: the model's reasoning in the answer, as ``reasoning_content`` (deltas when streamed), and a summary of it
asked for (``reasoning.summary: auto``)."""

_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no", ""})
_STREAM_MODES: frozenset[str] = frozenset({"live", "final_only", "disabled"})
_NOT_FORWARDED = frozenset({"run_started", "text", "reasoning", "done", "error"})
"""Run events that are not extra frames: the answer's own frames say what they say."""

_SHUTTING_DOWN = (
    "The service is shutting down; the run was stopped. Send the request again: another instance will take it."
)


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    status = error_status(status, code)
    return JSONResponse(error_body(status, code, message), status_code=status, headers=headers)


def _persona(request: Request) -> str | None:
    value = request.headers.get(PERSONA_HEADER, "").strip()
    if len(value) > _MAX_PERSONA_CHARS:
        message = f"The header {PERSONA_HEADER} must be a persona's name (at most {_MAX_PERSONA_CHARS} characters)."
        raise ApiError(400, "invalid_request", message)
    return value or None


def _flag(request: Request, header: str) -> bool:
    value = request.headers.get(header, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ApiError(400, "invalid_request", f"The header {header} must be true or false (got {clip(value)!r}).")


def _stream_mode(request: Request, default: StreamMode) -> StreamMode:
    value = request.headers.get(STREAM_MODE_HEADER)
    if value is None:
        return default
    mode = value.strip().lower()
    if mode not in _STREAM_MODES:
        raise ApiError(
            400,
            "invalid_request",
            f"The header {STREAM_MODE_HEADER} must be live, final_only or disabled (got {clip(value)!r}).",
        )
    return mode  # type: ignore[return-value]  # one of the literals, checked above


@dataclass
class _Answer:
    """A run or a single completion, as the client is told about it."""

    content: str | None
    tool_calls: list[ToolCall] | None
    agent: AgentInfo
    usage: Usage
    error: UpstreamError | None = None
    reasoning: str | None = None


TextSink = Callable[[int, str], Awaitable[None]]
"""Where a streamed answer's text goes, with the round it came from."""


async def _run(runs: AgentRuns, run: StartedRun, on_event: EventSink, stream_text: bool) -> _Answer:
    async def forward(event: RunEvent, _: StoredEvent) -> None:
        await on_event(event)

    run.journal.send = forward
    plan = run.plan
    outcome = await runs.execute(run, stream_text=stream_text)
    last = outcome.appended[-1] if outcome.appended else None
    handed_back = last.tool_calls if outcome.finish_reason == "tool_calls" and last is not None else None
    agent = AgentInfo(
        run_id=plan.run_id,
        finish_reason=outcome.finish_reason,
        iterations=outcome.iterations,
        warnings=outcome.warnings,
    )
    reasoning = final_reasoning(outcome.appended)
    content = final_text(outcome.appended, structured=plan.response_format is not None)
    return _Answer(content, handed_back, agent, outcome.usage, outcome.error, reasoning)


async def _single_completion(
    completions: CompletionClient,
    plan: RunPlan,
    on_text: TextSink | None,
    on_reasoning: TextSink | None,
    log: Callable[[LlmCall], Awaitable[None]],
) -> _Answer:
    """The plain path: one completion with the client's tools, none of ours; its finish reason is the answer's.
    ``on_reasoning``: where its reasoning is streamed, if the client wants it (and its text is streamed). ``log``:
    where its usage goes (the usage log), before the answer."""
    request = CompletionRequest(
        model=plan.model,
        messages=with_system_prompt(plan.messages, plan.system_prompt),
        tools=plan.client_tools,
        tool_choice=plan.tool_choice,
        max_tokens=plan.max_tokens,
        temperature=plan.temperature,
        reasoning=plan.reasoning,
        verbosity=plan.verbosity,
    )
    streamed: list[str] = []
    cut = Usage()
    started = time.perf_counter()

    async def forward(delta: TextDelta | ReasoningDelta) -> None:
        if isinstance(delta, TextDelta) and on_text is not None:
            streamed.append(delta.delta)
            await on_text(1, delta.delta)
        elif isinstance(delta, ReasoningDelta) and on_reasoning is not None:
            await on_reasoning(1, delta.delta)

    async def count(
        usage: Usage, *, provider: str = "", answered_model: str | None = None, estimated: bool = False
    ) -> None:
        if plan.spending is not None:
            await plan.spending.spent(usage)
        latency_ms = round((time.perf_counter() - started) * 1000, 2)
        call = LlmCall(
            plan.model, provider, usage, estimated=estimated, answered_model=answered_model, latency_ms=latency_ms
        )
        await log(call)

    async def cut_off(usage: Usage) -> None:  # counted as an estimate (``metering``), and the answer's usage
        nonlocal cut
        cut = usage
        await count(usage, estimated=True)

    try:
        with anyio.CancelScope(deadline=plan.limits.deadline.at):
            response = await complete_counted(
                completions,
                request,
                plan.limits.deadline,
                forward if on_text is not None else None,
                on_cut_off=cut_off,
                stream=plan.spending is not None,
                prices=plan.prices,
            )
            await count(response.usage, provider=response.provider, answered_model=response.model)
            message = response.message
            agent = AgentInfo(finish_reason=response.finish_reason, iterations=1, warnings=response.warnings)
            reasoning = final_reasoning([message])
            return _Answer(message.text, message.tool_calls, agent, response.usage, reasoning=reasoning)
    except UpstreamError as error:
        return _Answer(None, None, AgentInfo(finish_reason="error", iterations=1), cut, error)
    # The deadline passed: what was streamed is the partial answer, its call counted as an estimate.
    return _Answer("".join(streamed) or None, None, AgentInfo(finish_reason="deadline", iterations=1), cut)


class _Chunks:
    """The frames of one streamed answer as the run goes: the role chunk first (once, whatever comes first), then
    the rounds' text and reasoning deltas (a blank line between two rounds', as in the whole answer) and, asked for
    with ``X-Agent-Events``, the run's other events as extra frames."""

    def __init__(self, writer: ChunkWriter, send: Emit, *, events: bool, reasoning: bool) -> None:
        self.writer = writer
        self.started = False
        self._send = send
        self._events = events
        self._reasoning = reasoning
        self._text_round = 0  # the round whose text was streamed last (0: none yet)
        self._reasoning_round = 0  # the same for its reasoning

    # Per text delta: one chunk encoded and sent, nothing more (hence no helper coroutines on that path).
    async def frame(self, payload: str) -> None:
        await self._send(f"data: {payload}\n\n".encode())

    async def start(self) -> None:
        self.started = True
        await self._send(f"data: {self.writer.role()}\n\n".encode())

    async def on_text(self, iteration: int, delta: str) -> None:
        if not self.started:
            await self.start()
        if self._text_round != iteration:
            if self._text_round:
                delta = "\n\n" + delta  # as in the answer's content: a blank line between the rounds' texts
            self._text_round = iteration
        await self._send(f"data: {self.writer.text(delta)}\n\n".encode())

    async def on_reasoning(self, iteration: int, delta: str) -> None:
        if not self.started:
            await self.start()
        if self._reasoning_round != iteration:
            if self._reasoning_round:
                delta = "\n\n" + delta  # as in the whole answer's reasoning_content
            self._reasoning_round = iteration
        await self.frame(self.writer.reasoning(delta))

    async def on_event(self, event: RunEvent) -> None:
        if event.type == "text":
            await self.on_text(event.iteration, event.delta)
            return
        if event.type == "reasoning":
            if self._reasoning:
                await self.on_reasoning(event.iteration, event.delta)
            return
        if event.type in ("error", "run_started"):
            return  # an error is said by the outcome, as an HTTP error if nothing was sent yet
        if not self.started:
            await self.start()
        if self._events and event.type not in _NOT_FORWARDED:
            await self.frame(self.writer.agent_event(dump(event)))


class _Request:
    """One chat completion request, planned: how it runs and how it is answered."""

    def __init__(
        self,
        services: Services,
        body: ChatCompletionRequest,
        plan: RunPlan,
        run: StartedRun | None,
        *,
        caller: Caller,
        mode: StreamMode,
        events: bool,
        reasoning: bool,
    ):
        """``run``: the stored run of an agentic request (``None``: one plain completion). ``reasoning``: the
        client asked for the model's reasoning (``X-Agent-Reasoning``)."""
        self.services = services
        self.body = body
        self.plan = plan
        self.run = run
        self.caller = caller
        self.mode = mode
        self.events = events
        self.reasoning = reasoning
        self.agentic = run is not None
        self.created = int(time.time())
        self.id = "chatcmpl-" + (plan.run_id.removeprefix("run_") if self.agentic else uuid.uuid4().hex)
        self.headers = {"X-Agent-Run-Id": plan.run_id} if self.agentic else {}

    def work(
        self, on_event: EventSink, on_text: TextSink | None, on_reasoning: TextSink | None = None
    ) -> Awaitable[_Answer]:
        """``on_reasoning``: the plain path's reasoning deltas (a run's come as ``reasoning`` events)."""
        if self.run is not None:
            return _run(self.services.runs, self.run, on_event, stream_text=on_text is not None)
        log = partial(self.services.runs.log_usage, self.caller)
        return _single_completion(self.services.loop.completions, self.plan, on_text, on_reasoning, log)

    def failure(self, error: UpstreamError | ApiError) -> JSONResponse:
        headers = {**error.headers, **self.headers}
        return _error(error.status, error.code, error.message, headers)

    async def _release(self) -> None:
        """A plain completion's slot back (a run gives its own back as it ends)."""
        if not self.agentic:
            await self.services.runs.release_slot(self.plan.run_id, spending=self.plan.spending)

    async def answer_json(self, request: Request) -> Response:
        try:
            return await self._answer_json(request)
        finally:
            await self._release()

    async def _answer_json(self, request: Request) -> Response:
        async def ignore(_: RunEvent) -> None:
            return None

        outcome = await run_for_client(request, self.work(ignore, None), lifecycle=self.services.lifecycle)
        if outcome.client_gone:
            return Response(status_code=499)  # nobody reads this
        answer = outcome.result
        if not outcome.finished or answer is None:
            return self.failure(ApiError(503, "shutting_down", _SHUTTING_DOWN, headers={"Retry-After": "1"}))
        if answer.error is not None:
            return self.failure(answer.error)
        completion = chat_completion(
            completion_id=self.id,
            created=self.created,
            model=self.body.model,
            content=answer.content,
            tool_calls=answer.tool_calls,
            agent=answer.agent,
            usage=answer.usage,
            reasoning=answer.reasoning if self.reasoning else None,
        )
        response = ModelResponse(completion)
        response.headers.update(self.headers)
        return response

    async def stream(self, send: Emit) -> ASGIApp | None:
        try:
            return await self._stream(send)
        finally:
            await self._release()

    async def _stream(self, send: Emit) -> ASGIApp | None:
        """The answer as ``chat.completion.chunk`` frames. The status line waits for the run's first step: a
        failure of the first LLM call (a 429, an unknown model) is still an HTTP error the SDK raises as such;
        a later one is an ``{"error": ...}`` frame, which the SDK raises too."""
        include_usage = bool(self.body.stream_options and self.body.stream_options.include_usage)
        writer = ChunkWriter(self.id, self.created, self.body.model, include_usage=include_usage)
        chunks = _Chunks(writer, send, events=self.events, reasoning=self.reasoning)
        try:
            live = self.mode == "live"
            on_reasoning = chunks.on_reasoning if live and self.reasoning else None
            work = self.work(chunks.on_event, chunks.on_text if live else None, on_reasoning)
            finished, answer = await until_interrupted(self.services.lifecycle, work)
        except Exception as error:  # a bug, not an upstream failure: still end the stream with an error
            _log.error("openai_front_crashed", run_id=self.plan.run_id, exc_info=error)
            return await self._fail(ApiError(500, "internal_error", "The run failed unexpectedly."), chunks)
        if not finished or answer is None:
            return await self._fail(
                ApiError(503, "shutting_down", _SHUTTING_DOWN, headers={"Retry-After": "1"}), chunks
            )
        if answer.error is not None:
            return await self._fail(answer.error, chunks)
        if not chunks.started:
            await chunks.start()
        frame = chunks.frame
        if self.mode == "final_only" and self.reasoning and answer.reasoning:
            for piece in utf8_pieces(answer.reasoning):
                await frame(writer.reasoning(piece))
        if self.mode == "final_only" and answer.content:
            for piece in utf8_pieces(answer.content):
                await frame(writer.text(piece))
        if answer.tool_calls:
            await frame(writer.tool_calls(answer.tool_calls))
        await frame(writer.finish(answer.agent))
        if include_usage:
            await frame(writer.usage(answer.usage))
        await frame("[DONE]")
        return None

    async def _fail(self, error: UpstreamError | ApiError, chunks: _Chunks) -> ASGIApp | None:
        if not chunks.started:
            return self.failure(error)
        body = error_body(error_status(error.status, error.code), error.code, error.message)
        await chunks.frame(json.dumps(body, ensure_ascii=False))
        await chunks.frame("[DONE]")
        return None


async def chat_completions(request: Request) -> Response | EventStreamResponse:
    try:
        return await _chat_completions(request)
    except ApiError as error:
        return _error(error.status, error.code, error.message, error.headers)


async def _chat_completions(request: Request) -> Response | EventStreamResponse:
    services = services_of(request)
    if services.lifecycle.draining:
        raise ApiError(503, "shutting_down", _SHUTTING_DOWN, headers={"Retry-After": "1"})
    body = await read_model(request, ChatCompletionRequest)
    settings = services.settings
    caller = caller_of(request)
    runtime = await services.runtimes.of(caller.tenant, caller.rules)
    mode = _stream_mode(request, runtime.stream_mode)
    # The tenant's agentEnabled false is the header's opt-out for every request of it.
    disabled = _flag(request, DISABLED_HEADER) or not runtime.agent_enabled
    events = _flag(request, EVENTS_HEADER)
    reasoning = _flag(request, REASONING_HEADER)
    try:
        messages, client_tools, choice = to_messages(body), client_tool_specs(body), to_tool_choice(body)
    except WireError as error:
        raise ApiError(400, "invalid_request", str(error)) from None
    run_request = AgentRunRequest(
        model=body.model,
        messages=messages,
        # Opted out: no tool of ours, so no discovery either.
        tools=[] if disabled else None,
        tool_choice=choice,
        max_tokens=body.max_completion_tokens or body.max_tokens,
        temperature=body.temperature,
        reasoning=to_reasoning(body, summary=reasoning),
        verbosity=body.verbosity,
        persona=_persona(request),
        response_format=body.response_format,
    )
    plan = await plan_run(
        run_request,
        settings,
        services.catalog,
        services.models,
        client_tools,
        rules=caller.rules,
        tenant=caller.tenant,
        user=caller.user,
        role=caller.role,
        runtime=runtime,
        # The loop only for a tenant with a tool to offer: a gateway that cannot list them leaves plain chat working.
        tools_best_effort=True,
        # An OpenAI client has no way to approve a call: the tools that would wait for a person are not offered.
        offer_approval_tools=False,
    )
    run = None
    # A structured answer is validated and repaired by the loop: it takes a run, tools or not.
    if plan.tools or plan.response_format is not None:
        run = await services.runs.begin(plan, run_request, send=None, caller=caller)
    else:  # one plain completion, not a run: still within the monthly budgets, counted, and holding a slot
        plan = await services.runs.admit(plan, caller)
    front = _Request(services, body, plan, run, caller=caller, mode=mode, events=events, reasoning=reasoning)
    if body.stream and mode != "disabled":
        return EventStreamResponse(front.stream, headers=front.headers, defer_start=True)
    return await front.answer_json(request)


async def list_models(request: Request) -> Response:
    services = services_of(request)
    try:
        models = await services.loop.completions.list_models(Deadline.after(services.settings.connect_timeout_seconds))
    except UpstreamError as error:
        return _error(error.status, error.code, error.message, error.headers)
    rules = caller_of(request).rules  # only the models the caller's tenant may run
    return ModelResponse(model_list([entry for entry in models if rules.allows_model(str(entry.get("id", "")))]))


async def _not_found(request: Request) -> Response:
    return _error(404, "not_found", f"{request.method} {request.url.path} is not part of this API.")


_CHAT_COMPLETIONS = Operation(
    "OpenAI Chat Completions: the agent loop with the suite's tools (or one plain completion)",
    body=ChatCompletionRequest,
    answer=ChatCompletion,
    events=ChatCompletionChunk | OpenAIError,  # an error after the stream started is a frame of its own
    events_end="[DONE]",
    error=OpenAIError,
    errors={
        403: "The tenant may not run this model (model_not_allowed); or the run is under a cost limit and the model, "
        "or one of its fallbacks, has no price (model_not_priced).",
        400: "Not a valid request (the message names the field); or the X-Agent-Persona header names a persona the "
        "caller's tenant does not have (unknown_persona).",
        413: "The body is larger than the service accepts; or its images hold more than a run's may "
        "(AGENT_RUN_IMAGES_MAX_BYTES: images_too_large).",
        429: "The tenant has its cap of runs in progress (too_many_runs), or the tenant or end user has used up a "
        "monthly budget (budget_exhausted), or the end user is new past the tenant's bound of end users a month "
        "(too_many_users); Retry-After says when to try again.",
        503: "The service is shutting down, or the run store or the run limits (Redis) are unavailable (Retry-After).",
    },
    example={"model": "demo", "messages": [{"role": "user", "content": "What time is it?"}]},
)
_MODELS = Operation(
    "OpenAI's model list: the models completion-service routes that the caller's tenant may run",
    answer=ModelList,
    error=OpenAIError,
)


def openai_routes() -> list[BaseRoute]:
    return [
        ApiRoute("/v1/chat/completions", chat_completions, method="POST", operation=_CHAT_COMPLETIONS),
        ApiRoute("/v1/models", list_models, method="GET", operation=_MODELS),
        # Other OpenAI endpoints (embeddings, responses, ...) get OpenAI's error shape, so the SDK says "not found".
        Route(
            "/v1/{path:path}", _not_found, methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False
        ),
    ]
