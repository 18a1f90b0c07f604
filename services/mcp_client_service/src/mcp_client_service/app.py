"""mcp-client-service's HTTP API: the tool registry over many MCP servers.

``GET /mcp/v1/tools/list-tools``, ``POST /mcp/v1/tools/call-tool``, ``GET /mcp/v1/servers``,
``POST /mcp/v1/servers/reload`` and the tenant API ``/mcp/v1/tenants/{tenant}/servers`` (``tenants.routes``), all
behind the shared secret; ``list-tools`` and ``call-tool`` answer from the catalog of the tenant named by
``X-Tenant-Id`` (the shared servers' tools and the tenant's own), or the shared servers' only without it.
``/healthz`` and ``/readyz`` stay open for probes. ``/mcp`` serves the shared tools as an MCP server (``mcp_face``),
behind the same secret.

The app starts serving at once: servers connect in the background (a stdio server loading a
model may take a minute), and ``/readyz`` answers 200 once every enabled server has had its first
connection attempt (serving or failed, so within the connect and list timeouts) and every server
marked ``"required": true`` is serving. A broken or slow server never makes the replica NotReady:
its tools are absent and its status says why. Being open, ``/readyz`` names only each server's
state; why a server failed is on the protected ``/mcp/v1/servers``.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from mcp_client_service.calls.elicitation import ElicitationBroker
from mcp_client_service.calls.live_calls import CallEnd, CallInProgress, LiveCalls
from mcp_client_service.calls.live_routes import live_call_routes
from mcp_client_service.calls.progress import ProgressRelay
from mcp_client_service.calls.router import (
    ToolNotFoundError,
    ToolRouter,
    ToolServerMismatchError,
    ToolUnavailableError,
)
from mcp_client_service.calls.telemetry import GatewayTelemetry
from mcp_client_service.config.options import Backoff, BreakerPolicy, ConnectionOptions
from mcp_client_service.config.servers_file import ConfigError, ServersFile, load_servers_config
from mcp_client_service.connection.elicitation import Asker
from mcp_client_service.failures import OutboundBlockedError
from mcp_client_service.mcp_face.endpoint import MCP_FACE_PATH, McpFace
from mcp_client_service.mcp_face.features import FeatureRouter
from mcp_client_service.oauth import AuthorizationRequired, OAuthVault, ProviderContext
from mcp_client_service.oauth.consents import ConsentFlow
from mcp_client_service.oauth_api import OAuthServers, oauth_routes
from mcp_client_service.registry.server_registry import ReloadResult, ServerRegistry, ServersResponse
from mcp_client_service.settings import MCPClientSettings
from mcp_client_service.store import SecretsBox, TenantServerStore, open_tenant_store
from mcp_client_service.tenant_oauth import tenant_connections, tenant_oauth_servers, tenant_token_changed
from mcp_client_service.tenants.configs import header_tenant
from mcp_client_service.tenants.routes import tenant_routes
from mcp_client_service.tenants.servers import TenantServers, TenantSettings
from suite_common.auth import SharedSecretMiddleware
from suite_common.deadline import Deadline
from suite_common.errors import ApiError, install_error_handlers
from suite_common.health import health_routes, readiness_operation
from suite_common.http import ModelResponse, cancel_on_disconnect, read_model
from suite_common.logging import get_logger
from suite_common.observability import Observability
from suite_common.openapi import ApiRoute, Operation, SharedSecretScheme, add_openapi
from suite_common.sse import Emit, EventStreamResponse, encode_event
from suite_common.wire import (
    TENANT_HEADER,
    TENANT_NAME_RULE,
    AuthorizationRequiredError,
    CallToolElicitation,
    CallToolProgress,
    CallToolRequest,
    CallToolResponse,
    ErrorDetail,
    ListToolsResponse,
    dump,
)

__all__ = ["connection_options", "create_app"]

_log = get_logger("mcp_client_service.app")

PROTECTED_PREFIX = "/mcp/v1"


@dataclass(frozen=True)
class _Services:
    settings: MCPClientSettings
    registry: ServerRegistry
    router: ToolRouter
    tenants: TenantServers
    tenant_store: TenantServerStore
    """The servers tenants register at runtime (open from start to shutdown)."""
    live_calls: LiveCalls
    """The SSE calls running now, and those waiting for a person's answer or a follower."""
    oauth: ConsentFlow
    """OAuth consents over the vault (which opens with the store)."""


