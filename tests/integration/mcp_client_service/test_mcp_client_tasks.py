"""Tools that can only run as MCP tasks (``execution.taskSupport: "required"``, MCP 2025-11-25).

Behind the gateway: the MCP reference server ``@modelcontextprotocol/server-everything`` (npm,
over stdio), whose ``simulate-research-query`` is such a tool, and our own task server
(``support/task_mcp_server.py``, over stdio), whose ``research`` takes as long as it is told, ends
as it is told, and keeps a log of the task requests it received (``task_log``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from suite_common.sse_parser import EventStreamParser, ServerSentEvent
from support.everything_server import everything_stdio_server
from support.mcp_gateway import Gateway, face_client, running_gateway
from support.task_mcp_server import TASK_SCRIPT

pytestmark = pytest.mark.anyio

LIST = "/mcp/v1/tools/list-tools"
CALL = "/mcp/v1/tools/call-tool"
RESEARCH_STAGES = ["Gathering sources...", "Analyzing content...", "Synthesizing findings...", "Generating report..."]


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[Gateway]:
    servers = {
        "everything": everything_stdio_server(),
        "tasks": {"command": sys.executable, "args": [str(TASK_SCRIPT)], "callTimeoutSeconds": 20},
    }
    async with running_gateway(servers) as gateway:
        await gateway.wait_until_ready("everything", "tasks")
        yield gateway


async def _call(gateway: Gateway, name: str, arguments: dict[str, Any], **headers: str) -> dict[str, Any]:
    with anyio.fail_after(30):
        response = await gateway.http.post(CALL, json={"name": name, "arguments": arguments}, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _sse_call(gateway: Gateway, name: str, arguments: dict[str, Any]) -> list[ServerSentEvent]:
    parser = EventStreamParser()
    events: list[ServerSentEvent] = []
    with anyio.fail_after(30):
        async with gateway.http.stream(
            "POST", CALL, json={"name": name, "arguments": arguments}, headers={"Accept": "text/event-stream"}
        ) as response:
            async for chunk in response.aiter_bytes():
                events.extend(parser.feed(chunk))
    return events


def _text(result: dict[str, Any]) -> str:
    text: str = result["content"][0]["text"]
    return text


async def _task_log(gateway: Gateway, wait_for: str = "") -> list[str]:
    """What the task server received (once a line contains ``wait_for``: the server waits for it, bounded)."""
    return _text(await _call(gateway, "task_log", {"wait_for": wait_for})).splitlines()


async def _task_of(gateway: Gateway, topic: str) -> str:
    """The id of the task the server created for a ``research`` of ``topic``."""
    [created] = [line for line in await _task_log(gateway, f" {topic}") if line.endswith(f" {topic}")]
    return created.split()[1]


async def test_task_only_tools_are_listed_and_their_servers_are_ready_not_degraded(gateway: Gateway) -> None:
    tools = {tool["name"]: tool for tool in (await gateway.http.get(LIST)).json()["tools"]}
    servers = {server["name"]: server for server in (await gateway.http.get("/mcp/v1/servers")).json()["servers"]}

    assert tools["simulate-research-query"]["server"] == "everything"
    assert tools["research"]["server"] == "tasks"
    # To the gateway's callers it is a tool like any other: they call it, the gateway runs the task.
    assert "execution" not in tools["research"]
    for name in ("everything", "tasks"):
        assert (servers[name]["state"], servers[name].get("invalidTools")) == ("ready", None), servers[name]


async def test_server_everythings_research_query_runs_as_a_task_its_stages_relayed_as_progress(
    gateway: Gateway,
) -> None:
    events = await _sse_call(gateway, "simulate-research-query", {"topic": "tides"})

    *progress, last = events
    assert last.event == "result"
    result = json.loads(last.data)
    assert (result["isError"], result["server"]) == (False, "everything")
    assert result["content"][0]["text"].startswith("# Research Report: tides")
    # Its status messages (tasks/get), in order; a stage may be missed between two polls.
    assert {event.event for event in progress} == {"progress"}
    messages = [json.loads(event.data)["message"] for event in progress]
    assert messages, "no stage was relayed"
    assert messages == sorted(messages, key=RESEARCH_STAGES.index)
    assert [json.loads(event.data)["progress"] for event in progress] == list(range(1, len(progress) + 1))


async def test_a_task_only_tool_answers_a_plain_call_with_its_result(gateway: Gateway) -> None:
    result = await _call(gateway, "research", {"topic": "plain"})

    assert (result["isError"], _text(result)) == (False, "researched plain")
    task = await _task_of(gateway, "plain")
    log = await _task_log(gateway)
    assert f"tasks/result {task}" in log
    assert f"tasks/cancel {task}" not in log  # it had ended: nothing to cancel


async def test_the_servers_progress_for_a_task_reaches_the_caller_after_the_call_was_answered(
    gateway: Gateway,
) -> None:
    events = await _sse_call(gateway, "research", {"topic": "progress", "steps": 3, "step_seconds": 0.1})

    assert [(event.event, json.loads(event.data)) for event in events[:-1]] == [
        ("progress", {"progress": 1, "total": 3}),
        ("progress", {"progress": 2, "total": 3}),
        ("progress", {"progress": 3, "total": 3}),
    ]
    assert events[-1].event == "result"
    assert _text(json.loads(events[-1].data)) == "researched progress"


async def test_a_tasks_status_messages_are_relayed_as_progress_when_the_server_sends_none(gateway: Gateway) -> None:
    events = await _sse_call(
        gateway, "research", {"topic": "status", "steps": 3, "step_seconds": 0.3, "report": "status"}
    )

    assert [(event.event, json.loads(event.data)) for event in events[:-1]] == [
        ("progress", {"progress": 1, "message": "step 1 of 3"}),
        ("progress", {"progress": 2, "message": "step 2 of 3"}),
        ("progress", {"progress": 3, "message": "step 3 of 3"}),
    ]
    assert events[-1].event == "result"


async def test_a_deadline_shorter_than_the_task_gives_the_timeout_error_and_the_server_gets_tasks_cancel(
    gateway: Gateway,
) -> None:
    started = time.monotonic()
    result = await _call(
        gateway, "research", {"topic": "deadline", "steps": 100, "step_seconds": 0.1}, **{"X-Deadline-Ms": "500"}
    )
    elapsed = time.monotonic() - started

    assert result["isError"] is True
    assert _text(result) == (
        'The tool "research" did not finish within 0.5 s, so the gateway gave up on it and told the MCP server '
        '"tasks" to cancel it. It may have partly run; it was not retried.'
    )
    assert elapsed < 3  # not the task's 10 s
    task = await _task_of(gateway, "deadline")
    assert f"tasks/cancel {task}" in await _task_log(gateway, f"tasks/cancel {task}")


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
async def test_a_caller_that_hangs_up_has_the_task_cancelled_on_the_server(gateway: Gateway, accept: str) -> None:
    topic = f"hang-up-{accept.split('/')[1]}"

    async def departing_caller() -> None:
        body = {"name": "research", "arguments": {"topic": topic, "steps": 100, "step_seconds": 0.1}}
        await gateway.http.post(CALL, json=body, headers={"Accept": accept})

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            tg.start_soon(departing_caller)
            task = await _task_of(gateway, topic)
            await _task_log(gateway, f"tasks/get {task}")  # the gateway follows it
            tg.cancel_scope.cancel()  # the caller goes away mid-call, closing its connection
        log = await _task_log(gateway, f"tasks/cancel {task}")

    assert f"tasks/cancel {task}" in log


@pytest.mark.parametrize(
    ("outcome", "text"),
    [
        ("failed", 'The task running this tool failed on the MCP server "tasks": the sources could not be reached'),
        (
            "failed_quietly",
            'The task running this tool failed on the MCP server "tasks": the task failed without a result',
        ),
        ("cancelled", 'The task running this tool was cancelled on the MCP server "tasks": the server gave up'),
    ],
)
async def test_a_task_that_ends_without_a_result_answers_with_an_error_saying_why(
    gateway: Gateway, outcome: str, text: str
) -> None:
    result = await _call(gateway, "research", {"topic": outcome, "outcome": outcome})

    assert (result["isError"], _text(result)) == (True, text)


async def test_an_mcp_client_of_the_gateway_calls_a_task_only_tool_like_any_other(gateway: Gateway) -> None:
    async with face_client(gateway, mode="legacy") as client:
        with anyio.fail_after(20):
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            result = await client.call_tool("research", {"topic": "face"})

    assert tools["research"].execution is None
    assert not result.is_error
    assert result.content[0].model_dump(exclude_none=True) == {"type": "text", "text": "researched face"}
