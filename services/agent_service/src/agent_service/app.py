"""agent-service's HTTP API: ``POST /api/v1/agent/run``, streamed as SSE or answered as JSON."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import anyio
import httpx
from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from agent_service.callers import (
    CALLER_ERRORS,
    PROTECTED_PREFIXES,
    CallerMiddleware,
    Callers,
    caller_of,
    load_callers,
)
from agent_service.clients import CompletionClient, ToolsClient
from agent_service.console_api import console_routes
from agent_service.loop import AgentLoop, RunOutcome
from agent_service.openai_front import openai_routes
from agent_service.planning import ModelCheck, ToolCatalog, plan_run
from agent_service.rule_servers import check_rule_servers
from agent_service.run_slots import open_run_slots
from agent_service.runs import AgentRuns, LiveSink, StartedRun
from agent_service.runs_api import event_sender, runs_routes
from agent_service.settings import AgentSettings
from agent_service.shared_redis import connect_redis
from agent_service.spending import open_spending
from agent_service.store import RunStore, StoredEvent, StoreError
from agent_service.stored_keys import StoredKeys
from agent_service.suggestions import load_suggestions
from agent_service.telemetry import RunTelemetry
from agent_service.tool_cache import open_tool_cache
from agent_service.usage_api import usage_routes
from suite_common.errors import ApiError, install_error_handlers
from suite_common.health import health_routes
from suite_common.http import ModelResponse, read_model, run_for_client
from suite_common.lifecycle import Lifecycle, until_interrupted
from suite_common.logging import get_logger
from suite_common.observability import Observability
from suite_common.openapi import ApiRoute, BearerScheme, Operation, add_openapi
from suite_common.peer_client import AiohttpPeerClient, HttpxPeerClient, PeerClient
from suite_common.sse import Emit as SendChunk
from suite_common.sse import EventStreamResponse
from suite_common.wire import (
    AgentRunFailure,
    AgentRunRequest,
    AgentRunResult,
    Message,
    RunError,
    RunErrorDetail,
    RunEvent,
)

__all__ = ["create_app"]

_log = get_logger("agent_service.app")


@dataclass(frozen=True)
class _Services:
    settings: AgentSettings
    http: PeerClient
    loop: AgentLoop
    catalog: ToolCatalog
    models: ModelCheck
    lifecycle: Lifecycle
    runs: AgentRuns


def _services(request: Request) -> _Services:
    services: _Services = request.state.services
    return services


_SHUTTING_DOWN = "The service is shutting down; the run was stopped. Start it again: another instance will take it."
_HANDED_OVER = (
    "The service is shutting down; another instance takes this run over from its last stored step: "
    "follow it at GET /api/v1/agent/runs/{run_id}/events."
)


def _live_sender(send: SendChunk) -> LiveSink:
    to_stream = event_sender(send)

    async def send_event(_: RunEvent, event: StoredEvent) -> None:
        await to_stream(event)

    return send_event


async def _stream_run(run: StartedRun, runs: AgentRuns, lifecycle: Lifecycle, send: SendChunk) -> None:
    journal = run.journal
    journal.send = _live_sender(send)
    run_id = run.plan.run_id
    try:
        finished, _ = await until_interrupted(lifecycle, runs.execute(run, stream_text=True))
    except Exception as error:  # a bug, not an upstream failure: still end the stream with an event
        _log.error("run_crashed", run_id=run_id, exc_info=error)
        await journal.tell(RunError(run_id=run_id, code="internal_error", message="The run failed unexpectedly."))
        return
    if not finished:
        # Not a silent cut: the caller learns why the stream ends, and where the run goes on. Told to this client
        # only: the run's own events go on where it is taken over.
        _log.warning("run_interrupted_by_shutdown", run_id=run_id)
        message = _HANDED_OVER.format(run_id=run_id) if journal.store is not None else _SHUTTING_DOWN
        notice = RunError(run_id=run_id, code="shutting_down", message=message)
        await journal.tell(notice)


async def _follow_detached(run: StartedRun, runs: AgentRuns, send: SendChunk) -> None:
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
    )
    return ModelResponse(result, headers=headers)


async def run_agent(request: Request) -> Response | EventStreamResponse:
    services = _services(request)
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
        return _answer(run, run.outcome)
    if body.stream:
        return EventStreamResponse(lambda send: _stream_run(run, runs, lifecycle, send), headers=headers)
    outcome = await run_for_client(request, runs.execute(run, stream_text=False), lifecycle=lifecycle)
    if outcome.client_gone:
        return Response(status_code=499)  # the client has gone; nobody reads this
    if not outcome.finished or outcome.result is None:
        message = _HANDED_OVER.format(run_id=plan.run_id) if run.journal.store is not None else _SHUTTING_DOWN
        raise ApiError(503, "shutting_down", message, headers={"Retry-After": "1", **headers})
    return _answer(run, outcome.result)


_RUN = Operation(
    "Run the agent loop: LLM calls and tool calls until a final answer",
    body=AgentRunRequest,
    answer=AgentRunResult,
    events=RunEvent,
    errors={
        400: (
            "The body is not valid JSON, or not a valid request (the message names the field); or it names a persona "
            "the caller's tenant does not have (unknown_persona, listing those it has)."
        ),
        403: "The tenant may not run this model (model_not_allowed) or use a tool the run names (tool_not_allowed); "
        "or the run is under a cost limit and the model, or one of its fallbacks, has no price (model_not_priced).",
        409: "The conversation (conversationId) has a run in progress (conversation_busy), or as many runs as it may "
        "have (conversation_full).",
        413: "The body is larger than the service accepts; or the run's messages would take its conversation past the "
        "size it may have (conversation_too_large).",
        429: "The tenant has its cap of runs in progress (too_many_runs), or the tenant or end user has used up a "
        "monthly budget (budget_exhausted), or the end user is new past the tenant's bound of end users a month "
        "(too_many_users); Retry-After says when to try again.",
        503: "The service is shutting down, or the run store or the run limits (Redis) are unavailable (Retry-After).",
    },
    example={"model": "demo", "messages": [{"role": "user", "content": "What time is it?"}], "stream": False},
)


async def _readiness(request: Request) -> dict[str, str]:
    """completion-service ready, and mcp-client-service accepting our secret."""
    services = _services(request)
    settings = services.settings
    probes = {
        "completion-service": (settings.completion_url + "/readyz", {}),
        "mcp-client-service": (
            settings.mcp_client_url + "/mcp/v1/tools/list-tools",
            {settings.mcp_secret_header: settings.mcp_service_secret.get_secret_value()},
        ),
    }
    checks = {}
    if services.runs.store is not None:
        try:
            await services.runs.store.ping()
            checks["run-store"] = "ok"
        except StoreError as error:
            # /readyz is open to probes: it says "unavailable", the log says why (an address, the driver's words).
            _log.warning("run_store_not_ready", error=str(error))
            checks["run-store"] = "unavailable"
    for name, (url, headers) in probes.items():
        try:
            response = await services.http.request("GET", url, headers=headers, time_limit=2.0)
        except httpx.HTTPError as error:
            checks[name] = f"unreachable ({type(error).__name__})"
            continue
        if response.status == 401:
            checks[name] = "rejects AGENT_MCP_SERVICE_SECRET"
        else:
            checks[name] = "ok" if response.status == 200 else f"HTTP {response.status}"
    return checks


def _callers(settings: AgentSettings) -> Callers | None:
    """The callers file (a bad one refuses the start, in one line), or None; no file nor store keys: an open API,
    said in the log."""
    if settings.caller_keys_in_store:
        _log.info("caller_keys_in_store", cache_seconds=settings.caller_keys_cache_seconds)
    if settings.callers_file is None:
        if not settings.caller_keys_in_store:
            _log.warning(
                "api_open",
                detail="neither AGENT_CALLERS_FILE nor AGENT_CALLER_KEYS_IN_STORE is set: every request is served "
                "as the caller anonymous of tenant default",
            )
        return None
    # With keys in the store, the file may only give the tenants their rules.
    callers = load_callers(settings.callers_file, keys_required=not settings.caller_keys_in_store)
    _log.info("callers_loaded", keys=[key.name for key in callers.keys], tenants=sorted(callers.tenants))
    return callers


def create_app(
    settings: AgentSettings,
    *,
    http_client: httpx.AsyncClient | None = None,
    tracer_provider: TracerProvider | None = None,
) -> Starlette:
    """The service; ``http_client`` replaces its pooled client (a test's ``MockTransport``, a proxy), and
    ``tracer_provider`` the one its settings describe."""
    secret = settings.mcp_service_secret.get_secret_value()
    if not secret:
        raise ValueError("AGENT_MCP_SERVICE_SECRET is required: the shared secret of mcp-client-service")
    callers = _callers(settings)
    suggestions = load_suggestions(settings.console_suggestions_file)
    stored_keys = (
        StoredKeys(cache_seconds=settings.caller_keys_cache_seconds) if settings.caller_keys_in_store else None
    )
    observability = Observability.create("agent-service", settings, tracer_provider=tracer_provider)
    telemetry = RunTelemetry(observability.registry, observability.tracer)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, _Services]]:
        # One pooled client for every run, straight on aiohttp (see suite_common.peer_client: httpx
        # cost about 30% of the service's CPU). No read timeout here: each call is bounded by its run's
        # deadline instead, which a slow LLM or tool cannot push back. Idle connections are dropped
        # before the peers' uvicorn closes them (5 s), so a request never goes out on one it is closing.
        async with AsyncExitStack() as stack:
            http: PeerClient
            if http_client is None:
                http = AiohttpPeerClient(
                    connect_timeout=settings.connect_timeout_seconds, max_connections=1000, keepalive_seconds=4.0
                )
                stack.push_async_callback(http.aclose)
            else:  # an injected client belongs to whoever injected it
                http = HttpxPeerClient(http_client)
            tools = ToolsClient(http, settings.mcp_client_url, secret=secret, secret_header=settings.mcp_secret_header)
            completions = CompletionClient(http, settings.completion_url)
            if callers is not None:  # a rule naming a server the gateway lacks is logged, once it answers
                checks = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(checks.cancel_scope.cancel)
                checks.start_soon(check_rule_servers, callers.rules, tools)
            catalog = ToolCatalog(tools, settings.catalog_cache_seconds)
            models = ModelCheck(completions, settings.catalog_cache_seconds)
            stack.push_async_callback(observability.aclose)
            store = None
            if settings.database_url:
                store = await RunStore.open(settings.database_url, migrate=settings.database_migrate)
                stack.push_async_callback(store.aclose)
                if stored_keys is not None:
                    stored_keys.attach(store.caller_keys)
            redis = None
            if settings.redis_url:
                redis = connect_redis(settings.redis_url)
                stack.push_async_callback(redis.aclose)
            loop = AgentLoop(
                completions,
                tools,
                tool_result_max_chars=settings.tool_result_max_chars,
                telemetry=telemetry,
                tool_cache=open_tool_cache(settings, redis, telemetry),
            )
            slots = open_run_slots(
                redis,
                settings.lease_seconds,
                key_prefix=settings.redis_key_prefix,
                # Counted when some tenant has a cap of its own, even with no cap for the others.
                cap=settings.max_concurrent_runs_per_tenant or int(callers is not None and callers.any_run_cap()),
            )
            spending = open_spending(
                redis,
                rules=callers.rules if callers is not None else {},
                source=store.usage_since if store is not None else None,
                key_prefix=settings.redis_key_prefix,
                max_users=settings.max_users_per_tenant_month,
            )
            runs = AgentRuns(loop, store, settings, observability.lifecycle, slots, spending)
            await stack.enter_async_context(runs.running())
            yield {"services": _Services(settings, http, loop, catalog, models, observability.lifecycle, runs)}

    app = Starlette(
        routes=[
            ApiRoute("/api/v1/agent/run", run_agent, method="POST", operation=_RUN),
            *runs_routes(),
            *usage_routes(),
            *console_routes(suggestions),
            *openai_routes(),
            *health_routes(_readiness, observability.lifecycle),
            *observability.routes(),
        ],
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.add_middleware(CallerMiddleware, callers=callers, stored=stored_keys)
    observability.install(app)
    add_openapi(app, title="agent-service", security=BearerScheme(PROTECTED_PREFIXES, CALLER_ERRORS))
    return app
