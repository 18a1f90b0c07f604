"""A scripted mcp-client-service for agent-service's faces of OAuth consent: the tenant API of
``ScriptedTenantGateway`` plus the gateway's OAuth endpoints as CONTRACT-33 (docs/gateway-api.md) says it speaks them
(``POST /mcp/v1/oauth/authorize``, ``POST /mcp/v1/oauth/callback``, ``GET``/``DELETE /mcp/v1/oauth/connections``)
and ``GET /mcp/v1/servers`` (the deployment's servers: ``shared_servers``).

Not the gateway: it holds no token and exchanges no code. ``authorize`` hands out a URL with a fresh state for the
principal (tenant, server, user); a callback with that state and a ``code`` records a connection (``code`` ``bad``:
502 ``oauth_token_exchange_failed``; ``error``: 400 ``oauth_denied``; an unknown or used state: 400
``invalid_oauth_state``; a consent asked with a ``binding`` and completed without the same one: 400
``oauth_binding_mismatch``). Every request is recorded, as the tenant API's are.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from suite_common.wire import OAuthAuthorizeRequest, OAuthCallback
from support.scripted_tenant_gateway import ScriptedTenantGateway, _error

__all__ = ["Principal", "ScriptedOAuthGateway"]

Principal = tuple[str, str, str]
"""(tenant, server, user): tenant ``""`` for a deployment server, user ``""`` for a machine token."""


@dataclass
class ScriptedOAuthGateway(ScriptedTenantGateway):
    shared_servers: list[str] = field(default_factory=list)
    shared_per_user: list[str] = field(default_factory=list)
    """Those of ``shared_servers`` whose tokens are per user (their status says so, as the gateway's does)."""
    connections: dict[Principal, list[str]] = field(default_factory=dict)
    """The tokens held, as their scopes."""
    pending: dict[str, Principal] = field(default_factory=dict)
    """Consents asked for, by state."""
    bindings: dict[str, str | None] = field(default_factory=dict)
    """The binding each consent was asked with, by state."""

    @property
    def app(self) -> Starlette:
        app = super().app
        app.router.routes += [
            Route("/mcp/v1/servers", self._shared, methods=["GET"]),
            Route("/mcp/v1/oauth/authorize", self._authorize, methods=["POST"]),
            Route("/mcp/v1/oauth/callback", self._callback, methods=["POST"]),
            Route("/mcp/v1/oauth/connections", self._connections, methods=["GET", "DELETE"]),
        ]
        return app

    async def _shared(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        statuses = [
            {"name": name, "state": "ready"}
            | ({"authorization": {"tokens": "perUser", "state": "required"}} if name in self.shared_per_user else {})
            for name in self.shared_servers
        ]
        return JSONResponse({"servers": statuses})

    async def _authorize(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        asked = OAuthAuthorizeRequest.model_validate_json(self.requests[-1].body)
        tenant = asked.tenant or ""
        if asked.server not in self.servers.get(tenant, {}) and asked.server not in self.shared_servers:
            return _error(404, "server_not_found", f"No MCP server named {asked.server}.")
        principal = (tenant, asked.server, asked.user or "")
        if principal in self.connections:
            return JSONResponse({"authorized": True})
        state = secrets.token_urlsafe(12)
        self.pending[state] = principal
        self.bindings[state] = asked.binding
        return JSONResponse({"authorizationUrl": f"https://as.example/authorize?client_id=gw&state={state}"})

    async def _callback(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        callback = OAuthCallback.model_validate_json(self.requests[-1].body)
        principal = self.pending.pop(callback.state, None)
        if principal is None:
            return _error(400, "invalid_oauth_state", "The consent is unknown, expired or completed already.")
        bound = self.bindings.pop(callback.state, None)
        if bound is not None and bound != callback.binding:
            return _error(400, "oauth_binding_mismatch", "Open the link in the browser where you asked for it.")
        if callback.error is not None:
            return _error(400, "oauth_denied", f"The authorization server refused: {callback.error}.")
        if callback.code == "bad":
            return _error(502, "oauth_token_exchange_failed", "The token endpoint answered HTTP 400 invalid_grant.")
        self.connections[principal] = ["crm.read"]
        tenant, server, user = principal
        return JSONResponse({"server": server, "tenant": tenant, "user": user or None, "scopes": ["crm.read"]})

    async def _connections(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        query = request.query_params
        wanted = [query.get("tenant"), query.get("server"), query.get("user")]
        chosen = [
            principal
            for principal in self.connections
            if all(want is None or want == have for want, have in zip(wanted, principal, strict=True))
        ]
        if request.method == "DELETE":
            if len(chosen) != 1:
                return _error(404, "connection_not_found", "No such token is held.")
            del self.connections[chosen[0]]
            return Response(status_code=204)
        listed = [
            {
                "server": server,
                "tenant": tenant,
                "user": user or None,
                "scopes": self.connections[principal],
                "updatedAt": "2026-11-28T12:00:00+00:00",
            }
            for principal in chosen
            for tenant, server, user in [principal]
        ]
        return JSONResponse({"connections": listed})
