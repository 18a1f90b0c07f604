"""A long tool's progress in an agent run's event stream, through the real services.

The tools are ``trigger-long-running-operation`` of the MCP reference server
``@modelcontextprotocol/server-everything`` (npm, over stdio), which reports each step, its
``simulate-research-query``, which can only run as an MCP task, and the ``research`` task of our
own task server (``support/task_mcp_server.py``); only the LLM is scripted (a server speaking
OpenAI's Chat Completions wire format).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from suite_common.sse_parser import EventStreamParser
from support import fake_openai
from support.everything_server import everything_stdio_server
from support.stacks import AgentStack, running_stack
from support.task_mcp_server import TASK_SCRIPT

pytestmark = pytest.mark.anyio

LONG_TOOL = "trigger-long-running-operation"


@pytest.fixture(scope="module")
async def stack() -> AsyncIterator[AgentStack]:
    servers = {
        "everything": everything_stdio_server(),
        "tasks": {"command": sys.executable, "args": [str(TASK_SCRIPT)]},
    }
    async with running_stack(echo={}, servers=servers) as stack:
        yield stack


def _body(stream: bool, tools: tuple[str, ...] = (LONG_TOOL,), **extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "stream": stream,
        "tools": list(tools),
        "messages": [{"role": "user", "content": "run the long operation"}],
        **extra,
    }


async def _run_events(stack: AgentStack, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    parser = EventStreamParser()
    events: list[tuple[str, dict[str, Any]]] = []
    with anyio.fail_after(30):
        async with (
            httpx.AsyncClient(timeout=30) as http,
            http.stream("POST", f"{stack.agent_url}/api/v1/agent/run", json=body) as response,
        ):
            assert response.status_code == 200
            async for chunk in response.aiter_bytes():
                events.extend((sse.event, json.loads(sse.data)) for sse in parser.feed(chunk))
    return events


async def test_a_streamed_run_reports_the_tools_progress_before_its_result(stack: AgentStack) -> None:
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


async def test_a_non_streamed_run_calls_the_same_long_tool_and_answers_with_json(stack: AgentStack) -> None:
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


async def test_a_run_calls_a_tool_that_can_only_run_as_a_task_and_gets_its_stages_and_report(stack: AgentStack) -> None:
    research = "simulate-research-query"
    stack.llm.push(
        fake_openai.tool_calls(("call_research", research, {"topic": "tides"})),
        fake_openai.text("Here is the report."),
    )

    events = await _run_events(stack, _body(stream=True, tools=(research,)))

    kinds = [kind for kind, _ in events]
    assert kinds[-2:] == ["text", "done"]
    progress = [data["message"] for kind, data in events if kind == "tool_progress"]
    assert progress, "no stage of the research was relayed"
    assert set(progress) <= {
        "Gathering sources...",
        "Analyzing content...",
        "Synthesizing findings...",
        "Generating report...",
    }
    [result] = [data for kind, data in events if kind == "tool_result"]
    assert result["isError"] is False
    assert result["content"].startswith("# Research Report: tides")


async def test_a_run_whose_deadline_passes_during_a_task_has_the_task_cancelled_on_the_server(
    stack: AgentStack,
) -> None:
    stack.llm.push(
        fake_openai.tool_calls(
            ("call_research", "research", {"topic": "run-deadline", "steps": 200, "step_seconds": 0.1})
        ),
        fake_openai.text("Too slow."),
    )

    events = await _run_events(stack, _body(stream=True, tools=("research",), deadlineSeconds=1))

    assert events[-1][0] == "done"
    assert events[-1][1]["finishReason"] == "deadline"
    with anyio.fail_after(15):
        response = await stack.gateway.http.post(
            "/mcp/v1/tools/call-tool", json={"name": "task_log", "arguments": {"wait_for": "tasks/cancel"}}
        )
    log = response.json()["content"][0]["text"].splitlines()
    [created] = [line for line in log if line.endswith(" run-deadline")]
    assert f"tasks/cancel {created.split()[1]}" in log
