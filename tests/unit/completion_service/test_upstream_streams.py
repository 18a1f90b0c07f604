"""Reading a provider's stream: the same events as httpx-sse, however the bytes are cut; the deadline and
failures of each read; the first attempt of a call made without the retry machinery."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import EventSource
from hypothesis import given, settings
from hypothesis import strategies as st

from completion_service.providers._transport import Upstream, parse_json
from suite_common.deadline import Deadline
from suite_common.errors import ApiError
from suite_common.sse_parser import EventStreamParser

_SSE_HEADERS = {"content-type": "text/event-stream"}


def _as_tuples(events: list[Any]) -> list[tuple[str, str, str, int | None]]:
    return [(event.event, event.data, event.id, event.retry) for event in events]


def _httpx_sse(body: bytes) -> list[tuple[str, str, str, int | None]]:
    # httpx-sse's synchronous reader: no event loop of its own, which another test's may hold.
    response = httpx.Response(200, headers=_SSE_HEADERS, content=body)
    return _as_tuples(list(EventSource(response).iter_sse()))


def _parsed(body: bytes, cuts: list[int]) -> list[tuple[str, str, str, int | None]]:
    parser, events, start = EventStreamParser(), [], 0
    for cut in [*sorted(set(cuts)), len(body)]:
        events += parser.feed(body[start:cut])
        start = cut
    return _as_tuples(events)


_line = st.one_of(
    st.sampled_from(["", ":comment", "event: tool", "id: 7", "id: a\0b", "retry: 300", "retry: x", "data", "other: 1"]),
    st.text(alphabet=st.sampled_from(["a", " ", ":", "é", "€", "{", "}"]), max_size=6).map(lambda text: f"data:{text}"),
)
_body = st.lists(
    st.tuples(_line, st.sampled_from(["\n", "\r\n", "\r"])),
    max_size=25,
).map(lambda lines: "".join(line + end for line, end in lines).encode())


@settings(max_examples=400, deadline=None)
@given(body=_body, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_the_parser_gives_the_events_httpx_sse_gives_however_the_bytes_are_cut(body: bytes, cuts: list[int]) -> None:
    cuts = [cut for cut in cuts if cut <= len(body)]
    expected = _httpx_sse(body)
    assert _parsed(body, cuts) == expected


def test_a_chunk_with_several_events_gives_them_all_and_keeps_the_unfinished_one() -> None:
    parser = EventStreamParser()
    events = parser.feed(b'data: {"a": 1}\n\ndata: {"b": 2}\n\nevent: end\ndata: par')
    assert [event.data for event in events] == ['{"a": 1}', '{"b": 2}']
    [last] = parser.feed(b"t\r\n\r\n")
    assert (last.event, last.data) == ("end", "part")


def test_json_that_pydantic_refuses_and_json_reads_still_parses() -> None:
    # An unpaired surrogate escape: pydantic's reader refuses it, ``json`` (which parsed every chunk before) not.
    assert parse_json('{"delta": "\\ud83d"}') == {"delta": "\ud83d"}
    assert parse_json(b'{"delta": "ok"}') == {"delta": "ok"}


# --- through Upstream -----------------------------------------------------------------------------


class _Body(httpx.AsyncByteStream):
    """A streamed body: the chunks given, then (``stall``) nothing more, as a model that stops mid-answer."""

    def __init__(self, *chunks: bytes, stall: bool = False, fail: Exception | None = None) -> None:
        self.chunks, self.stall, self.fail = chunks, stall, fail
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.fail is not None:
            raise self.fail
        if self.stall:
            await anyio.sleep_forever()

    async def aclose(self) -> None:
        self.closed = True


def _upstream(*responses: httpx.Response, seen: list[httpx.Request] | None = None) -> Upstream:
    replies = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return replies.pop(0)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler), timeout=httpx.Timeout(30, connect=5))
    return Upstream(http, provider="test", base_url="https://llm.example/v1", max_retries=2)


def _request(upstream: Upstream) -> httpx.Request:
    return upstream.http.build_request("POST", "https://llm.example/v1/chat", json={})


def _translate(status: int, content: bytes, headers: httpx.Headers) -> ApiError:
    return ApiError(status, "upstream_error", content.decode(), retryable=status == 429 or status >= 500)


async def _events(upstream: Upstream, deadline: Deadline, into: list[str]) -> None:
    response = await upstream.open(lambda: _request(upstream), _translate, deadline)
    async for event in upstream.iter_sse(response, deadline):
        into.append(event.data)


@pytest.mark.anyio
async def test_a_stream_that_stalls_after_some_events_ends_with_a_504_at_the_deadline() -> None:
    body = _Body(b'data: {"n": 1}\n\ndata: {"n": 2}\n\n', stall=True)
    upstream = _upstream(httpx.Response(200, headers=_SSE_HEADERS, stream=body))
    received: list[str] = []
    started = anyio.current_time()
    with anyio.fail_after(5), pytest.raises(ApiError) as caught:
        await _events(upstream, Deadline.after(0.3), received)
    assert received == ['{"n": 1}', '{"n": 2}']
    assert (caught.value.status, caught.value.code) == (504, "upstream_timeout")
    assert 0.25 <= anyio.current_time() - started < 2
    assert body.closed


@pytest.mark.anyio
async def test_a_connection_lost_mid_stream_is_a_503_after_the_events_before_it() -> None:
    body = _Body(b"data: one\n\n", fail=httpx.ReadError("connection reset"))
    upstream = _upstream(httpx.Response(200, headers=_SSE_HEADERS, stream=body))
    received: list[str] = []
    with anyio.fail_after(5), pytest.raises(ApiError) as caught:
        await _events(upstream, Deadline.after(5), received)
    assert received == ["one"]
    assert (caught.value.status, caught.value.code) == (503, "upstream_unavailable")
    assert body.closed


@pytest.mark.anyio
async def test_a_consumer_that_takes_its_time_between_events_is_not_cut_by_the_read_deadline() -> None:
    # The deadline bounds the reads, never the consumer's own work between two events.
    upstream = _upstream(httpx.Response(200, headers=_SSE_HEADERS, stream=_Body(b"data: a\n\n", b"data: b\n\n")))
    deadline = Deadline.after(5)
    response = await upstream.open(lambda: _request(upstream), _translate, deadline)
    received = []
    with anyio.fail_after(5):
        async for event in upstream.iter_sse(response, deadline):
            with anyio.CancelScope() as scope:  # a cancel scope of the consumer's, around its own await
                await anyio.sleep(0.01)
            assert not scope.cancelled_caught
            received.append(event.data)
    assert received == ["a", "b"]


@pytest.mark.anyio
async def test_a_compressed_stream_is_read_decoded() -> None:
    # A stream without Content-Encoding is read straight from the transport; a compressed one through httpx's decoder.
    compressed = gzip.compress(b"data: a\n\ndata: b\n\n")
    headers = {**_SSE_HEADERS, "content-encoding": "gzip"}
    upstream = _upstream(httpx.Response(200, headers=headers, stream=_Body(compressed[:9], compressed[9:])))
    received: list[str] = []
    with anyio.fail_after(5):
        await _events(upstream, Deadline.after(5), received)
    assert received == ["a", "b"]


@pytest.mark.anyio
async def test_a_first_attempt_that_succeeds_is_the_only_request() -> None:
    seen: list[httpx.Request] = []
    upstream = _upstream(httpx.Response(200, json={"ok": True}), seen=seen)
    deadline = Deadline.after(5)
    response = await upstream.open(lambda: _request(upstream), _translate, deadline)
    assert await upstream.read_json(response, deadline) == {"ok": True}
    assert len(seen) == 1


@pytest.mark.anyio
async def test_retries_after_a_failed_first_attempt_stay_bounded() -> None:
    seen: list[httpx.Request] = []
    busy = [httpx.Response(503, headers={"retry-after": "0"}, content=b"busy") for _ in range(4)]
    upstream = _upstream(*busy, seen=seen)
    with anyio.fail_after(5), pytest.raises(ApiError) as caught:
        await upstream.open(lambda: _request(upstream), _translate, Deadline.after(5))
    assert caught.value.status == 503
    assert len(seen) == 3  # the first attempt and max_retries=2 more


@pytest.mark.anyio
async def test_a_retry_after_the_first_attempt_returns_the_second_answer() -> None:
    seen: list[httpx.Request] = []
    upstream = _upstream(
        httpx.Response(429, headers={"retry-after": "0"}, content=b"slow down"),
        httpx.Response(200, content=json.dumps({"second": True}).encode()),
        seen=seen,
    )
    deadline = Deadline.after(5)
    with anyio.fail_after(5):
        response = await upstream.open(lambda: _request(upstream), _translate, deadline)
        assert await upstream.read_json(response, deadline) == {"second": True}
    assert len(seen) == 2
