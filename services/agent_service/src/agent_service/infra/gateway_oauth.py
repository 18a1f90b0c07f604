"""The gateway's OAuth endpoints (``/mcp/v1/oauth/*``), as agent-service's faces of consent use them: the callback
the authorization server's redirect brings, a consent asked for, the tokens held, and their revocation.

Every request goes through ``ToolsClient.gateway_request`` (the shared secret, the deadline, the gateway's 4xx
passed through as it said them). A code, a state and whatever the gateway answers are never logged here.
"""

from __future__ import annotations

import json
from typing import TypeVar
from urllib.parse import urlencode

import anyio
from pydantic import BaseModel, ValidationError

from agent_service.core.errors import UpstreamError
from agent_service.infra.peers import ToolsClient
from suite_common.deadline import Deadline
from suite_common.peer_client import PeerReply
from suite_common.wire import (
    OAuthAuthorizeRequest,
    OAuthAuthorizeResult,
    OAuthCallback,
    OAuthCallbackResult,
    OAuthConnections,
    OAuthConnectionView,
    dump,
)

__all__ = ["GatewayOAuth"]

_Answer = TypeVar("_Answer", bound=BaseModel)


class GatewayOAuth:
    """``POST /mcp/v1/oauth/callback``, ``POST /mcp/v1/oauth/authorize``, ``GET`` and ``DELETE
    /mcp/v1/oauth/connections``. ``tenant`` ``""`` names the deployment's servers, ``user`` ``""`` a machine token."""

    def __init__(self, tools: ToolsClient) -> None:
        self.tools = tools
        self.url = tools.oauth_url

    async def callback(self, callback: OAuthCallback, deadline: Deadline) -> OAuthCallbackResult:
        """The redirect's query handed over: the gateway exchanges the code and keeps the token (400
        ``invalid_oauth_state`` / ``oauth_denied``, 502 ``oauth_token_exchange_failed``, passed through)."""
        reply = await self.tools.gateway_request("POST", self.url + "callback", deadline, dump(callback).encode())
        return _answer(OAuthCallbackResult, reply)

    async def authorize(
        self, server: str, tenant: str, user: str, deadline: Deadline, *, binding: str | None = None
    ) -> OAuthAuthorizeResult:
        """A fresh consent for (tenant, server, user): its URL, or ``authorized`` when a usable token is held.
        ``binding``: the asking browser's (``api.consent_binding``), which the callback must bring back."""
        request = OAuthAuthorizeRequest(server=server, tenant=tenant, user=user, binding=binding)
        body = request.model_dump_json(by_alias=True).encode()
        reply = await self.tools.gateway_request("POST", self.url + "authorize", deadline, body)
        return _answer(OAuthAuthorizeResult, reply)

    async def connections(
        self, deadline: Deadline, *, tenant: str, server: str | None = None, user: str | None = None
    ) -> list[OAuthConnectionView]:
        """The tokens held for ``tenant`` (of ``server``, of ``user``, when given): never the tokens themselves."""
        reply = await self.tools.gateway_request("GET", self._connections(tenant, server, user), deadline)
        return _answer(OAuthConnections, reply).connections

    async def per_user_servers(self, tenant: str, deadline: Deadline) -> set[str]:
        """The names of the per-user OAuth servers ``tenant``'s end users may connect: the deployment's (``GET
        /mcp/v1/servers``) and the tenant's own (its tenant API), asked at once."""
        names: set[str] = set()

        async def deployment() -> None:
            reply = await self.tools.gateway_request("GET", self.tools.servers_url, deadline)
            try:
                statuses = json.loads(reply.content)["servers"]
                names.update(
                    str(status["name"])
                    for status in statuses
                    if (status.get("authorization") or {}).get("tokens") == "perUser"
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                raise UpstreamError(
                    "bad_upstream_response", "mcp-client-service sent a malformed server list"
                ) from None

        async def tenants() -> None:
            servers = (await self.tools.tenant_servers(tenant, deadline)).servers
            names.update(
                server.name for server in servers if server.auth is not None and server.auth.tokens == "perUser"
            )

        async with anyio.create_task_group() as group:
            group.start_soon(deployment)
            group.start_soon(tenants)
        return names

    async def revoke(self, deadline: Deadline, *, tenant: str, server: str, user: str) -> None:
        """Forget the token of (tenant, server, user) and end its session (404 ``connection_not_found``)."""
        await self.tools.gateway_request("DELETE", self._connections(tenant, server, user), deadline)

    def _connections(self, tenant: str, server: str | None, user: str | None) -> str:
        query = {"tenant": tenant} | ({"server": server} if server is not None else {})
        query |= {"user": user} if user is not None else {}
        return f"{self.url}connections?{urlencode(query)}"


def _answer(model: type[_Answer], reply: PeerReply) -> _Answer:
    """The gateway's answer read through ``model``: nothing it does not declare reaches our caller."""
    try:
        return model.model_validate_json(reply.content)
    except ValidationError:
        raise UpstreamError("bad_upstream_response", "mcp-client-service sent a malformed OAuth answer") from None
