"""A scripted front of the real gateway, for agent-service's integration tests: every request is passed through to
mcp-client-service as it came, except a call-tool of a tool named in ``blocked``, which is answered as the gateway
answers a call whose server's address the outbound policy blocks (403 ``outbound_ssrf_blocked``, the tool not
called); every call-tool is recorded (headers and body) to check what agent-service sends.

::

    front = GatewayFront(gateway.url, blocked={"add"})
    async with serve_app(front.app) as url: ...   # agent-service's AGENT_MCP_CLIENT_URL
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["BLOCKED_MESSAGE", "GatewayFront", "RecordedCall"]

BLOCKED_MESSAGE = "The server's address 10.20.30.40 is private: the outbound policy blocks it."
"""The gateway's words for the block: they name an address, which must never reach the run's caller or model."""

_HOP_BY_HOP = {"content-length", "transfer-encoding", "connection", "host"}


@dataclass(frozen=True)
class RecordedCall:
    headers: dict[str, str]
    body: dict[str, Any]


class GatewayFront:
    def __init__(self, gateway_url: str, *, blocked: Iterable[str] = ()) -> None:
        self.gateway_url = gateway_url.rstrip("/")
        self.blocked = set(blocked)
        self.calls: list[RecordedCall] = []
        self.app = Starlette(routes=[Route("/{path:path}", self._pass, methods=["GET", "POST", "PATCH", "DELETE"])])

    async def _pass(self, request: Request) -> Response:
        content = await request.body()
        if request.url.path == "/mcp/v1/tools/call-tool":
            body = json.loads(content)
            self.calls.append(RecordedCall({key.lower(): value for key, value in request.headers.items()}, body))
            if body.get("name") in self.blocked:
                refusal = {"code": "outbound_ssrf_blocked", "message": BLOCKED_MESSAGE}
                return JSONResponse({"error": refusal}, status_code=403)
        headers = {key: value for key, value in request.headers.items() if key.lower() not in _HOP_BY_HOP}
        url = self.gateway_url + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.request(request.method, url, content=content, headers=headers)
        passed = {key: value for key, value in answer.headers.items() if key.lower() not in _HOP_BY_HOP}
        passed.pop("content-encoding", None)  # httpx decoded the body already
        return Response(answer.content, status_code=answer.status_code, headers=passed)
