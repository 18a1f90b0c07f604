"""The gateway as an MCP server: the official SDK client uses every tool through its ``/mcp``.

Behind the gateway: the echo server and the strict-schemas misbehaving server, both over
streamable HTTP. What MCP clients get must be what the REST API gives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, REQUEST_TIMEOUT, CallToolResult, TextContent
from starlette.applications import Starlette
from starlette.routing import Route

from mcp_client_service.calls.router import ToolRouter
from mcp_client_service.config.servers_file import parse_servers_config
from mcp_client_service.mcp_face.endpoint import MCP_FACE_PATH, McpFace
from mcp_client_service.registry.server_registry import ServerRegistry
from support.mcp_gateway import GATEWAY_SECRET, Gateway, echo_http_server, running_gateway
from support.misbehaving_mcp_server import PLAN_TRIP_SCHEMA, build_misbehaving_server
from support.servers import serve_app

pytestmark = pytest.mark.anyio

BEARER = {"Authorization": f"Bearer {GATEWAY_SECRET}"}


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[Gateway]:
    strict = build_misbehaving_server(["strict-schemas"]).streamable_http_app()
    async with (
        echo_http_server("web") as web_url,
        serve_app(strict) as strict_url,
        running_gateway({"web": {"url": web_url}, "strict": {"url": strict_url + "/mcp"}}) as gateway,
    ):
        await gateway.wait_until_ready("web", "strict")
        yield gateway


@asynccontextmanager
async def mcp_client(gateway: Gateway, headers: dict[str, str]) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(gateway.url + "/mcp", http_client=http)) as client,
    ):
        yield client


def _text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_an_mcp_client_lists_the_tools_of_every_server_under_the_names_of_the_rest_api(
    gateway: Gateway,
) -> None:
    rest = (await gateway.http.get("/mcp/v1/tools/list-tools")).json()["tools"]

    async with mcp_client(gateway, BEARER) as client:
        listed = await client.list_tools()

    assert [tool.name for tool in listed.tools] == [tool["name"] for tool in rest]
    plan_trip = next(tool for tool in listed.tools if tool.name == "plan_trip")
    assert plan_trip.input_schema == PLAN_TRIP_SCHEMA
    assert plan_trip.output_schema == {
        "type": "object",
        "properties": {"legs": {"type": "integer"}},
        "required": ["legs"],
    }
    assert plan_trip.description == "Plan a trip of one or more legs."


async def test_an_mcp_client_calls_a_tool_and_learns_which_server_answered(gateway: Gateway) -> None:
    async with mcp_client(gateway, BEARER) as client:
        result = await client.call_tool("add", {"a": 2, "b": 40})

    assert result.is_error is False
    assert _text(result) == "42"
    assert result.structured_content == {"result": 42}
    assert result.meta is not None
    assert result.meta["loopsuite/server"] == "web"


async def test_invalid_arguments_are_an_error_result_naming_the_field_exactly_as_over_rest(gateway: Gateway) -> None:
    arguments: dict[str, Any] = {"traveller": {"name": "Ada", "age": 36}, "legs": [{"from": "LHR", "when": 5}]}
    rest = await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "plan_trip", "arguments": arguments})

    async with mcp_client(gateway, BEARER) as client:
        result = await client.call_tool("plan_trip", arguments)

    assert result.is_error is True
    assert "$.legs[0].to: is required but missing" in _text(result)
    assert "$.legs[0].when: matches none of the allowed alternatives" in _text(result)
    assert _text(result) == rest.json()["content"][0]["text"]


async def test_a_tools_own_error_reaches_the_mcp_client_as_an_error_result(gateway: Gateway) -> None:
    async with mcp_client(gateway, BEARER) as client:
        result = await client.call_tool("fail", {"message": "the disk is full"})

    assert result.is_error is True
    assert "the disk is full" in _text(result)


async def test_an_unknown_tool_is_the_protocol_error_for_an_unknown_tool(gateway: Gateway) -> None:
    async with mcp_client(gateway, BEARER) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("launch_rockets", {})

    assert raised.value.code == INVALID_PARAMS
    assert 'No MCP server offers a tool named "launch_rockets".' in raised.value.message


async def test_the_deadline_header_of_an_mcp_client_bounds_its_calls(gateway: Gateway) -> None:
    async with mcp_client(gateway, {**BEARER, "X-Deadline-Ms": "300"}) as client:
        with anyio.fail_after(10):
            result = await client.call_tool("slow", {"seconds": 30})

    assert result.is_error is True
    assert 'The tool "slow" did not finish within 0.3 s' in _text(result)


async def test_an_mcp_client_that_gives_up_on_a_call_has_it_cancelled_on_the_server_behind(gateway: Gateway) -> None:
    async with mcp_client(gateway, BEARER) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("hold", {"tag": "mcp-client-gives-up"}, read_timeout_seconds=0.5)
        assert raised.value.code == REQUEST_TIMEOUT

        with anyio.fail_after(10):
            cancelled = await client.call_tool("await_hold", {"tag": "mcp-client-gives-up", "event": "cancelled"})

    assert _text(cancelled) == "mcp-client-gives-up cancelled"


async def test_the_secret_may_come_in_the_secret_header_instead_of_as_a_bearer_token(gateway: Gateway) -> None:
    async with mcp_client(gateway, {"X-MCP-Service-Secret": GATEWAY_SECRET}) as client:
        result = await client.call_tool("echo", {"text": "hi"})

    assert _text(result) == "hi"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {GATEWAY_SECRET.upper()}"}],
    ids=["none", "wrong", "wrong-case"],
)
async def test_without_the_right_secret_the_mcp_endpoint_is_401(gateway: Gateway, headers: dict[str, str]) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient(base_url=gateway.url, headers=headers) as anonymous:
        response = await anonymous.post("/mcp", json=initialize)

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == "unauthorized"
    assert GATEWAY_SECRET not in response.text
    with pytest.raises(ExceptionGroup) as raised:  # the SDK client fails to connect at all
        async with mcp_client(gateway, headers) as client:
            await client.list_tools()
    assert raised.group_contains(MCPError)


@asynccontextmanager
async def _face_only(allowed_hosts: list[str]) -> AsyncIterator[str]:
    """The MCP endpoint alone, over a registry without servers, mounted the way the service mounts it."""
    registry = ServerRegistry(parse_servers_config('{"mcpServers": {}}'))
    face = McpFace(
        ToolRouter(registry, call_timeout=5, max_chars=1000),
        secret=GATEWAY_SECRET,
        secret_header="X-MCP-Service-Secret",
        allowed_hosts=allowed_hosts,
    )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with face.run():
            yield

    async with serve_app(Starlette(routes=[Route(MCP_FACE_PATH, face)], lifespan=lifespan)) as url:
        yield url


async def test_with_allowed_hosts_a_request_for_another_host_is_refused() -> None:
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {**BEARER, "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    async with _face_only(["gateway.internal:*"]) as url, httpx.AsyncClient(base_url=url, headers=headers) as http:
        rebound = await http.post("/mcp", json=listing)  # Host: 127.0.0.1:<port>
        allowed = await http.post("/mcp", json=listing, headers={"Host": "gateway.internal:8002"})

    assert rebound.status_code == 421
    assert allowed.status_code == 200
    assert "tools" in allowed.text
