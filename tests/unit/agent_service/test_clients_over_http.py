"""agent-service's client of completion-service over the production peer client and a real loopback server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from starlette.types import Receive, Scope, Send

from agent_service.core.errors import UpstreamError
from agent_service.infra.peers import CompletionClient
from suite_common import wire
from suite_common.deadline import Deadline
from suite_common.peer_client import HttptoolsPeerClient
from suite_common.sse import encode_event
from suite_common.wire import CompletionDone, CompletionRequest, Message, ReasoningDelta, TextDelta, Usage, dump
from support.servers import serve_app

pytestmark = pytest.mark.anyio

_DONE = CompletionDone(finish_reason="stop", usage=Usage(input_tokens=3, output_tokens=2), model="m", provider="p")


_END_AFTER_DONE_SECONDS = 0.05
"""completion-service ends its body a moment after ``done`` (it records the call first). The fake holds the
end back that long, or until the client hangs up: a client that stopped reading at ``done`` leaves at once."""


class _StreamingCompletions:
    """Streams "Hello world" as completion-service does; ``fail_after_done`` breaks the body after ``done``."""

    def __init__(self, *, fail_after_done: bool = False) -> None:
        self.fail_after_done = fail_after_done
        self.clients: list[tuple[str, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        self.clients.append(scope["client"])
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for event in (TextDelta(delta="Hello "), TextDelta(delta="world"), _DONE):
            body = encode_event(dump(event), event=event.type)
            await send({"type": "http.response.body", "body": body, "more_body": True})
        with anyio.move_on_after(_END_AFTER_DONE_SECONDS):
            if (await receive())["type"] == "http.disconnect":
                return  # the client left before the end: its connection cannot go back to the pool
        if self.fail_after_done:
            raise RuntimeError("the server fails after done")  # uvicorn cuts the chunked body short
        await send({"type": "http.response.body", "body": b""})


@asynccontextmanager
async def _client(app: _StreamingCompletions) -> AsyncIterator[CompletionClient]:
    peer = HttptoolsPeerClient(connect_timeout=5)
    try:
        async with serve_app(app) as url:
            yield CompletionClient(peer, url)
    finally:
        await peer.aclose()


async def _turn(client: CompletionClient, deltas: list[str]) -> str | None:
    async def on_delta(delta: TextDelta | ReasoningDelta) -> None:
        deltas.append(delta.delta)

    request = CompletionRequest(model="m", messages=[Message(role="user", content="hi")])
    response = await client.complete(request, Deadline.after(10), on_delta)
    return response.message.text


async def test_streamed_turns_reuse_one_connection() -> None:
    app = _StreamingCompletions()
    deltas: list[str] = []
    with anyio.fail_after(10):
        async with _client(app) as client:
            for _ in range(3):
                assert await _turn(client, deltas) == "Hello world"
    assert deltas == ["Hello ", "world"] * 3
    assert len(app.clients) == 3
    assert len(set(app.clients)) == 1  # read to the end of each body, so the connection went back to the pool


async def test_a_stream_that_breaks_after_done_still_gives_the_whole_turn() -> None:
    app = _StreamingCompletions(fail_after_done=True)
    deltas: list[str] = []
    with anyio.fail_after(10):
        async with _client(app) as client:
            assert await _turn(client, deltas) == "Hello world"
            assert await _turn(client, deltas) == "Hello world"  # on a new connection: the broken one was closed
    assert deltas == ["Hello ", "world"] * 2


@pytest.mark.parametrize("name", ["m" * (wire.MAX_MODEL_NAME_CHARS + 1), "gpt-4o\r\nX-Injected: 1"])
async def test_a_model_name_that_cannot_go_into_a_url_is_a_400_without_asking(name: str) -> None:
    # Whichever front it came through (the OpenAI front's request model does not bound it).
    app = _StreamingCompletions()
    async with _client(app) as client:
        with pytest.raises(UpstreamError) as caught:
            await client.check_model(name, Deadline.after(5))
    assert (caught.value.status, caught.value.code) == (400, "invalid_request")
    assert caught.value.message.startswith("model: ")
    assert app.clients == []


async def test_a_model_route_that_cannot_be_read_is_a_bad_upstream_response() -> None:
    app = _StreamingCompletions()  # answers 200 with a completion stream, not a ResolvedModel
    async with _client(app) as client:
        with pytest.raises(UpstreamError) as caught:
            await client.check_model("m", Deadline.after(5))
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")
    assert caught.value.message == "completion-service sent a malformed model route"
