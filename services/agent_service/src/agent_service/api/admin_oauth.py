"""The admin API's OAuth (docs/tenants.md, "The auth block"): a tenant admin connects the tenant's machine servers
(one consent for the tenant), sees the tokens held for the tenant, and revokes any of them (a user's included).

Who may: as the rest of the admin API (``api.admin.admin_tenant``). A tenant admin consents for the tenant's own
servers only; an operator may also consent for a server of the deployment's servers file (one token for the whole
deployment), which no tenant admin may.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from agent_service.api.admin import AdminScope, admin_tenant
from agent_service.api.auth import caller_of
from agent_service.api.consent_binding import bound_answer, new_nonce, nonce_hash
from agent_service.api.gateway_calls import GATEWAY_DOWN, GATEWAY_SECONDS
from agent_service.api.services import Services, services_of
from agent_service.core.errors import UpstreamError
from suite_common.deadline import Deadline
from suite_common.errors import ApiError
from suite_common.http import ModelResponse
from suite_common.logging import get_logger
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import OAuthAuthorizeResult, OAuthConnections

__all__ = ["admin_oauth_routes"]

_log = get_logger("agent_service.admin")

_DEPLOYMENT = ""
"""The gateway's tenant of a server of the deployment's servers file."""


def _deadline() -> Deadline:
    return Deadline.after(GATEWAY_SECONDS)


async def _owner(request: Request, services: Services, scope: AdminScope, name: str) -> str:
    """Whose server ``name`` is, for a machine consent: the tenant's own, or (an operator's request only) the
    deployment's; else 404 ``server_not_found``."""
    try:
        await services.loop.tools.tenant_server(scope.tenant, name, _deadline())
        return scope.tenant
    except UpstreamError as error:
        if error.status != 404:
            raise
    if caller_of(request).key_role == "operator" and name in await services.loop.tools.list_servers(_deadline()):
        return _DEPLOYMENT
    raise ApiError(404, "server_not_found", f"The tenant {scope.tenant} has no MCP server named {name!r}.")


async def authorize_server(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    name: str = request.path_params["name"]
    tenant = await _owner(request, services, scope, name)
    nonce = new_nonce()
    answer = await services.oauth.authorize(name, tenant, "", _deadline(), binding=nonce_hash(nonce))
    _log.info("oauth_consent_asked", tenant=scope.tenant, server=name, authorized=answer.authorized, by=scope.by)
    return bound_answer(request, answer, nonce)


async def list_connections(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    server = request.query_params.get("server")
    connections = await services.oauth.connections(_deadline(), tenant=scope.tenant, server=server)
    return ModelResponse(OAuthConnections(connections=connections))


async def revoke_connection(request: Request) -> Response:
    services = services_of(request)
    scope = admin_tenant(request, services)
    server = request.query_params.get("server")
    if not server:
        raise ApiError(400, "invalid_request", "Name the connection's server with ?server= (and ?user= for a user's).")
    user = request.query_params.get("user", "")
    await services.oauth.revoke(_deadline(), tenant=scope.tenant, server=server, user=user)
    _log.info("oauth_connection_revoked", tenant=scope.tenant, server=server, user=user or None, by=scope.by)
    return Response(status_code=204)


_WHO = (
    "The key may not use the admin API (admin_only): only a key with role admin (for its own tenant) or operator "
    "(for any, with ?tenant=) may."
)

_AUTHORIZE = Operation(
    "Connect a machine OAuth server (one token for the tenant; an operator may also connect a server of the "
    "deployment's servers file): the URL an admin opens to consent, or authorized: true when a usable token is "
    "held. The answer sets a cookie binding the consent to this browser: open the URL in the browser that asked",
    answer=OAuthAuthorizeResult,
    errors={
        400: "The server is not behind OAuth (not_oauth); or an operator key without a valid ?tenant= "
        "(invalid_request).",
        403: _WHO,
        404: "The tenant has no server of that name (server_not_found).",
        503: GATEWAY_DOWN,
    },
)
_LIST = Operation(
    "The OAuth tokens held for the tenant: its machine servers' and each user's of its per-user servers (scopes, "
    "expiry, never the token); ?server= narrows to one server",
    answer=OAuthConnections,
    errors={403: _WHO, 503: GATEWAY_DOWN},
)
_REVOKE = Operation(
    "Revoke a token held for the tenant: ?server= (required) and ?user= for a user's token of a per-user server; "
    "the session it opened ends, and the next call asks for a consent again",
    status=204,
    errors={
        400: "No ?server= (invalid_request).",
        403: _WHO,
        404: "No such token is held (connection_not_found).",
        503: GATEWAY_DOWN,
    },
)


def admin_oauth_routes() -> list[BaseRoute]:
    connections = "/api/v1/admin/oauth-connections"
    return [
        ApiRoute("/api/v1/admin/mcp-servers/{name}/authorize", authorize_server, method="POST", operation=_AUTHORIZE),
        ApiRoute(connections, list_connections, method="GET", operation=_LIST),
        ApiRoute(connections, revoke_connection, method="DELETE", operation=_REVOKE),
    ]
