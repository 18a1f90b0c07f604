"""A long tool's progress reaches the gateway's callers: MCP clients of ``/mcp`` and ``call-tool`` over SSE.

Behind the gateway: the MCP reference server ``@modelcontextprotocol/server-everything`` (npm,
over stdio), whose ``trigger-long-running-operation`` reports each step, and a small SDK server
(``library``, streamable HTTP) whose ``count_to`` reports progress with messages.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from mcp.client.client import ConnectMode
from mcp_types import TextContent

from mcp_client_service.calls import live_calls
from suite_common.sse import PING
from suite_common.sse_parser import EventStreamParser, ServerSentEvent
from support.everything_server import everything_stdio_server
from support.library_mcp_server import build_library_server
from support.mcp_gateway import Gateway, echo_http_server, face_client, running_gateway
from support.servers import serve_app

pytestmark = pytest.mark.anyio

LONG_TOOL = "trigger-long-running-operation"

ERAS = pytest.mark.parametrize("mode", ["auto", "legacy"], ids=["protocol 2026", "protocol 2025 (initialize)"])


class ProgressLog:
    """An SDK ``progress_callback`` that keeps what it is given."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.steps.append((progress, total, message))


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[Gateway]:
    library = build_library_server("library").streamable_http_app()
    async with (
        serve_app(library) as library_url,
        echo_http_server("echo") as echo_url,
        running_gateway(
            {
                "everything": everything_stdio_server(),
                "library": {"url": library_url + "/mcp"},
                "echo": {"url": echo_url},
            }
        ) as gateway,
    ):
        await gateway.wait_until_ready("everything", "library", "echo")
        yield gateway


@ERAS
async def test_an_mcp_client_gets_the_progress_of_server_everythings_long_running_operation(
    gateway: Gateway, mode: ConnectMode
) -> None:
    reported = ProgressLog()

    async with face_client(gateway, mode=mode) as client:
        with anyio.fail_after(20):
            result = await client.call_tool(LONG_TOOL, {"duration": 0.4, "steps": 4}, progress_callback=reported)

    assert not result.is_error
    # Every step, in order, and all of them before the result came back.
    assert reported.steps == [(1, 4, None), (2, 4, None), (3, 4, None), (4, 4, None)]


@ERAS
async def test_progress_messages_reach_the_mcp_client_as_the_server_worded_them(
    gateway: Gateway, mode: ConnectMode
) -> None:
    reported = ProgressLog()

    async with face_client(gateway, mode=mode) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("count_to", {"n": 3}, progress_callback=reported)

    block = result.content[0]
    assert isinstance(block, TextContent)
    assert block.text == "counted to 3"
    assert reported.steps == [(1, 3, "counted 1 of 3"), (2, 3, "counted 2 of 3"), (3, 3, "counted 3 of 3")]


@ERAS
async def test_the_gateway_asks_a_server_for_progress_only_when_its_client_asked_for_it(
    gateway: Gateway, mode: ConnectMode
) -> None:
    reported = ProgressLog()

    async with face_client(gateway, mode=mode) as client:
        with anyio.fail_after(20):
            unasked = await client.call_tool("progress_requested", {})
            asked = await client.call_tool("progress_requested", {}, progress_callback=reported)

    assert unasked.structured_content == {"result": False}
    assert asked.structured_content == {"result": True}


async def _sse_call(gateway: Gateway, body: dict[str, Any]) -> tuple[int, str, list[ServerSentEvent]]:
    parser = EventStreamParser()
    events: list[ServerSentEvent] = []
    with anyio.fail_after(20):
        async with gateway.http.stream(
            "POST", "/mcp/v1/tools/call-tool", json=body, headers={"Accept": "text/event-stream"}
        ) as response:
            async for chunk in response.aiter_bytes():
                events.extend(parser.feed(chunk))
    return response.status_code, response.headers["content-type"], events


async def test_call_tool_asked_for_an_event_stream_sends_progress_events_then_the_result(gateway: Gateway) -> None:
    status, content_type, events = await _sse_call(
        gateway, {"name": LONG_TOOL, "arguments": {"duration": 0.3, "steps": 3}}
    )

    assert status == 200
    assert content_type.startswith("text/event-stream")
    assert [event.event for event in events] == ["progress", "progress", "progress", "result"]
    assert [json.loads(event.data) for event in events[:3]] == [
        {"progress": 1, "total": 3},
        {"progress": 2, "total": 3},
        {"progress": 3, "total": 3},
    ]
    result = json.loads(events[3].data)
    assert result["server"] == "everything"
    assert result["isError"] is False
    assert result["content"] == [
        {"type": "text", "text": "Long running operation completed. Duration: 0.3 seconds, Steps: 3."}
    ]


async def test_progress_events_carry_the_servers_message(gateway: Gateway) -> None:
    _, _, events = await _sse_call(gateway, {"name": "count_to", "arguments": {"n": 2}})

    assert [(event.event, json.loads(event.data)) for event in events[:2]] == [
        ("progress", {"progress": 1, "total": 2, "message": "counted 1 of 2"}),
        ("progress", {"progress": 2, "total": 2, "message": "counted 2 of 2"}),
    ]
    assert events[2].event == "result"


async def test_call_tool_asked_for_the_event_stream_alone_reports_an_unknown_tool_as_an_error_event(
    gateway: Gateway,
) -> None:
    # A client that accepts only the event stream gets it, even for a call that ends before any event.
    status, _, events = await _sse_call(gateway, {"name": "no_such_tool", "arguments": {}})

    assert status == 200
    assert [event.event for event in events] == ["error"]
    error = json.loads(events[0].data)
    assert error["code"] == "tool_not_found"
    assert 'No MCP server offers a tool named "no_such_tool".' in error["message"]


