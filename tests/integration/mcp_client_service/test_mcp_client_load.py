"""Many calls at once on one server, and a server busy for a while: the session carries on."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from support.mcp_gateway import GATEWAY_SECRET, echo_http_server, raw_stdio_server, running_gateway

pytestmark = pytest.mark.anyio

CALL = "/mcp/v1/tools/call-tool"


async def test_more_than_a_hundred_concurrent_calls_to_one_http_server_all_complete() -> None:
    parties = 150
    results: list[dict[str, Any]] = []
    async with echo_http_server("web") as url, running_gateway({"web": {"url": url}}) as gateway:
        await gateway.wait_until_ready("web")
        connection = gateway.registry.connections["web"]
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        headers = {"X-MCP-Service-Secret": GATEWAY_SECRET}
        async with httpx.AsyncClient(base_url=gateway.url, headers=headers, limits=limits, timeout=60) as caller:

            async def one() -> None:
                arguments = {"group": "crowd", "parties": parties}
                response = await caller.post(CALL, json={"name": "rendezvous", "arguments": arguments})
                results.append(response.json())

            # Each call returns only once all 150 are in flight on the server at the same time:
            # a pool of 100 connections would hold the rest back, and all would hang.
            with anyio.fail_after(45):
                async with anyio.create_task_group() as tg:
                    for _ in range(parties):
                        tg.start_soon(one)

    assert len(results) == parties
    assert {result["content"][0]["text"] for result in results} == {f"{parties} calls met in crowd"}
    assert connection.attempts == 1  # one session throughout


async def test_a_server_busy_with_a_long_call_keeps_its_session_though_a_probe_goes_unanswered() -> None:
    # The server reads nothing while busy, so pings sent every 0.3 s go unanswered for 3 s, far
    # beyond the 1 s a probe is given; the call in flight says the server is not gone.
    settings: dict[str, Any] = {"health_check_interval_seconds": 0.3, "list_timeout_seconds": 1.0}
    async with running_gateway({"busy": raw_stdio_server("busy")}, **settings) as gateway:
        await gateway.wait_until_ready("busy")
        connection = gateway.registry.connections["busy"]

        with anyio.fail_after(20):
            busy = await gateway.http.post(CALL, json={"name": "busy", "arguments": {"seconds": 3}})
            after = await gateway.http.post(CALL, json={"name": "echo", "arguments": {"text": "still here"}})

    assert busy.json()["content"] == [{"type": "text", "text": "done"}]
    assert busy.json()["isError"] is False
    assert after.json()["content"] == [{"type": "text", "text": "still here"}]
    assert connection.attempts == 1  # never reconnected
