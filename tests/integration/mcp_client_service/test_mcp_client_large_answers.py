"""Large answers over HTTP: a legitimate 2 MB result arrives, one beyond MCP_CLIENT_HTTP_MAX_RESPONSE_BYTES fails
its call only, and neither costs the server its session or counts against its circuit.

The servers run in this process: the SDK's MCP server over streamable HTTP (a JSON body per
answer, at protocol 2026) or over the older HTTP+SSE transport, and a hand-written handshake-era
streamable HTTP server that answers every request with an event stream, as many servers do.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from structlog.testing import capture_logs

from support.mcp_gateway import FAST_RETRIES, WAIT_SECONDS, Gateway, running_gateway
from support.servers import serve_app

pytestmark = pytest.mark.anyio

CALL = "/mcp/v1/tools/call-tool"
LIMIT = 256 * 1024


def _big_server() -> MCPServer:
    server = MCPServer("big")

    def big(chars: int) -> str:
        """Return `chars` characters (as text, and again as structuredContent)."""
        return "b" * chars

    server.add_tool(big)
    return server


_BIG_TOOL = {
    "name": "big",
    "inputSchema": {"type": "object", "properties": {"chars": {"type": "integer"}}, "required": ["chars"]},
}


def _event_stream_app() -> Starlette:
    """Streamable HTTP at protocol 2025-06-18, every request answered with one event on an event stream."""

    async def mcp(request: Request) -> Response:
        message = await request.json()
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            return Response(status_code=202)  # a notification
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "event-stream", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [_BIG_TOOL]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "b" * int(message["params"]["arguments"]["chars"])}]}
        elif method == "ping":
            result = {}
        else:
            error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}}
            return JSONResponse(error)
        answer = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})
        return Response(f"event: message\ndata: {answer}\n\n", media_type="text/event-stream")

    return Starlette(routes=[Route("/mcp", mcp, methods=["POST"])])


@asynccontextmanager
async def _big(answers: str) -> AsyncIterator[dict[str, Any]]:
    """The ``mcpServers`` entry of a server whose ``big(chars)`` answers as ``answers`` says."""
    if answers == "event-stream":
        async with serve_app(_event_stream_app()) as url:
            yield {"url": url + "/mcp"}
        return
    server = _big_server()
    if answers == "sse":
        async with serve_app(server.sse_app()) as url:
            yield {"type": "sse", "url": url + "/sse"}
        return
    async with serve_app(server.streamable_http_app(json_response=True)) as url:
        yield {"url": url + "/mcp"}


async def _call(gateway: Gateway, chars: int) -> dict[str, Any]:
    response = await gateway.http.post(CALL, json={"name": "big", "arguments": {"chars": chars}})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize("answers", ["event-stream", "json", "sse"])
async def test_a_two_megabyte_result_arrives_on_the_same_session(answers: str) -> None:
    async with _big(answers) as entry, running_gateway({"big": entry}) as gateway:
        await gateway.wait_until_ready("big")
        connection = gateway.registry.connections["big"]

        result = await _call(gateway, 1_100_000)  # 2.2 MB as text and structuredContent: beyond 1 MiB
        after = await _call(gateway, 10)

    assert result["isError"] is False
    assert result["content"][0]["text"].startswith("b" * 10_000)  # then cut at MCP_CLIENT_MAX_RESULT_CHARS
    assert after["content"] == [{"type": "text", "text": "b" * 10}]
    assert connection.attempts == 1


@pytest.mark.parametrize("answers", ["event-stream", "json"])
async def test_an_answer_beyond_the_response_limit_fails_that_call_only(answers: str) -> None:
    breaker: dict[str, Any] = {"breaker_failure_threshold": 1}  # a single failure counted would open the circuit
    async with (
        _big(answers) as entry,
        running_gateway({"big": entry}, http_max_response_bytes=LIMIT, **breaker) as gateway,
    ):
        await gateway.wait_until_ready("big")
        connection = gateway.registry.connections["big"]

        refused = await _call(gateway, 2 * LIMIT)
        after = await _call(gateway, 10)

    assert refused["isError"] is True
    text = refused["content"][0]["text"]
    assert text.startswith('The answer of the MCP server "big" to the call of "big" was too large for the gateway')
    assert str(LIMIT) in text
    assert after["content"] == [{"type": "text", "text": "b" * 10}]
    assert (connection.attempts, connection.circuit) == (1, "closed")


async def test_an_event_beyond_the_limit_over_the_older_sse_transport_is_not_held_against_the_server() -> None:
    # On the one event stream of this transport, an event cut short leaves the stream unreadable,
    # so the session is opened again; the server answered, so its circuit stays closed.
    breaker: dict[str, Any] = {"breaker_failure_threshold": 1}
    with capture_logs() as logs:
        async with (
            _big("sse") as entry,
            running_gateway({"big": entry}, http_max_response_bytes=LIMIT, **breaker, **FAST_RETRIES) as gateway,
        ):
            await gateway.wait_until_ready("big")
            connection = gateway.registry.connections["big"]

            refused = await _call(gateway, 2 * LIMIT)
            with anyio.fail_after(WAIT_SECONDS):
                await gateway.registry.wait_until(lambda _: connection.attempts >= 2 and connection.serving)
            circuit = connection.circuit
            after = await _call(gateway, 10)

    why = next(log["error"] for log in logs if log["event"] == "mcp_server_failed")
    assert refused["isError"] is True
    assert circuit == "closed"
    assert f"an event larger than {LIMIT} bytes" in why
    assert after["content"] == [{"type": "text", "text": "b" * 10}]
