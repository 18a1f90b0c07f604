"""A long tool's progress in an agent run's event stream, through the real services.

The tool is ``trigger-long-running-operation`` of the MCP reference server
``@modelcontextprotocol/server-everything`` (npm, over stdio), which reports each step; only the
LLM is scripted (a server speaking OpenAI's Chat Completions wire format).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from pydantic import SecretStr

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from suite_common.sse_parser import EventStreamParser
from support import fake_openai
from support.everything_server import everything_stdio_server
from support.fake_openai import ScriptedOpenAI
from support.mcp_gateway import GATEWAY_SECRET, running_gateway
from support.servers import serve_app

pytestmark = pytest.mark.anyio

LONG_TOOL = "trigger-long-running-operation"


@dataclass
class Stack:
    agent_url: str
    llm: ScriptedOpenAI


@pytest.fixture(scope="module")
async def stack() -> AsyncIterator[Stack]:
    llm = ScriptedOpenAI()
    async with serve_app(llm.app) as llm_url:
        completion_settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), max_retries=0
        )
        async with (
            running_gateway({"everything": everything_stdio_server()}) as gateway,
            serve_app(create_completion_app(completion_settings)) as completion_url,
        ):
            agent_settings = AgentSettings(
                completion_url=completion_url,
                mcp_client_url=gateway.url,
                mcp_service_secret=SecretStr(GATEWAY_SECRET),
                catalog_cache_seconds=0,
            )
            async with serve_app(create_agent_app(agent_settings)) as agent_url:
                await gateway.wait_until_ready("everything")
                yield Stack(agent_url, llm)


def _body(stream: bool) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "stream": stream,
        "tools": [LONG_TOOL],
        "messages": [{"role": "user", "content": "run the long operation"}],
    }


async def test_a_streamed_run_reports_the_tools_progress_before_its_result(stack: Stack) -> None:
    stack.llm.push(
        fake_openai.tool_calls(("call_long", LONG_TOOL, {"duration": 0.3, "steps": 3})),
        fake_openai.text("It finished."),
    )
    parser = EventStreamParser()
    events: list[tuple[int, str, dict[str, Any]]] = []
    with anyio.fail_after(30):
        async with (
            httpx.AsyncClient(timeout=30) as http,
            http.stream("POST", f"{stack.agent_url}/api/v1/agent/run", json=_body(stream=True)) as response,
        ):
            assert response.status_code == 200
            async for chunk in response.aiter_bytes():
                events.extend((int(sse.id), sse.event, json.loads(sse.data)) for sse in parser.feed(chunk))

    kinds = [kind for _, kind, _ in events]
    # Every step of the tool, in order, after its call and before its result.
    assert kinds[:6] == ["run_started", "tool_call", "tool_progress", "tool_progress", "tool_progress", "tool_result"]
    assert kinds[-2:] == ["text", "done"]
    assert [sequence for sequence, _, _ in events] == list(range(1, len(events) + 1))
    progress = [data for _, kind, data in events if kind == "tool_progress"]
    run_id = events[0][2]["runId"]
    assert progress == [
        {
            "type": "tool_progress",
            "runId": run_id,
            "iteration": 1,
            "toolCallId": "call_long",
            "progress": 1,
            "total": 3,
        },
        {
            "type": "tool_progress",
            "runId": run_id,
            "iteration": 1,
            "toolCallId": "call_long",
            "progress": 2,
            "total": 3,
        },
        {
            "type": "tool_progress",
            "runId": run_id,
            "iteration": 1,
            "toolCallId": "call_long",
            "progress": 3,
            "total": 3,
        },
    ]
    [result] = [data for _, kind, data in events if kind == "tool_result"]
    assert result["isError"] is False
    assert result["content"] == "Long running operation completed. Duration: 0.3 seconds, Steps: 3."


async def test_a_non_streamed_run_calls_the_same_long_tool_and_answers_with_json(stack: Stack) -> None:
    stack.llm.push(
        fake_openai.tool_calls(("call_long", LONG_TOOL, {"duration": 0.2, "steps": 2})),
        fake_openai.text("It finished."),
    )
    with anyio.fail_after(30):
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(f"{stack.agent_url}/api/v1/agent/run", json=_body(stream=False))

    assert response.status_code == 200
    result = response.json()
    assert result["finishReason"] == "stop"
    assert result["messages"][1]["content"] == "Long running operation completed. Duration: 0.2 seconds, Steps: 2."
