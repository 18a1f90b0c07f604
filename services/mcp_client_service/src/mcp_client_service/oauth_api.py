"""The OAuth API, behind the shared secret: ``POST /mcp/v1/oauth/callback`` (a consent's code, passed on by the front
that owns the redirect URI), ``POST /mcp/v1/oauth/authorize`` (a fresh consent URL), ``GET``/``DELETE
/mcp/v1/oauth/connections`` (the tokens held, never a token; revoking one).

A principal's server is found by ``OAuthServers``: a server of the deployment's servers file (tenant ``""``); the
servers tenants register are found through ``extra`` (per-user and tenant OAuth build on it). A *per-user* server of
the servers file is found under any tenant too: its principal is (the caller's tenant, server, user), the tenant
being whose end user consents (agent-service passes its caller's), so that the same user name in two tenants never
names one token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx2
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from mcp_client_service.config.auth import OAuthConfig
from mcp_client_service.config.options import ConnectionOptions
from mcp_client_service.config.references import UnresolvedReferenceError
from mcp_client_service.config.servers_file import HttpServerConfig
from mcp_client_service.failures import ServerStartError
from mcp_client_service.oauth import ConsentError, OAuthConnection, Principal
from mcp_client_service.oauth.consents import ConsentFlow
from mcp_client_service.registry.server_registry import ServerRegistry
from mcp_client_service.transport.session_transport import resolve_config
from mcp_client_service.transport.ssrf_guard import guarded_http_client
from suite_common.errors import ApiError
from suite_common.http import ModelResponse, read_model
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import (
    OAuthAuthorizeRequest,
    OAuthAuthorizeResult,
    OAuthCallback,
    OAuthCallbackResult,
    OAuthConnections,
    OAuthConnectionView,
)

__all__ = ["OAuthLookup", "OAuthServer", "OAuthServers", "oauth_http", "oauth_routes"]


@dataclass(frozen=True)
class OAuthServer:
    """A server with an ``auth`` block, its references resolved (secrets included: never logged)."""

    url: str
    auth: OAuthConfig = field(repr=False)
    http: Callable[[], httpx2.AsyncClient]
    """The guarded client of its OAuth requests: its session's egress policy, its timeouts."""


OAuthLookup = Callable[[Principal], "OAuthServer | None"]


def oauth_http(options: ConnectionOptions, url: str) -> Callable[[], httpx2.AsyncClient]:
    """The guarded client of a server's OAuth requests: its session's egress policy (of ``url``), its timeouts."""
    policy = options.egress_for(url)

    def http() -> httpx2.AsyncClient:
        return guarded_http_client(
            policy,
            timeout=httpx2.Timeout(options.connect_timeout),
            resolver=options.resolver,
            max_connections=2,
            max_response_bytes=options.max_response_bytes,
        )

    return http


class OAuthServers:
    """Finds a principal's server: ``None`` when there is none of that name; ``ApiError`` 400 ``not_oauth`` for one
    without ``auth``."""

    def __init__(self, registry: ServerRegistry, extra: list[OAuthLookup] | None = None) -> None:
        self._registry = registry
        self.extra = extra if extra is not None else []

    def find(self, principal: Principal) -> OAuthServer | None:
        if principal.tenant:
            found = next((found for lookup in self.extra if (found := lookup(principal)) is not None), None)
            if found is not None or not self._registry.is_per_user(principal.server):
                return found  # a servers-file machine server's one token is the deployment's (tenant "")
        connection = self._registry.connections.get(principal.server)
        if connection is None:
            return None
        config = connection.config
        if not isinstance(config, HttpServerConfig) or config.auth is None:
            raise ApiError(400, "not_oauth", f'The MCP server "{principal.server}" has no "auth" block.')
        try:
            resolved, _ = resolve_config(config, connection.options, connection.base_dir)
        except (UnresolvedReferenceError, ServerStartError) as error:
            raise ApiError(409, "server_config_unresolved", connection.redact(str(error))) from None
        assert isinstance(resolved, HttpServerConfig)
        assert resolved.auth is not None
        return OAuthServer(url=resolved.url, auth=resolved.auth, http=oauth_http(connection.options, resolved.url))

    def require(self, principal: Principal) -> OAuthServer:
        found = self.find(principal)
        if found is None:
            raise ApiError(404, "server_not_found", f'No MCP server "{principal.server}" is known for this tenant.')
        return found

    @asynccontextmanager
    async def client(self, principal: Principal, _url: str) -> AsyncIterator[httpx2.AsyncClient]:
        """``ConsentFlow``'s HTTP client for ``principal``'s OAuth requests (``_url`` is on the server's policy)."""
        async with self.require(principal).http() as http:
            yield http