def _services(request: Request) -> _Services:
    services: _Services = request.state.services
    return services


_LIST_TOOLS = Operation(
    "Every tool of every serving MCP server: the shared ones, and with X-Tenant-Id the tenant's own",
    answer=ListToolsResponse,
    errors={400: f"invalid_tenant: X-Tenant-Id is not a tenant's name ({TENANT_NAME_RULE})."},
)
_SERVERS = Operation("Every configured MCP server and its state", answer=ServersResponse)
_RELOAD = Operation(
    "Read the servers file again and apply what changed",
    answer=ReloadResult,
    errors={400: "The servers file is not valid; the running servers stay as they are."},
)
_CALL_TOOL = Operation(
    "Call one tool on the MCP server that serves it",
    body=CallToolRequest,
    answer=CallToolResponse,
    # With ``Accept: text/event-stream``: ``progress`` and ``elicitation`` events, then one ``result`` or ``error``.
    events=CallToolProgress | CallToolElicitation | CallToolResponse | ErrorDetail,
    errors={
        404: "No serving MCP server has a tool of this name (within X-Tenant-Id's catalog, when given: another "
        "tenant's servers are never found; a server switched off or deleted is not either).",
        403: "outbound_ssrf_blocked: the connection to the tool's server was refused by the outbound policy "
        "(its name resolves to a blocked address); the tool was not called.",
        409: "The request's server does not have the tool it names (serverTool, else name) now, or name is not "
        "one of that tool's names (tool_server_mismatch); nothing was called. call_in_progress (SSE): a call with "
        "this callId is running already.",
        400: "The arguments do not match the tool's input schema, or the request is not valid; tenant_mismatch: "
        "caller.tenant differs from X-Tenant-Id (without the header, caller.tenant is not passed on).",
        503: "The tool's server is restarting or its circuit is open, or no session to a tenant's server can be "
        "opened now (tool_unavailable, Retry-After).",
        401: "authorization_required (AuthorizationRequiredError): the tool's server is behind OAuth and no usable "
        "token is held; tokens says whose consent it wants (machine: an admin's, perUser: the call's user's); "
        "authorizationUrl is the gateway's unbound consent, for trusted callers only. Nothing was called.",
    },
    example={"name": "echo", "arguments": {"text": "hello"}},
)


def _tenant(request: Request) -> str | None:
    """The tenant named by ``X-Tenant-Id``; ``None`` without one (the shared servers only)."""
    return header_tenant(request.headers)


async def list_tools(request: Request) -> Response:
    # Served from memory: a catalog is rebuilt when a server comes or goes, not per request.
    catalog = _services(request).tenants.catalog(_tenant(request))
    return Response(catalog.listing_json(), media_type="application/json")


async def list_servers(request: Request) -> Response:
    return ModelResponse(_services(request).registry.statuses())


async def reload_servers(request: Request) -> Response:
    """Read the servers file again: added servers connect, removed ones close, changed ones reconnect."""
    services = _services(request)
    try:
        servers = load_servers_config(services.settings.servers_file)
    except ConfigError as error:
        # The running servers stay as they are; the message names the server and field at fault.
        raise ApiError(400, "invalid_servers_config", f"The servers config was not reloaded: {error}") from None
    try:
        _check_oauth_key(servers, services.settings)
    except ValueError as error:
        raise ApiError(400, "invalid_servers_config", f"The servers config was not reloaded: {error}") from None
    return ModelResponse(await services.registry.reload(servers))


def _check_oauth_key(servers: ServersFile, settings: MCPClientSettings) -> None:
    """``ValueError`` naming the setting when a server has an ``auth`` block and the vault has no key to seal with."""
    oauth = [name for name, config in servers.servers.items() if getattr(config, "auth", None) is not None]
    if oauth and not (settings.secrets_key.get_secret_value().strip() or settings.secrets_key_file):
        raise ValueError(
            f"the servers {', '.join(oauth)} have an auth block (OAuth), and their tokens are kept encrypted: set "
            "MCP_CLIENT_SECRETS_KEY (python -m mcp_client_service.store generate-key makes one)"
        )


