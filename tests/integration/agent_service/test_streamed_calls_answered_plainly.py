"""agent-service's streamed ``call-tool`` (``ToolsClient.call_tool_streamed``, a stored run's) against the real
gateway, which answers a call that sends no event before its end as plain JSON: read with the same meaning as the
JSON call's answer, errors included; a call with progress is still read as its event stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent_service.infra.peers import ToolsClient
from suite_common.deadline import Deadline
from suite_common.peer_client import HttptoolsPeerClient
from suite_common.wire import CallToolProgress, CallToolResponse
from support.library_mcp_server import build_library_server
from support.mcp_gateway import GATEWAY_SECRET, echo_http_server, running_gateway
from support.servers import serve_app

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def tools() -> AsyncIterator[ToolsClient]:
    library = build_library_server("library").streamable_http_app()
    async with (
        serve_app(library) as library_url,
        echo_http_server("echo") as echo_url,
        running_gateway({"echo": {"url": echo_url}, "library": {"url": library_url + "/mcp"}}) as gateway,
    ):
        await gateway.wait_until_ready("echo", "library")
        http = HttptoolsPeerClient(connect_timeout=5)  # agent-service's own peer client
        try:
            yield ToolsClient(http, gateway.url, secret=GATEWAY_SECRET, secret_header="X-MCP-Service-Secret")
        finally:
            await http.aclose()


class Progress:
    def __init__(self) -> None:
        self.steps: list[CallToolProgress] = []

    async def __call__(self, step: CallToolProgress) -> None:
        self.steps.append(step)


def _same_call(result: CallToolResponse) -> CallToolResponse:
    return result.model_copy(update={"duration_ms": 0})


@pytest.mark.parametrize("call_id", [None, "run-a/call-1"], ids=["without callId", "with callId"])
async def test_a_streamed_call_answered_as_json_gives_the_plain_calls_result(
    tools: ToolsClient, call_id: str | None
) -> None:
    progress = Progress()
    streamed = await tools.call_tool_streamed("echo", {"text": "hi"}, Deadline.after(20), progress, call_id=call_id)
    plain = await tools.call_tool("echo", {"text": "hi"}, Deadline.after(20))

    assert isinstance(streamed, CallToolResponse)
    assert _same_call(streamed) == _same_call(plain)
    assert streamed.content == [{"type": "text", "text": "hi"}]
    assert not streamed.is_error
    assert progress.steps == []


async def test_a_streamed_call_refused_as_json_gives_the_plain_calls_error_result(tools: ToolsClient) -> None:
    streamed = await tools.call_tool_streamed("no_such_tool", {}, Deadline.after(20), Progress(), call_id="run-a/2")
    plain = await tools.call_tool("no_such_tool", {}, Deadline.after(20))

    assert isinstance(streamed, CallToolResponse)
    assert streamed == plain
    assert streamed.is_error
    assert 'No MCP server offers a tool named "no_such_tool".' in str(streamed.content[0]["text"])


async def test_a_streamed_call_with_progress_is_still_read_as_its_event_stream(tools: ToolsClient) -> None:
    progress = Progress()
    streamed = await tools.call_tool_streamed("count_to", {"n": 2}, Deadline.after(20), progress, call_id="run-a/3")

    assert isinstance(streamed, CallToolResponse)
    assert streamed.content == [{"type": "text", "text": "counted to 2"}]
    assert [(step.progress, step.message) for step in progress.steps] == [(1, "counted 1 of 2"), (2, "counted 2 of 2")]
