"""SSE framing and the producer-driven event stream response."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from starlette.responses import JSONResponse
from starlette.types import Message

from suite_common.sse import PING, EventStreamResponse, encode_event, encode_model_event
from suite_common.wire import CompletionDone, StreamError, TextDelta, dump


def test_an_event_carries_its_id_name_and_data() -> None:
    assert encode_event('{"a": 1}', event="text", id=3) == b'id: 3\nevent: text\ndata: {"a": 1}\n\n'


def test_multi_line_data_becomes_one_data_line_each() -> None:
    assert encode_event("one\ntwo") == b"data: one\ndata: two\n\n"


def test_empty_data_is_still_a_complete_frame() -> None:
    assert encode_event("") == b"data: \n\n"


def test_only_cr_and_lf_cut_data_into_lines_so_json_with_a_raw_line_separator_arrives_whole() -> None:
    # JSON leaves U+2028 raw inside strings; SSE does not end a line there, so neither may we.
    assert (
        encode_event('{"delta": "a\u2028b"}', event="text") == 'event: text\ndata: {"delta": "a\u2028b"}\n\n'.encode()
    )
    assert encode_event("one\r\ntwo\rthree\n") == b"data: one\ndata: two\ndata: three\ndata: \n\n"


@pytest.mark.parametrize(
    "model",
    [
        TextDelta(delta='line one\nline two\r\u2028 "quoted" é'),
        CompletionDone(finish_reason="stop", model="m", provider="p"),  # its None warnings left out
        StreamError(code="upstream_timeout", message="slow", retryable=True),
    ],
)
def test_a_model_encoded_in_one_step_is_the_frame_of_its_dumped_json(
    model: TextDelta | CompletionDone | StreamError,
) -> None:
    assert encode_model_event(model, model.type) == encode_event(dump(model), event=model.type)


class FakeConnection:
    """The ASGI side of one HTTP connection, recording what the response sends."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.disconnect = anyio.Event()
        self.first_body = anyio.Event()

    async def receive(self) -> Message:
        await self.disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body":
            self.first_body.set()

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


class PingWatching(FakeConnection):
    """A connection that says when it was sent a keep-alive ping."""

    def __init__(self) -> None:
        super().__init__()
        self.pinged = anyio.Event()

    async def send(self, message: Message) -> None:
        await super().send(message)
        if message.get("body") == PING:
            self.pinged.set()


@pytest.mark.anyio
async def test_the_stream_sends_what_the_producer_emits_then_ends() -> None:
    async def producer(emit: Any) -> None:
        await emit(encode_event("1"))
        await emit(encode_event("2"))

    connection = FakeConnection()
    with anyio.fail_after(5):
        await EventStreamResponse(producer)({"type": "http"}, connection.receive, connection.send)
    assert connection.sent[0]["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in connection.sent[0]["headers"]
    assert connection.bodies() == [b"data: 1\n\n", b"data: 2\n\n", b""]
    assert connection.sent[-1]["more_body"] is False


@pytest.mark.anyio
async def test_a_client_disconnect_cancels_the_producer() -> None:
    cancelled = anyio.Event()

    async def producer(emit: Any) -> None:
        await emit(encode_event("started"))
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    connection = FakeConnection()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            response = EventStreamResponse(producer)
            tg.start_soon(response.__call__, {"type": "http"}, connection.receive, connection.send)
            await connection.first_body.wait()
            connection.disconnect.set()
            await cancelled.wait()
    assert cancelled.is_set()


@pytest.mark.anyio
async def test_a_silent_producer_gets_keep_alive_pings() -> None:
    connection = PingWatching()

    async def producer(emit: Any) -> None:
        await connection.pinged.wait()
        await emit(encode_event("after the ping"))

    with anyio.fail_after(5):
        await EventStreamResponse(producer, ping_interval=0.05)({"type": "http"}, connection.receive, connection.send)
    assert connection.bodies()[:2] == [PING, b"data: after the ping\n\n"]


@pytest.mark.anyio
async def test_events_emitted_from_several_tasks_at_once_each_reach_the_client_whole() -> None:
    class SlowWrites(FakeConnection):
        """A client whose writes wait for the network in the middle, as a flow-controlled socket does."""

        async def send(self, message: Message) -> None:
            self.sent.append({"type": "write.begin", "body": message.get("body")})
            await anyio.sleep(0.001)
            self.sent.append({"type": "write.end", "body": message.get("body")})

    async def producer(emit: Any) -> None:
        # As the agent loop does with the results of parallel tool calls.
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(emit, encode_event(str(n)))

    connection = SlowWrites()
    with anyio.fail_after(5):
        await EventStreamResponse(producer)({"type": "http"}, connection.receive, connection.send)
    writes = [(m["type"], m["body"]) for m in connection.sent if m["type"].startswith("write")]
    # Every write ends before the next begins: no event is cut by another.
    assert [kind for kind, _ in writes] == ["write.begin", "write.end"] * (len(writes) // 2)
    assert sorted(body for kind, body in writes if kind == "write.end" and body) == [
        b"data: 0\n\n",
        b"data: 1\n\n",
        b"data: 2\n\n",
    ]


@pytest.mark.anyio
async def test_a_ping_that_finds_the_client_gone_ends_the_stream_quietly() -> None:
    cancelled = anyio.Event()

    class Gone(FakeConnection):
        async def send(self, message: Message) -> None:
            if message.get("body") == PING:
                raise OSError("the client has gone")
            await super().send(message)

    async def producer(emit: Any) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    connection = Gone()
    with anyio.fail_after(5):
        await EventStreamResponse(producer, ping_interval=0.01)({"type": "http"}, connection.receive, connection.send)
    assert cancelled.is_set()
    # No end-of-body message to a client that is not there.
    assert connection.bodies() == []


@pytest.mark.anyio
async def test_a_deferred_stream_that_sent_nothing_may_answer_with_an_error_status_instead() -> None:
    async def producer(_: Any) -> Any:
        return JSONResponse({"error": {"code": "rate_limited", "message": "slow down"}}, status_code=429)

    connection = FakeConnection()
    with anyio.fail_after(5):
        await EventStreamResponse(producer, defer_start=True)({"type": "http"}, connection.receive, connection.send)
    assert connection.sent[0]["status"] == 429
    assert b"rate_limited" in connection.bodies()[0]


@pytest.mark.anyio
async def test_a_deferred_stream_starts_with_its_first_event_and_sends_no_ping_before() -> None:
    async def producer(emit: Any) -> Any:
        await anyio.sleep(0.2)  # several ping intervals of silence before the first event
        await emit(encode_event("first"))
        return JSONResponse({}, status_code=500)  # too late: the stream has started

    connection = FakeConnection()
    with anyio.fail_after(5):
        await EventStreamResponse(producer, ping_interval=0.02, defer_start=True)(
            {"type": "http"}, connection.receive, connection.send
        )
    assert connection.sent[0]["status"] == 200
    assert connection.bodies() == [b"data: first\n\n", b""]


@pytest.mark.anyio
async def test_a_deferred_stream_once_started_gets_keep_alive_pings_while_silent() -> None:
    connection = PingWatching()

    async def producer(emit: Any) -> None:
        await emit(encode_event("first"))
        await connection.pinged.wait()
        await emit(encode_event("after the ping"))

    with anyio.fail_after(5):
        await EventStreamResponse(producer, ping_interval=0.05, defer_start=True)(
            {"type": "http"}, connection.receive, connection.send
        )
    assert connection.bodies() == [b"data: first\n\n", PING, b"data: after the ping\n\n", b""]