def _tool_not_found(error: ToolNotFoundError) -> ApiError:
    return ApiError(404, "tool_not_found", f"{error} GET {PROTECTED_PREFIX}/tools/list-tools lists them.")


def _server_mismatch(error: ToolServerMismatchError) -> ApiError:
    return ApiError(409, "tool_server_mismatch", str(error))


def _refusal(error: ToolNotFoundError | ToolServerMismatchError) -> ApiError:
    """The 4xx of a call that was not made: no such tool, or none such on the server the caller names."""
    return _tool_not_found(error) if isinstance(error, ToolNotFoundError) else _server_mismatch(error)


def _wants_event_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


def _accepts_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def _caller(body: CallToolRequest, tenant: str | None) -> dict[str, Any] | None:
    """``caller`` as the JSON a tool server reads in ``_meta["io.loopsuite/caller"]``, its tenant ``X-Tenant-Id``'s.

    The header is what routes the call, so a tool server must never be told another tenant: a ``caller.tenant``
    that differs from the header is 400 ``tenant_mismatch``, and without the header (the shared scope) the caller's
    tenant claim is dropped (a tool then acts for no tenant, as for a call naming none).
    """
    if body.caller is None:
        return None
    if tenant is not None and body.caller.tenant != tenant:
        raise ApiError(
            400, "tenant_mismatch", f"caller.tenant must be the tenant {TENANT_HEADER} names, or left to the header."
        )
    caller = body.caller.model_dump(by_alias=True, exclude_none=True, mode="json")
    if tenant is None:
        caller.pop("tenant", None)
    return caller


def _outbound_blocked(error: OutboundBlockedError) -> ApiError:
    return ApiError(403, "outbound_ssrf_blocked", error.message)


async def _stream_call(
    router: ToolRouter,
    body: CallToolRequest,
    tenant: str | None,
    caller: dict[str, Any] | None,
    deadline: Deadline,
    send: Emit,
    elicit: Asker,
) -> CallEnd:
    """``call-tool`` as SSE (a ``LiveCall``'s work): the server's progress as ``progress`` events, its questions
    through ``elicit`` (``elicitation`` events), and the last word: one ``result`` or ``error``, with the status
    and headers the plain JSON call-tool answers it with (for a call that sent no event before it)."""

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        event = CallToolProgress(progress=progress, total=total, message=message)
        await send(encode_event(dump(event), event="progress"))

    relay = ProgressRelay(forward)
    try:
        response = await router.call(
            body.name,
            body.arguments,
            deadline=deadline,
            raise_unavailable=True,
            on_progress=relay,
            server=body.server,
            server_tool=body.server_tool,
            tenant=tenant,
            caller=caller,
            elicit=elicit,
        )
    except ToolUnavailableError as unavailable:
        await relay.close()
        retry_after = {"Retry-After": str(_retry_after_seconds(unavailable))}
        return CallEnd("error", json.dumps(_unavailable_body(unavailable)), 503, retry_after)
    except AuthorizationRequired as required:
        await relay.close()
        return CallEnd("error", dump(_authorization_required(required)), 401)
    except (ToolNotFoundError, ToolServerMismatchError, OutboundBlockedError, ApiError) as raised:
        if isinstance(raised, OutboundBlockedError):
            error = _outbound_blocked(raised)
        else:
            error = raised if isinstance(raised, ApiError) else _refusal(raised)
        await relay.close()
        refusal = json.dumps({"code": error.code, "message": error.message})
        return CallEnd("error", refusal, error.status, error.headers)
    await relay.close()
    return CallEnd("result", dump(response))


