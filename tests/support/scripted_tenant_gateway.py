"""A scripted mcp-client-service for agent-service's admin API: the tenant API (``/mcp/v1/tenants/{tenant}/servers``
and ``/{name}``) and ``list-tools`` per ``X-Tenant-Id``, as docs/tenants.md and CONTRACT-27 say the gateway speaks
them; servers kept in memory, every request recorded (method, path, query, headers, body).

Not the gateway: it connects to nothing. A registered server is ``connecting`` with one tool, ``<name>_tool``, listed
for its tenant while it is enabled. Its refusals are the gateway's: 400 ``invalid_request``, 404 ``server_not_found``,
409 ``server_exists`` / ``too_many_servers`` (``maxServers``, default 20), 422 ``url_not_allowed`` (a URL naming
169.254.169.254, the cloud metadata address). ``leak_header_values``: every answer also carries the servers' header
values (and its ``auth`` block with its client secret), as a broken gateway might (agent-service must not pass them
on). A test may set a stored server's ``state`` and ``lastError`` (what the gateway's background listing would
find): its answers say them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from suite_common.wire import TENANT_HEADER, ServerAuthView, TenantServerCreate, TenantServerPatch

__all__ = ["RecordedRequest", "ScriptedTenantGateway"]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


@dataclass
class ScriptedTenantGateway:
    secret: str
    secret_header: str = "X-MCP-Service-Secret"
    leak_header_values: bool = False
    servers: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Tenant → name → the server as stored (``headers`` with their values)."""
    requests: list[RecordedRequest] = field(default_factory=list)

    @property
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/mcp/v1/tools/list-tools", self._list_tools, methods=["GET"]),
                Route("/mcp/v1/tenants/{tenant}/servers", self._servers, methods=["GET", "POST"]),
                Route("/mcp/v1/tenants/{tenant}/servers/{name}", self._server, methods=["GET", "PATCH", "DELETE"]),
            ]
        )

    async def _record(self, request: Request) -> Response | None:
        self.requests.append(
            RecordedRequest(
                request.method,
                request.url.path,
                dict(request.query_params),
                dict(request.headers),
                await request.body(),
            )
        )
        if request.headers.get(self.secret_header) != self.secret:
            return _error(401, "unauthorized", "wrong shared secret")
        return None

    def _answer(self, server: dict[str, Any]) -> dict[str, Any]:
        tools = [{"name": f"{server['name']}_tool", "inputSchema": {"type": "object"}, "server": server["name"]}]
        answer = {
            "name": server["name"],
            "url": server["url"],
            "transport": server["transport"],
            "enabled": server["enabled"],
            "allowedTools": server["allowedTools"],
            "headerNames": sorted(server["headers"]),
            "state": server.get("state") or ("connecting" if server["enabled"] else "disabled"),
            "lastError": server.get("lastError"),
            "toolCount": len(tools),
            "tools": tools,
        }
        auth = server.get("auth")
        if auth is not None:
            shown = auth if self.leak_header_values else ServerAuthView.of(auth)
            answer["auth"] = shown.model_dump(by_alias=True, exclude_none=True)
        if self.leak_header_values:
            answer["headers"] = server["headers"]
        return answer

    async def _list_tools(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        tenant = request.headers.get(TENANT_HEADER)
        own = self.servers.get(tenant, {}) if tenant is not None else {}
        tools = [
            {"name": f"{name}_tool", "inputSchema": {"type": "object"}, "server": name, "tenant": tenant}
            for name, server in own.items()
            if server["enabled"]
        ]
        return JSONResponse({"tools": tools})

    async def _servers(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        tenant = request.path_params["tenant"]
        own = self.servers.setdefault(tenant, {})
        if request.method == "GET":
            return JSONResponse({"servers": [self._answer(server) for server in own.values()]})
        try:
            body = TenantServerCreate.model_validate_json(self.requests[-1].body)
        except ValueError:
            return _error(400, "invalid_request", "not a server")
        if body.name in own:
            return _error(409, "server_exists", f"A server named {body.name} exists.")
        if len(own) >= int(request.query_params.get("maxServers", "20")):
            return _error(409, "too_many_servers", "The tenant has as many servers as it may.")
        if "169.254.169.254" in body.url:
            return _error(422, "url_not_allowed", "The URL resolves to a link-local address (cloud metadata).")
        own[body.name] = {
            "name": body.name,
            "url": body.url,
            "transport": body.transport,
            "headers": body.headers or {},
            "enabled": body.enabled,
            "allowedTools": body.allowed_tools,
            "auth": body.auth,
        }
        return JSONResponse(self._answer(own[body.name]), status_code=201)

    async def _server(self, request: Request) -> Response:
        refused = await self._record(request)
        if refused is not None:
            return refused
        own = self.servers.get(request.path_params["tenant"], {})
        name = request.path_params["name"]
        server = own.get(name)
        if server is None:
            return _error(404, "server_not_found", f"The tenant has no server named {name}.")
        if request.method == "DELETE":
            del own[name]
            return Response(status_code=204)
        if request.method == "PATCH":
            try:
                patch = TenantServerPatch.model_validate_json(self.requests[-1].body)
            except ValueError:
                return _error(400, "invalid_request", "not a change")
            changes = json.loads(self.requests[-1].body)
            for wire_name in ("url", "transport", "enabled", "allowedTools"):
                if wire_name in changes:
                    server[wire_name] = changes[wire_name]
            if patch.headers is not None:
                server["headers"] = patch.headers
            if "auth" in patch.model_fields_set:
                server["auth"] = patch.auth
        return JSONResponse(self._answer(server))
