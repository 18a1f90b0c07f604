"""A person's faces of OAuth consent (docs/agent-api.md, "Connections"): the callback their browser comes back to from
an authorization server, and their own connections to per-user MCP servers.

``GET /api/v1/agent/oauth/callback`` is public (``api.auth.PUBLIC_PATHS``): the browser brings nothing but the
redirect's query and the consent's binding cookie (``api.consent_binding``), which are handed to the gateway (``POST
/mcp/v1/oauth/callback``), whose ``state`` and binding checks say whose consent it completes and that this browser
asked for it. It answers a small HTML page for the person: the server is connected, or why not.

``/api/v1/agent/connections`` acts for the end user the caller names (``X-User-Id``; 403 ``user_required``
without one): the tokens held for them, a fresh consent, a revocation. Never a token, a code or a state in a log
line or an answer.
"""

from __future__ import annotations

from html import escape

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute

from agent_service.api.auth import caller_of
from agent_service.api.consent_binding import (
    CALLBACK_PATH,
    binding_of,
    bound_answer,
    forget_binding,
    new_nonce,
    nonce_hash,
)
from agent_service.api.gateway_calls import GATEWAY_DOWN, GATEWAY_SECONDS
from agent_service.api.services import services_of
from agent_service.core.errors import UpstreamError
from suite_common.deadline import Deadline
from suite_common.errors import ApiError
from suite_common.http import ModelResponse
from suite_common.logging import get_logger
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import OAuthAuthorizeResult, OAuthCallback, OAuthConnections

__all__ = ["connections_routes"]

_log = get_logger("agent_service.connections")

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: system-ui, sans-serif; max-width: 36rem; margin: 4rem auto; padding: 0 1rem">
<h1 style="font-size: 1.4rem">{title}</h1><p>{text}</p></body></html>
"""


def _page(status: int, title: str, text: str) -> HTMLResponse:
    # No referrer: the page's own URL carries the code and the state, which must not travel on.
    headers = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
    return HTMLResponse(_PAGE.format(title=escape(title), text=escape(text)), status_code=status, headers=headers)


async def oauth_callback(request: Request) -> Response:
    """The authorization server's redirect: completed through the gateway, answered as a page for the person."""
    services = services_of(request)
    query = request.query_params
    try:
        callback = OAuthCallback(
            state=query.get("state", ""),
            code=query.get("code"),
            error=query.get("error"),
            error_description=query.get("error_description"),
            iss=query.get("iss"),
            binding=binding_of(request, query.get("state", "")),
        )
    except ValidationError:
        return _page(400, "Not connected", "This link is not a complete answer of an authorization server.")
    try:
        result = await services.oauth.callback(callback, Deadline.after(GATEWAY_SECONDS))
    except UpstreamError as error:
        # The gateway's words (an unknown or used state, a refusal, a failed exchange) never hold a secret.
        _log.info("oauth_callback_failed", code=error.code, status=error.status)
        status = error.status if 400 <= error.status < 500 else 502
        page = _page(status, "Not connected", error.message)
    else:
        _log.info("oauth_callback_completed", server=result.server, tenant=result.tenant or None, user=result.user)
        page = _page(200, f"{result.server} is connected", "You can close this window.")
    forget_binding(request, page, callback.state)
    return page


def _user(request: Request) -> tuple[str, str]:
    """The caller's tenant and the end user it names (403 ``user_required`` without ``X-User-Id``)."""
    caller = caller_of(request)
    if caller.user is None:
        raise ApiError(403, "user_required", "Connections are a person's own: name the end user with X-User-Id.")
    return caller.tenant, caller.user


def _server(request: Request) -> str:
    server: str = request.path_params["server"]
    return server


async def list_connections(request: Request) -> Response:
    """The person's tokens, and the per-user servers they have not connected yet (``available``)."""
    tenant, user = _user(request)
    oauth, deadline = services_of(request).oauth, Deadline.after(GATEWAY_SECONDS)
    connections = await oauth.connections(deadline, tenant=tenant, user=user)
    held = {connection.server for connection in connections}
    available = sorted(await oauth.per_user_servers(tenant, deadline) - held)
    return ModelResponse(OAuthConnections(connections=connections, available=available))


async def authorize(request: Request) -> Response:
    tenant, user = _user(request)
    server = _server(request)
    nonce = new_nonce()
    deadline = Deadline.after(GATEWAY_SECONDS)
    answer = await services_of(request).oauth.authorize(server, tenant, user, deadline, binding=nonce_hash(nonce))
    _log.info("oauth_consent_asked", server=server, authorized=answer.authorized)
    return bound_answer(request, answer, nonce)


async def disconnect(request: Request) -> Response:
    tenant, user = _user(request)
    server = _server(request)
    await services_of(request).oauth.revoke(Deadline.after(GATEWAY_SECONDS), tenant=tenant, server=server, user=user)
    _log.info("oauth_connection_revoked", server=server)
    return Response(status_code=204)


_NO_USER = "The request names no end user (user_required): connections are a person's own, name them with X-User-Id."

_CALLBACK = Operation(
    "Where an OAuth authorization server sends the person's browser back (the gateway's redirect URI): the consent "
    "is completed through the gateway and a small page says so. Public: no key; the state says whose consent it is, "
    "and the consent's cookie (set by the authorize endpoint that asked for it) that this browser asked",
    media_type="text/html",
    answer=str,
    error_media_type="text/html",
    errors={
        400: "No state, an unknown, expired or used one (invalid_oauth_state), a consent asked for in another "
        "browser (oauth_binding_mismatch), or the person refused (oauth_denied): answered as an HTML page.",
        502: "The authorization server's token endpoint failed the exchange (oauth_token_exchange_failed), or the "
        "gateway is unreachable: an HTML page.",
    },
)
_LIST = Operation(
    "The end user's own connections to per-user MCP servers (scopes, expiry, never the token), and the per-user "
    "servers they may connect and have not (available)",
    answer=OAuthConnections,
    errors={403: _NO_USER, 503: GATEWAY_DOWN},
)
_AUTHORIZE = Operation(
    "Connect the end user to a per-user MCP server: the URL to open for their consent, or authorized: true when "
    "a usable token is held already. The answer sets a cookie binding the consent to this browser: open the URL "
    "in the browser that asked",
    answer=OAuthAuthorizeResult,
    errors={
        400: "The server is not behind OAuth (not_oauth).",
        403: _NO_USER,
        404: "No such server for the caller's tenant (server_not_found).",
        503: GATEWAY_DOWN,
    },
)
_DISCONNECT = Operation(
    "Revoke the end user's token of a server: their next call of its tools asks for their consent again",
    status=204,
    errors={
        403: _NO_USER,
        404: "The user holds no token of that server (connection_not_found).",
        503: GATEWAY_DOWN,
    },
)


def connections_routes() -> list[BaseRoute]:
    connections = "/api/v1/agent/connections"
    return [
        ApiRoute(CALLBACK_PATH, oauth_callback, method="GET", operation=_CALLBACK),
        ApiRoute(connections, list_connections, method="GET", operation=_LIST),
        ApiRoute(connections + "/{server}/authorize", authorize, method="POST", operation=_AUTHORIZE),
        ApiRoute(connections + "/{server}", disconnect, method="DELETE", operation=_DISCONNECT),
    ]