async def call_tool_route(request: Request) -> Response | EventStreamResponse:
    services = _services(request)
    tenant = _tenant(request)
    body = await read_model(request, CallToolRequest)
    caller = _caller(body, tenant)
    deadline = Deadline.from_header(request.headers, cap=math.inf)
    if _wants_event_stream(request):
        # The call runs apart from this request (``LiveCall``): with a callId it may outlive it, waiting for a person.
        # A caller that also accepts JSON (agent-service does) gets a call that ends before any event as plain JSON,
        # the stream starting with its first event otherwise; one that asked for the event stream alone always gets it.
        work = functools.partial(_stream_call, services.router, body, tenant, caller, deadline)
        try:
            follower = services.live_calls.start(tenant, body.call_id, work)
        except CallInProgress:
            raise ApiError(409, "call_in_progress", "A call with this callId is running already.") from None
        if _accepts_json(request):
            return EventStreamResponse(follower.relay_or_answer, defer_start=True)
        return EventStreamResponse(follower.relay)
    # A caller that goes away (agent-service cancelling a run, a deadline) cancels the call: the
    # SDK then sends the server `notifications/cancelled` (or, over streamable HTTP at protocol
    # 2026, aborts the request's POST), so the tool stops instead of running to the call timeout.
    try:
        answered, response = await cancel_on_disconnect(
            request,
            services.router.call(
                body.name,
                body.arguments,
                deadline=deadline,
                raise_unavailable=True,
                server=body.server,
                server_tool=body.server_tool,
                tenant=tenant,
                caller=caller,
            ),
        )
    except (ToolNotFoundError, ToolServerMismatchError) as error:
        raise _refusal(error) from None
    except OutboundBlockedError as blocked:
        raise _outbound_blocked(blocked) from None
    except ToolUnavailableError as error:
        return JSONResponse(
            {"error": _unavailable_body(error)},
            status_code=503,
            headers={"Retry-After": str(_retry_after_seconds(error))},
        )
    except AuthorizationRequired as required:
        return JSONResponse({"error": json.loads(dump(_authorization_required(required)))}, status_code=401)
    if not answered or response is None:
        _log.info("mcp_tool_call_abandoned", tool=body.name, reason="the caller disconnected")
        return Response(status_code=499)  # nobody reads this
    return ModelResponse(response)


def _authorization_required(required: AuthorizationRequired) -> AuthorizationRequiredError:
    # A machine principal (no user) is the tenant's or the deployment's: its admin consents, never a caller's user.
    per_user = bool(required.principal.user)
    who = "the call's user" if per_user else "an administrator of the tenant (or an operator)"
    return AuthorizationRequiredError(
        message=f'The MCP server "{required.server}" needs an authorization: {who} consents, then the call can be '
        "made again. Nothing was called.",
        server=required.server,
        tokens="perUser" if per_user else "machine",
        authorization_url=required.authorization_url,
    )


_RETRY_UNKNOWN_SECONDS = 1
"""``Retry-After`` for a tool whose server is reconnecting right now: soon, but not at once."""


def _retry_after_seconds(error: ToolUnavailableError) -> int:
    retry_after = error.retry_after
    return _RETRY_UNKNOWN_SECONDS if retry_after is None else max(1, math.ceil(retry_after))


def _unavailable_body(error: ToolUnavailableError) -> dict[str, Any]:
    """``tool_unavailable``: the tool exists, its server cannot take calls for a while (503 in JSON,
    an ``error`` event over SSE)."""
    return {"code": "tool_unavailable", "message": error.message, "retryAfterSeconds": _retry_after_seconds(error)}


def connection_options(settings: MCPClientSettings, environ: Mapping[str, str]) -> ConnectionOptions:
    """How the servers file's servers are connected and supervised, from the settings and the gateway's environment.

    ``.for_tenant_servers()`` of the answer is the same for tenants' servers, under the plain outbound policy.
    """
    return ConnectionOptions(
        connect_timeout=settings.connect_timeout_seconds,
        list_timeout=settings.list_timeout_seconds,
        probe_interval=settings.health_check_interval_seconds,
        catalog_ttl=settings.catalog_cache_seconds,
        call_timeout=settings.call_timeout_seconds,
        backoff=Backoff(initial=settings.restart_backoff_initial_seconds, maximum=settings.restart_backoff_max_seconds),
        breaker=BreakerPolicy(
            failure_threshold=settings.breaker_failure_threshold,
            window_seconds=settings.breaker_window_seconds,
            open_seconds=settings.breaker_open_seconds,
        ),
        list_changed_debounce=settings.list_changed_debounce_seconds,
        max_tools=settings.max_tools_per_server,
        inherit_env=tuple(settings.stdio_inherit_env),
        max_line_bytes=settings.stdio_max_line_bytes,
        # The servers file is the operator's: its servers' own host names are trusted (compose and cluster
        # service names resolve to private addresses); tenant servers use for_tenant_servers().
        egress=settings.egress_policy(),
        trust_url_hosts=True,
        resolver=settings.egress_resolver(),
        http_max_connections=settings.http_max_connections,
        max_response_bytes=settings.http_max_response_bytes,
        environ=environ,
        forbidden_values=(settings.service_secret.get_secret_value(),),
    )