_CALLBACK = Operation(
    "Complete an OAuth consent: exchange the code the authorization server sent back, keep the token",
    body=OAuthCallback,
    answer=OAuthCallbackResult,
    errors={
        400: "invalid_oauth_state: unknown, expired or used state; oauth_binding_mismatch: a consent asked with a "
        "binding completed without the same one (another browser than the one that asked); oauth_denied: the "
        "authorization server's error.",
        502: "oauth_token_exchange_failed: the authorization server did not issue a token.",
    },
)
_AUTHORIZE = Operation(
    "A fresh consent URL for one principal of an OAuth server, or authorized: true when a token is held",
    body=OAuthAuthorizeRequest,
    answer=OAuthAuthorizeResult,
    errors={
        404: "server_not_found",
        400: "not_oauth: the server has no auth block; user_required / user_not_expected: the server's tokens are "
        "per user (a user is needed) or the machine's (none is).",
        502: "oauth_discovery_failed: the authorization server could not be found or registered with.",
    },
)
_CONNECTIONS = Operation(
    "The OAuth tokens held (never a token), filtered by tenant, server, user", answer=OAuthConnections
)
_REVOKE = Operation(
    "Revoke one principal's OAuth token (the authorization server is told when it can be) and end its session",
    status=204,
    errors={404: "connection_not_found"},
)


def oauth_routes(prefix: str, flow: Callable[[], ConsentFlow], servers: OAuthServers) -> list[BaseRoute]:
    """The routes under ``{prefix}/oauth``; ``flow`` is the consent flow of the running app (its vault opens with
    the store)."""

    async def callback(request: Request) -> Response:
        body = await read_model(request, OAuthCallback)
        try:
            done = await flow().complete(body.state, body.code, error=body.error, iss=body.iss, binding=body.binding)
        except ConsentError as error:
            raise ApiError(error.status, error.code, error.message) from None
        principal = done.principal
        result = OAuthCallbackResult(
            server=principal.server,
            tenant=principal.tenant or None,
            user=principal.user or None,
            scopes=list(done.scopes),
        )
        return ModelResponse(result)

    async def authorize(request: Request) -> Response:
        body = await read_model(request, OAuthAuthorizeRequest)
        principal = Principal(body.tenant or "", body.server, body.user or "")
        server = servers.require(principal)
        if server.auth.tokens == "perUser" and not principal.user:
            raise ApiError(400, "user_required", f'The MCP server "{body.server}" holds a token per user: name one.')
        if server.auth.tokens == "machine" and principal.user:
            raise ApiError(400, "user_not_expected", f'The MCP server "{body.server}" holds one machine token.')
        try:
            url = await flow().authorize(principal, server.url, server.auth, binding=body.binding)
        except ConsentError as error:
            raise ApiError(error.status, error.code, error.message) from None
        result = OAuthAuthorizeResult(authorized=True) if url is None else OAuthAuthorizeResult(authorization_url=url)
        return ModelResponse(result)

    async def list_connections(request: Request) -> Response:
        query = request.query_params
        held = await flow().vault.connections(query.get("tenant"), query.get("server"), query.get("user"))
        return ModelResponse(OAuthConnections(connections=[_view(connection) for connection in held]))

    async def revoke(request: Request) -> Response:
        query = request.query_params
        server = query.get("server")
        if not server:
            raise ApiError(400, "invalid_request", "Name the connection's server (?server=).")
        principal = Principal(query.get("tenant") or "", server, query.get("user") or "")
        if not await flow().revoke(principal):
            raise ApiError(404, "connection_not_found", f"No OAuth token is held for {principal.describe()}.")
        return Response(status_code=204)

    base = f"{prefix}/oauth"
    return [
        ApiRoute(f"{base}/callback", callback, method="POST", operation=_CALLBACK),
        ApiRoute(f"{base}/authorize", authorize, method="POST", operation=_AUTHORIZE),
        ApiRoute(f"{base}/connections", list_connections, method="GET", operation=_CONNECTIONS),
        ApiRoute(f"{base}/connections", revoke, method="DELETE", operation=_REVOKE),
    ]


def _view(connection: OAuthConnection) -> OAuthConnectionView:
    return OAuthConnectionView(
        server=connection.server,
        tenant=connection.tenant or None,
        user=connection.user or None,
        scopes=list(connection.scopes),
        expires_at=connection.expires_at.isoformat() if connection.expires_at else None,
        updated_at=connection.updated_at.isoformat(),
    )
