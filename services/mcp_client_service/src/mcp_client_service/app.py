"""mcp-client-service's HTTP API: the tool registry over many MCP servers.

``GET /mcp/v1/tools/list-tools``, ``POST /mcp/v1/tools/call-tool`` and ``GET /mcp/v1/servers``,
all behind the shared secret; ``/healthz`` and ``/readyz`` stay open for probes.

The app starts serving at once: servers connect in the background (a stdio server loading a
model may take a minute), and ``/readyz`` answers 200 once every enabled server is ready. Being
open, ``/readyz`` names only each server's state; why a server failed is on the protected
``/mcp/v1/servers``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcp_client_service.calls import call_tool
from mcp_client_service.config import ServersFile, load_servers_config
from mcp_client_service.connections import Backoff
from mcp_client_service.registry import ServerRegistry
from mcp_client_service.settings import MCPClientSettings
from suite_common.auth import SharedSecretMiddleware
from suite_common.deadline import time_budget
from suite_common.errors import ApiError, install_error_handlers
from suite_common.health import health_routes
from suite_common.http import ModelResponse, cancel_on_disconnect, read_model
from suite_common.logging import get_logger
from suite_common.wire import CallToolRequest

__all__ = ["create_app"]

_log = get_logger("mcp_client_service.app")

PROTECTED_PREFIX = "/mcp/v1"


@dataclass(frozen=True)
class _Services:
    settings: MCPClientSettings
    registry: ServerRegistry


def _services(request: Request) -> _Services:
    services: _Services = request.state.services
    return services


async def list_tools(request: Request) -> Response:
    # Served from memory: the catalog is rebuilt when a server comes or goes, not per request.
    return Response(_services(request).registry.catalog.listing_json(), media_type="application/json")


async def list_servers(request: Request) -> Response:
    return ModelResponse(_services(request).registry.statuses())


async def call_tool_route(request: Request) -> Response:
    services = _services(request)
    body = await read_model(request, CallToolRequest)
    timeout = time_budget(request.headers, services.settings.call_timeout_seconds)
    registry = services.registry
    tool = registry.catalog.find(body.name)
    # A tool of a server that is away (reconnecting) is not listed, but calling it gets an error
    # result saying why, rather than a 404 as if it never existed.
    server = tool.server if tool is not None else registry.catalog.server_away_with(body.name)
    if server is None:
        raise ApiError(
            404,
            "tool_not_found",
            f'No MCP server offers a tool named "{body.name}"; GET {PROTECTED_PREFIX}/tools/list-tools lists them.',
        )
    connection = registry.connections[server]
    # A caller that goes away (agent-service cancelling a run, a deadline) cancels the call: the
    # SDK then sends the server `notifications/cancelled` (or, over streamable HTTP at protocol
    # 2026, aborts the request's POST), so the tool stops instead of running to the call timeout.
    answered, response = await cancel_on_disconnect(
        request,
        call_tool(
            connection, body.name, body.arguments, time_limit=timeout, max_chars=services.settings.max_result_chars
        ),
    )
    if not answered or response is None:
        _log.info("mcp_tool_call_abandoned", tool=body.name, server=server, reason="the caller disconnected")
        return Response(status_code=499)  # nobody reads this
    return ModelResponse(response)


def create_app(
    settings: MCPClientSettings, *, servers: ServersFile | None = None, backoff: Backoff | None = None
) -> Starlette:
    """The service, ready to serve. ``servers`` overrides the config file (``settings.servers_config``).

    Raises ``ValueError`` without a secret and ``config.ConfigError`` for a bad servers file, so a
    misconfigured service stops before it listens.
    """
    secret = settings.service_secret.get_secret_value()
    if not secret.strip():
        raise ValueError("MCP_CLIENT_SERVICE_SECRET must be set to a non-empty shared secret")
    if servers is None:
        servers = load_servers_config(settings.servers_config)
    registry = ServerRegistry(
        servers,
        connect_timeout=settings.connect_timeout_seconds,
        list_timeout=settings.list_timeout_seconds,
        probe_interval=settings.health_check_interval_seconds,
        backoff=backoff,
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[dict[str, _Services]]:
        _log.info(
            "mcp_client_starting",
            servers=list(registry.connections),
            disabled=list(registry.disabled),
        )
        # Supervisors connect in the background: the API is up before any server is.
        async with anyio.create_task_group() as tg:
            tg.start_soon(registry.run, name="mcp-server-registry")
            try:
                yield {"services": _Services(settings=settings, registry=registry)}
            finally:
                # Closes every session; stdio children get their stdin closed, then SIGTERM/SIGKILL.
                tg.cancel_scope.cancel()

    async def readiness(_: Request) -> dict[str, str]:
        return registry.readiness()

    app = Starlette(
        routes=[
            *health_routes(readiness),
            Route(f"{PROTECTED_PREFIX}/tools/list-tools", list_tools, methods=["GET"]),
            Route(f"{PROTECTED_PREFIX}/tools/call-tool", call_tool_route, methods=["POST"]),
            Route(f"{PROTECTED_PREFIX}/servers", list_servers, methods=["GET"]),
        ],
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
    app.state.registry = registry  # for embedding and tests: wait on server states without polling
    return app
