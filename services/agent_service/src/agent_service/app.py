"""agent-service's composition root: ``create_app`` builds the service from its settings (peers, store, Redis,
loop, admission, runs) and mounts every HTTP face of ``agent_service.api``; ``/readyz`` asks its peers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import httpx
from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette
from starlette.requests import Request

from agent_service.access.callers_file import Callers, load_callers
from agent_service.access.stored_keys import StoredKeys
from agent_service.admission.budgets import open_budgets
from agent_service.admission.pending import PendingWrites
from agent_service.admission.planning import ModelCheck, ToolCatalog
from agent_service.admission.rule_servers import check_rule_servers
from agent_service.admission.run_slots import open_run_slots
from agent_service.admission.tenant_runtime import TenantRuntimes
from agent_service.api.admin import admin_routes
from agent_service.api.admin_oauth import admin_oauth_routes
from agent_service.api.approvals import approvals_routes
from agent_service.api.audit import audit_routes
from agent_service.api.auth import CALLER_ERRORS, PROTECTED_PREFIXES, PUBLIC_PATHS, CallerMiddleware
from agent_service.api.connections import connections_routes
from agent_service.api.console import console_routes
from agent_service.api.images import images_routes
from agent_service.api.inputs import inputs_routes
from agent_service.api.openai_front import openai_routes
from agent_service.api.run import run_routes
from agent_service.api.runs import runs_routes
from agent_service.api.services import Services, services_of
from agent_service.api.suggestions import load_suggestions
from agent_service.api.usage import usage_routes
from agent_service.core.tenancy import NO_RULES
from agent_service.engine.loop import AgentLoop
from agent_service.engine.tool_cache import open_tool_cache
from agent_service.infra.gateway_oauth import GatewayOAuth
from agent_service.infra.peers import CompletionClient, ToolsClient
from agent_service.infra.shared_redis import connect_redis
from agent_service.infra.telemetry import RunTelemetry
from agent_service.runs import AgentRuns
from agent_service.settings import AgentSettings
from agent_service.store import RunStore, StoreError
from suite_common.errors import install_error_handlers
from suite_common.health import health_routes
from suite_common.logging import get_logger
from suite_common.observability import Observability
from suite_common.openapi import BearerScheme, add_openapi
from suite_common.peer_client import HttptoolsPeerClient, HttpxPeerClient, PeerClient

__all__ = ["create_app"]

_log = get_logger("agent_service.app")


async def _readiness(request: Request) -> dict[str, str]:
    """completion-service ready, and mcp-client-service accepting our secret."""
    services = services_of(request)
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


_UNCAPPED_POOL_SIZE = 16
"""The run store's pool for writes at least, when a tenant's runs are not capped: the default cap's."""
_MOST_POOL_SIZE = 64
"""The run store's pool for writes at most unless ``AGENT_DATABASE_POOL_SIZE`` says otherwise: a tenant's large cap
must not keep that many connections open on every replica."""


def store_pool_size(settings: AgentSettings, callers: Callers | None) -> int:
    """The run store's connections for runs' writes (``AGENT_DATABASE_POOL_SIZE``; 0: as many as one tenant may have
    runs in progress at once, so that a tenant at its cap never waits for one nor opens one per burst; at least
    ``_UNCAPPED_POOL_SIZE`` when some tenant is uncapped, at most ``_MOST_POOL_SIZE``)."""
    if settings.database_pool_size:
        return settings.database_pool_size
    default = settings.max_concurrent_runs_per_tenant
    # Each tenant's own cap, else the default (so are the tenants the file does not list: ``unlisted``); 0: none.
    tenants = (*callers.rules.values(), callers.unlisted) if callers is not None else (NO_RULES,)
    caps = [default if rules.max_concurrent_runs is None else rules.max_concurrent_runs for rules in tenants]
    least = _UNCAPPED_POOL_SIZE if 0 in caps else 1
    return min(max(*caps, least), _MOST_POOL_SIZE)


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
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, Services]]:
        # One pooled client for every run, straight on asyncio (see suite_common.peer_client: httpx, then
        # aiohttp, cost about 30% of the service's CPU). No read timeout here: each call is bounded by its run's
        # deadline instead, which a slow LLM or tool cannot push back. Idle connections are dropped
        # before the peers' uvicorn closes them (5 s), so a request never goes out on one it is closing.
        async with AsyncExitStack() as stack:
            http: PeerClient
            if http_client is None:
                http = HttptoolsPeerClient(
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
                store = await RunStore.open(
                    settings.database_url,
                    migrate=settings.database_migrate,
                    pool_size=store_pool_size(settings, callers),
                )
                stack.push_async_callback(store.aclose)
                if stored_keys is not None:
                    stored_keys.attach(store.caller_keys)
            # The writes to the shared Redis sent off the answers' paths (slots given back, calls' usage added,
            # tool results stored): one set, drained at shutdown (``AgentRuns.running``).
            pending = PendingWrites()
            redis = None
            if settings.redis_url:
                redis = connect_redis(settings.redis_url)
                stack.push_async_callback(redis.aclose)
            loop = AgentLoop(
                completions,
                tools,
                tool_result_max_chars=settings.tool_result_max_chars,
                telemetry=telemetry,
                tool_cache=open_tool_cache(settings, redis, telemetry, start_write=pending.start),
                images=store,
                images_max_bytes=settings.run_images_max_bytes,
            )
            slots = open_run_slots(
                redis,
                settings.lease_seconds,
                key_prefix=settings.redis_key_prefix,
                # Counted when some tenant has a cap of its own, even with no cap for the others.
                cap=settings.max_concurrent_runs_per_tenant or int(callers is not None and callers.any_run_cap()),
            )
            budgets = open_budgets(
                redis,
                rules=callers.rules if callers is not None else {},
                source=store.usage_since if store is not None else None,
                key_prefix=settings.redis_key_prefix,
                max_users=settings.max_users_per_tenant_month,
                pending=pending,
            )
            runs = AgentRuns(loop, store, settings, observability.lifecycle, slots, budgets)
            await stack.enter_async_context(runs.running())
            services = Services(
                settings,
                http,
                loop,
                catalog,
                models,
                observability.lifecycle,
                runs,
                TenantRuntimes(store, settings),
                rules_of=callers.rules_of if callers is not None else lambda _: NO_RULES,
                oauth=GatewayOAuth(tools),
                open_api=callers is None and stored_keys is None,
            )
            yield {"services": services}

    app = Starlette(
        routes=[
            *run_routes(),
            *runs_routes(),
            *approvals_routes(),
            *inputs_routes(),
            *images_routes(),
            *usage_routes(),
            *audit_routes(),
            *admin_routes(),
            *admin_oauth_routes(),
            *connections_routes(),
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
    add_openapi(app, title="agent-service", security=BearerScheme(PROTECTED_PREFIXES, CALLER_ERRORS, PUBLIC_PATHS))
    return app