def _without_duration(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key != "durationMs"}


async def _plain_call(gateway: Gateway, body: dict[str, Any]) -> httpx.Response:
    with anyio.fail_after(20):
        return await gateway.http.post("/mcp/v1/tools/call-tool", json=body)


_EITHER = "text/event-stream, application/json"
"""What agent-service asks for: the event stream, or plain JSON for a call that has no event to send."""


async def _streamed_call(gateway: Gateway, body: dict[str, Any]) -> httpx.Response:
    with anyio.fail_after(20):
        return await gateway.http.post("/mcp/v1/tools/call-tool", json=body, headers={"Accept": _EITHER})


@pytest.mark.parametrize("call_id", [None, "run-1/no-events"], ids=["without callId", "with callId"])
async def test_a_streamed_call_that_sends_no_event_before_its_result_is_answered_as_the_json_call_would_be(
    gateway: Gateway, call_id: str | None
) -> None:
    body: dict[str, Any] = {"name": "echo", "arguments": {"message": "plain"}}
    streamed = await _streamed_call(gateway, body if call_id is None else {**body, "callId": call_id})
    plain = await _plain_call(gateway, body)

    assert streamed.status_code == plain.status_code == 200
    assert streamed.headers["content-type"] == plain.headers["content-type"] == "application/json"
    assert _without_duration(streamed.json()) == _without_duration(plain.json())
    assert streamed.json()["content"] == [{"type": "text", "text": "Echo: plain"}]


async def test_a_streamed_calls_result_answered_as_json_was_taken_and_its_call_id_is_free_again(
    gateway: Gateway,
) -> None:
    body = {"name": "echo", "arguments": {"message": "once"}, "callId": "run-2/taken"}
    first = await _streamed_call(gateway, body)
    followed = await gateway.http.get("/mcp/v1/calls/run-2%2Ftaken/events", headers={"Accept": "text/event-stream"})
    again = await _streamed_call(gateway, body)

    assert first.status_code == 200
    # The JSON answer was the call's result, given to its one follower: nobody can follow the call again.
    assert followed.status_code == 404
    assert followed.json()["error"]["code"] == "call_not_found"
    assert again.status_code == 200  # not 409 call_in_progress: the call had ended
    assert again.json()["content"] == [{"type": "text", "text": "Echo: once"}]


async def test_a_streamed_call_refused_before_any_event_gets_the_json_calls_error_status_and_body(
    gateway: Gateway,
) -> None:
    body = {"name": "no_such_tool", "arguments": {}}
    streamed = await _streamed_call(gateway, body)
    plain = await _plain_call(gateway, body)

    assert streamed.status_code == plain.status_code == 404
    assert streamed.headers["content-type"] == "application/json"
    assert streamed.json() == plain.json()
    assert streamed.json()["error"]["code"] == "tool_not_found"
    assert 'No MCP server offers a tool named "no_such_tool".' in streamed.json()["error"]["message"]


async def test_a_streamed_call_naming_a_server_without_the_tool_gets_the_json_calls_409(gateway: Gateway) -> None:
    body = {"name": "echo", "arguments": {"message": "x"}, "server": "library"}
    streamed = await _streamed_call(gateway, body)
    plain = await _plain_call(gateway, body)

    assert streamed.status_code == plain.status_code == 409
    assert streamed.headers["content-type"] == "application/json"
    assert streamed.json() == plain.json()
    assert streamed.json()["error"]["code"] == "tool_server_mismatch"


async def test_a_streamed_call_silent_past_the_ping_interval_starts_its_stream_and_ends_with_a_result_event(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_calls, "START_WITHIN_SECONDS", 0.05)  # 15 s in service: proxies keep the connection
    with anyio.fail_after(20):
        async with gateway.http.stream(
            "POST",
            "/mcp/v1/tools/call-tool",
            json={"name": "slow", "arguments": {"seconds": 0.5}},
            headers={"Accept": _EITHER},
        ) as response:
            body = await response.aread()

    assert response.headers["content-type"].startswith("text/event-stream")
    assert body.startswith(PING)
    [event] = EventStreamParser().feed(body)
    assert event.event == "result"
    assert json.loads(event.data)["server"] == "echo"


async def test_call_tool_without_the_event_stream_accept_header_answers_json_as_before(gateway: Gateway) -> None:
    with anyio.fail_after(20):
        response = await gateway.http.post(
            "/mcp/v1/tools/call-tool", json={"name": LONG_TOOL, "arguments": {"duration": 0.1, "steps": 2}}
        )

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json()["content"][0]["text"].startswith("Long running operation completed.")


async def test_a_caller_that_hangs_up_on_a_streamed_call_has_the_tool_cancelled_on_the_server(gateway: Gateway) -> None:
    tag = "streamed-caller-leaves"

    async def departing_caller() -> None:
        await _sse_call(gateway, {"name": "hold", "arguments": {"tag": tag}})

    async def await_hold(event: str) -> Any:
        response = await gateway.http.post(
            "/mcp/v1/tools/call-tool", json={"name": "await_hold", "arguments": {"tag": tag, "event": event}}
        )
        return response.json()["content"]

    # The call timeout is 60 s: only the caller's departure can end the held call within the bound.
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(departing_caller)
            await await_hold("started")
            tg.cancel_scope.cancel()  # the caller goes away mid-call, closing its connection

        assert await await_hold("cancelled") == [{"type": "text", "text": f"{tag} cancelled"}]
