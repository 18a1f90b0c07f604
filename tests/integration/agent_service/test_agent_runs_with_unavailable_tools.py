"""Runs whose tools are configured but unavailable for a while: a real stdio tool server is killed,
and the gateway waits before it restarts it.

The services are real (agent-service, completion-service, mcp-client-service on loopback) and so
are the tool servers (the echo server over stdio, a second one over streamable HTTP); only the
LLM is scripted, speaking OpenAI's wire format.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from support import fake_openai
from support.mcp_gateway import (
    WAIT_SECONDS,
    echo_http_server,
    echo_stdio_server,
)
from support.stacks import AgentStack, running_stack

pytestmark = pytest.mark.anyio

RESTART_BACKOFF: dict[str, Any] = {"restart_backoff_initial_seconds": 30.0, "restart_backoff_max_seconds": 30.0}
"""The killed server is restarted only after 30 s: it stays away for the whole test."""


@pytest.fixture
async def stack_with_a_killed_server() -> AsyncIterator[AgentStack]:
    async with (
        echo_http_server("other", tool_prefix="other_") as other_url,
        running_stack(
            echo={},
            servers={"local": echo_stdio_server("local"), "other": {"url": other_url}},
            gateway_settings=RESTART_BACKOFF,
        ) as stack,
    ):
        pid = (await stack.gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "pid"})).json()
        os.kill(pid["structuredContent"]["result"], signal.SIGKILL)
        local = stack.gateway.registry.connections["local"]
        with anyio.fail_after(WAIT_SECONDS):
            await stack.gateway.registry.wait_until(lambda _: local.state == "failed")
        yield stack


def _run(tools: list[str], *, stream: bool) -> dict[str, Any]:
    return {"model": "gpt-4o", "stream": stream, "messages": [{"role": "user", "content": "echo hi"}], "tools": tools}


async def test_a_run_naming_a_tool_whose_server_is_restarting_goes_on_and_the_call_says_when_to_retry(
    stack_with_a_killed_server: AgentStack,
) -> None:
    stack = stack_with_a_killed_server
    stack.llm.push(
        fake_openai.tool_calls(("call_1", "echo", {"text": "hi"})),
        fake_openai.text("The echo tool is restarting; try again shortly."),
    )

    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{stack.agent_url}/api/v1/agent/run", json=_run(["echo", "other_echo"], stream=False)
        )

    assert response.status_code == 200, response.text
    result = response.json()
    assert result["finishReason"] == "stop"
    tool_message = next(message for message in result["messages"] if message["role"] == "tool")
    assert tool_message["isError"] is True
    assert tool_message["content"].startswith(
        'The tool call failed: The tool "echo" cannot be called now: its MCP server "local" is not ready (failed: '
    )
    assert "It may work again in about " in tool_message["content"]
    # The model was offered both tools, and read why the call failed.
    first, second = stack.llm.requests
    assert {tool["function"]["name"] for tool in first["tools"]} == {"echo", "other_echo"}
    [fed_back] = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    assert fed_back.endswith(tool_message["content"])


async def test_a_run_whose_tools_are_all_unavailable_is_a_503_with_retry_after(
    stack_with_a_killed_server: AgentStack,
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        refused = await http.post(
            f"{stack_with_a_killed_server.agent_url}/api/v1/agent/run", json=_run(["echo"], stream=True)
        )
        unknown = await http.post(
            f"{stack_with_a_killed_server.agent_url}/api/v1/agent/run", json=_run(["nope"], stream=True)
        )

    assert refused.status_code == 503
    error = refused.json()["error"]
    assert error["code"] == "tools_unavailable"
    assert 'echo: its MCP server "local" is not ready' in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 30
    assert stack_with_a_killed_server.llm.requests == []  # refused before any LLM call
    # A name nobody configured is still the caller's mistake.
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (400, "unknown_tools")
    assert json.loads(unknown.text)["error"]["message"].count("echo") >= 1
