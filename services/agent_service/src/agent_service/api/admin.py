"""The admin API of a tenant: its own MCP servers (``/api/v1/admin/mcp-servers``, forwarded to mcp-client-service's
tenant API, which keeps them) and its runtime (``/api/v1/admin/runtime``, kept in the run store); docs/tenants.md.

Who may use it (``admin_tenant``): a key with ``role = "admin"`` acts for its own tenant; a key with
``role = "operator"`` for any tenant, named with ``?tenant=`` (required); any other key gets 403 ``admin_only``. An
open API (no keys at all, a laptop) is the admin of its one tenant, ``default``. The gateway's refusals (a name taken,
too many servers, a URL the outbound policy blocks, an unknown server) reach the caller as the gateway said them.
Header values of a server are write-only: they are forwarded, never answered nor logged.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from agent_service.api.auth import caller_of
from agent_service.api.gateway_calls import GATEWAY_DOWN, GATEWAY_SECONDS
from agent_service.api.services import Services, services_of
from agent_service.core.names import TENANT_NAME_RULE, is_name
from agent_service.core.tenancy import TenantRules
from suite_common.deadline import Deadline
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.http import ModelResponse, read_model
from suite_common.logging import get_logger
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import (
    TenantRuntimePatch,
    TenantRuntimeView,
    TenantServer,
    TenantServerCreate,
    TenantServerList,
    TenantServerPatch,
)

__all__ = ["AdminScope", "admin_routes", "admin_tenant"]

_log = get_logger("agent_service.admin")


@dataclass(frozen=True)
class AdminScope:
    """Whose admin API a request uses: the tenant it acts for and that tenant's rules, and the key's name."""

    tenant: str
    rules: TenantRules
    by: str


def admin_tenant(request: Request, services: Services) -> AdminScope:
    """The tenant a request of the admin API acts for (403 ``admin_only`` for a key that may not; 400 for an
    operator's request without a valid ``?tenant=``)."""
    caller = caller_of(request)
    asked = request.query_params.get("tenant")
    if caller.key_role == "operator":
        if asked is None:
            raise ApiError(400, "invalid_request", "An operator key acts for one tenant at a time: add ?tenant=<name>.")
        if not is_name(asked):
            message = f"tenant must be a tenant's name ({TENANT_NAME_RULE}); got {clip(asked)!r}."
            raise ApiError(400, "invalid_request", message)
        return AdminScope(asked, services.rules_of(asked), caller.name)
    if caller.key_role == "admin" or (services.open_api and caller.key_role is None):
        if asked is not None and asked != caller.tenant:
            raise ApiError(403, "admin_only", "An admin key acts for its own tenant only; ?tenant= is an operator's.")
        return AdminScope(caller.tenant, caller.rules, caller.name)
    raise ApiError(403, "admin_only", "The admin API needs a key with role admin (its tenant's) or operator.")


def _deadline() -> Deadline:
    return Deadline.after(GATEWAY_SECONDS)


def _changed(services: Services, scope: AdminScope, server: str, action: str) -> None:
    """After a change of a tenant's servers: this replica's next run of the tenant lists its tools again (the other
    replicas' within ``AGENT_CATALOG_CACHE_SECONDS``)."""
    services.catalog.forget(scope.tenant)
    _log.info("tenant_server_changed", tenant=scope.tenant, server=server, action=action, by=scope.by)


async def list_servers(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    listed = await services.loop.tools.tenant_servers(scope.tenant, _deadline())
    return ModelResponse(listed.model_copy(update={"max_servers": scope.rules.max_mcp_servers}))


async def create_server(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    body = await read_model(request, TenantServerCreate)
    cap = scope.rules.max_mcp_servers
    created = await services.loop.tools.create_tenant_server(scope.tenant, body, _deadline(), max_servers=cap)
    _changed(services, scope, created.name, "created")
    return ModelResponse(created, status_code=201)


def _name(request: Request) -> str:
    name: str = request.path_params["name"]
    return name


async def get_server(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    return ModelResponse(await services.loop.tools.tenant_server(scope.tenant, _name(request), _deadline()))


async def update_server(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    patch = await read_model(request, TenantServerPatch)
    updated = await services.loop.tools.update_tenant_server(scope.tenant, _name(request), patch, _deadline())
    _changed(services, scope, updated.name, "updated")
    return ModelResponse(updated)


async def delete_server(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    name = _name(request)
    await services.loop.tools.delete_tenant_server(scope.tenant, name, _deadline())
    _changed(services, scope, name, "deleted")
    return Response(status_code=204)


async def get_runtime(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    runtime = await services.runtimes.of(scope.tenant, scope.rules)
    return ModelResponse(runtime.view(scope.tenant))


async def update_runtime(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    patch = await read_model(request, TenantRuntimePatch)
    runtime = await services.runtimes.change(scope.tenant, scope.rules, patch, updated_by=scope.by)
    fields = sorted(patch.model_dump(by_alias=True, exclude_unset=True))
    _log.info("tenant_runtime_changed", tenant=scope.tenant, fields=fields, by=scope.by)
    return ModelResponse(runtime.view(scope.tenant))


_WHO = (
    "The key may not use the admin API (admin_only): only a key with role admin (for its own tenant) or operator "
    "(for any, with ?tenant=) may."
)
_OPERATOR_TENANT = "An operator key without ?tenant=, or with one that is not a tenant's name (invalid_request)"
_ONE_SERVER = {
    400: _OPERATOR_TENANT + ".",
    403: _WHO,
    404: "The tenant has no server of that name (server_not_found).",
    503: GATEWAY_DOWN,
}
"""What a route of one named server answers with the error body."""

_LIST = Operation(
    "The caller's tenant's own MCP servers: their settings (header names, never values), state, last error and tools, "
    "and how many it may have (maxServers); an operator names the tenant with ?tenant=",
    answer=TenantServerList,
    errors={400: _OPERATOR_TENANT + ".", 403: _WHO, 503: GATEWAY_DOWN},
)
_CREATE = Operation(
    "Register a remote MCP server (streamable HTTP or SSE) for the caller's tenant; it connects and lists its tools "
    "in the background (state connecting, then ready or failed)",
    body=TenantServerCreate,
    answer=TenantServer,
    status=201,
    errors={
        400: "Not a valid server (the message names the field); or " + _OPERATOR_TENANT + ".",
        403: _WHO,
        409: "A server of that name exists, the tenant's or a shared one (server_exists); or the tenant has as many "
        "servers as it may (too_many_servers).",
        422: "The URL is refused by the outbound policy (url_not_allowed: the message says why).",
        503: GATEWAY_DOWN,
    },
    example={
        "name": "crm",
        "url": "https://mcp.example.com/mcp",
        "transport": "streamable-http",
        "headers": {"Authorization": "Bearer <token>"},
    },
)
_GET = Operation(
    "One of the tenant's servers",
    answer=TenantServer,
    errors=_ONE_SERVER,
)
_PATCH = Operation(
    'Change one of the tenant\'s servers: the fields given only ({"enabled": false} is its on/off switch; headers '
    "replaces them all); its tools leave (or join) every replica's catalog within seconds",
    body=TenantServerPatch,
    answer=TenantServer,
    errors={
        **_ONE_SERVER,
        400: "Not a valid change (the message names the field); or " + _OPERATOR_TENANT + ".",
        422: "The new URL is refused by the outbound policy (url_not_allowed).",
    },
    example={"enabled": False},
)
_DELETE = Operation(
    "Remove one of the tenant's servers; calls of its tools are refused from then on",
    status=204,
    errors=_ONE_SERVER,
)
_GET_RUNTIME = Operation(
    "The tenant's runtime in force (maxIterations, toolCacheSeconds, streamMode, agentEnabled), the operator's caps "
    "it lives under, and which fields its admin set",
    answer=TenantRuntimeView,
    errors={
        400: _OPERATOR_TENANT + ".",
        403: _WHO,
        503: "The run store is unavailable (store_unavailable, Retry-After).",
    },
)
_PATCH_RUNTIME = Operation(
    "Change the tenant's runtime: the fields given only, null puts a field back to the operator's default; every "
    "replica applies it within 2 s",
    body=TenantRuntimePatch,
    answer=TenantRuntimeView,
    errors={
        400: "Not a valid change (the message names the field); or " + _OPERATOR_TENANT + ".",
        403: _WHO,
        404: "Runs are not stored (AGENT_DATABASE_URL is empty), so the runtime cannot be changed "
        "(runtime_not_stored).",
        422: "A value above the operator's cap (above_cap: the message names the cap).",
        503: "The run store is unavailable (store_unavailable, Retry-After).",
    },
    example={"maxIterations": 5, "streamMode": "final_only"},
)


def admin_routes() -> list[BaseRoute]:
    servers, server = "/api/v1/admin/mcp-servers", "/api/v1/admin/mcp-servers/{name}"
    runtime = "/api/v1/admin/runtime"
    return [
        ApiRoute(servers, list_servers, method="GET", operation=_LIST),
        ApiRoute(servers, create_server, method="POST", operation=_CREATE),
        ApiRoute(server, get_server, method="GET", operation=_GET),
        ApiRoute(server, update_server, method="PATCH", operation=_PATCH),
        ApiRoute(server, delete_server, method="DELETE", operation=_DELETE),
        ApiRoute(runtime, get_runtime, method="GET", operation=_GET_RUNTIME),
        ApiRoute(runtime, update_runtime, method="PATCH", operation=_PATCH_RUNTIME),
    ]