def create_app(
    settings: MCPClientSettings,
    *,
    servers: ServersFile | None = None,
    environ: Mapping[str, str] | None = None,
    tracer_provider: TracerProvider | None = None,
) -> Starlette:
    """The service, ready to serve. ``servers`` overrides the config file (``settings.servers_file``)
    at startup; ``environ`` (default ``os.environ``) is what stdio servers inherit from and what
    ``${env:...}`` references read.

    Raises ``ValueError`` without a secret or with a secrets key that is not one, and
    ``config.servers_file.ConfigError`` for a bad servers file, so a misconfigured service stops before it listens.
    The tenant server store opens (and migrates) at startup: a store it cannot open stops it there.
    """
    secret = settings.service_secret.get_secret_value()
    if not secret.strip():
        raise ValueError("MCP_CLIENT_SERVICE_SECRET must be set to a non-empty shared secret")
    if servers is None:
        servers = load_servers_config(settings.servers_file)
    options = connection_options(settings, os.environ if environ is None else environ)
    secrets = SecretsBox.configured(settings.secrets_key, settings.secrets_key_file)
    _check_oauth_key(servers, settings)
    opened_vault: list[OAuthVault] = []  # the vault opens with the store (lifespan)

    def vault() -> OAuthVault:
        if not opened_vault:
            raise ApiError(409, "oauth_not_configured", "OAuth needs MCP_CLIENT_SECRETS_KEY (the vault's key).")
        return opened_vault[0]

    oauth_context = ProviderContext(
        vault,
        redirect_url=settings.oauth_redirect_url,
        client_name=settings.oauth_client_name,
        client_metadata_url=settings.oauth_client_metadata_url,
        step_up_limit=settings.oauth_step_up_limit,
    )
    registry = ServerRegistry(servers, options, collision=settings.tool_name_collision, oauth=oauth_context)
    oauth_servers = OAuthServers(registry)
    consents = ConsentFlow(oauth_context, oauth_servers.client)
    consents.listen(registry.oauth_token_changed)
    tenants = TenantServers(
        None,  # its store opens with the app (lifespan)
        registry,
        # Tenants' servers: the plain outbound policy, nothing of the gateway's environment or files.
        options.for_tenant_servers(),
        collision=settings.tool_name_collision,
        settings=TenantSettings(
            sync_seconds=settings.tenant_sync_seconds,
            idle_seconds=settings.tenant_idle_seconds,
            max_sessions=settings.tenant_max_sessions,
            max_sessions_per_tenant=settings.tenant_max_sessions_per_tenant,
        ),
        make_connection=tenant_connections(oauth_context, options.for_tenant_servers()),
    )
    oauth_servers.extra.append(tenant_oauth_servers(tenants))
    consents.listen(tenant_token_changed(tenants))
    registry.retired_hooks.append(tenants.close_user_sessions)  # a per-user server's sessions end with its settings
    observability = Observability.create("mcp-client-service", settings, tracer_provider=tracer_provider)
    telemetry = GatewayTelemetry(observability.registry, registry, tenants)
    router = ToolRouter(
        registry,
        call_timeout=settings.call_timeout_seconds,
        max_chars=settings.max_result_chars,
        on_call=telemetry.call,
        tracer=observability.tracer,
        tenants=tenants,
    )
    # Every tool through one MCP endpoint too, for any MCP client; it checks the secret itself.
    features = FeatureRouter(
        registry,
        collision=settings.tool_name_collision,
        list_timeout=settings.list_timeout_seconds,
        time_limit=router.time_limit,
    )
    face = McpFace(router, secret=secret, secret_header=settings.secret_header, features=features)
    live_calls = LiveCalls(
        ElicitationBroker(settings.elicitation_timeout_seconds), result_seconds=settings.detached_result_seconds
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, _Services]]:
        _log.info(
            "mcp_client_starting",
            servers=list(registry.connections),
            disabled=list(registry.disabled),
        )
        tenant_store = await open_tenant_store(
            settings.database_url, secrets=secrets, migrate=settings.database_migrate
        )
        _log.info("mcp_client_store_opened", backend=tenant_store.backend, secrets_keys=secrets is not None)
        if secrets is not None:
            opened_vault.append(
                OAuthVault(tenant_store.database, secrets, consent_seconds=settings.oauth_consent_seconds)
            )
        try:
            # Every tenant's servers are known before the first request; their sessions open on first use.
            await tenants.load(tenant_store)
            # Supervisors connect in the background: the API is up before any server is.
            async with face.run(), live_calls.running(), anyio.create_task_group() as tg:
                tg.start_soon(registry.run, name="mcp-server-registry")
                await tg.start(tenants.run)
                try:
                    yield {
                        "services": _Services(
                            settings=settings,
                            registry=registry,
                            router=router,
                            tenants=tenants,
                            tenant_store=tenant_store,
                            live_calls=live_calls,
                            oauth=consents,
                        )
                    }
                finally:
                    # Closes every session; stdio children get their stdin closed, then SIGTERM/SIGKILL.
                    tg.cancel_scope.cancel()
                    await observability.aclose()
        finally:
            opened_vault.clear()
            await tenant_store.close()

    async def readyz(_: Request) -> Response:
        if observability.lifecycle.draining:
            return JSONResponse({"status": "shutting_down", "checks": {}}, status_code=503)
        readiness = registry.readiness()
        body = {
            "status": "ready" if readiness.ready else "not_ready",
            "checks": readiness.checks,
            "waitingFor": readiness.waiting_for,
        }
        return JSONResponse(body, status_code=200 if readiness.ready else 503)

    routes: list[BaseRoute] = [
        # /healthz as every service serves it; /readyz is the gateway's own (see the module's docstring).
        *(route for route in health_routes(None, observability.lifecycle) if route.path == "/healthz"),
        ApiRoute("/readyz", readyz, method="GET", operation=readiness_operation()),
        *observability.routes(),
        ApiRoute(f"{PROTECTED_PREFIX}/tools/list-tools", list_tools, method="GET", operation=_LIST_TOOLS),
        ApiRoute(f"{PROTECTED_PREFIX}/tools/call-tool", call_tool_route, method="POST", operation=_CALL_TOOL),
        ApiRoute(f"{PROTECTED_PREFIX}/servers", list_servers, method="GET", operation=_SERVERS),
        ApiRoute(f"{PROTECTED_PREFIX}/servers/reload", reload_servers, method="POST", operation=_RELOAD),
        *tenant_routes(PROTECTED_PREFIX, tenants),
        *live_call_routes(PROTECTED_PREFIX, live_calls),
        *oauth_routes(PROTECTED_PREFIX, lambda: consents, oauth_servers),
        Route(MCP_FACE_PATH, face),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(
                SharedSecretMiddleware,
                header=settings.secret_header,
                secret=secret,
                protected_prefixes=[PROTECTED_PREFIX],
            )
        ],
        lifespan=lifespan,
    )
    install_error_handlers(app)
    observability.install(app)
    add_openapi(app, title="mcp-client-service", security=SharedSecretScheme(settings.secret_header, PROTECTED_PREFIX))
    app.state.registry = registry  # for embedding and tests: wait on server states without polling
    app.state.tenants = tenants
    app.state.oauth = consents  # for embedding and tests (per-user sessions build on it)
    app.state.oauth_servers = oauth_servers  # .extra: how a tenant's OAuth server is found
    return app
