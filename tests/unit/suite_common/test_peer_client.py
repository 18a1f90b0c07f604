"""The clients of calls between the suite's services, against a real loopback server.

Both implementations keep one contract (the agent's clients take either): exact requests, whole
answers, bodies streamed as they arrive, a time limit per call, failures as httpx's exceptions,
and a connection closed when a caller stops reading.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
import httpx
import pytest
from starlette.types import Receive, Scope, Send

from suite_common.http_client import pooled_client
from suite_common.peer_client import HttptoolsPeerClient, HttpxPeerClient, PeerClient
from support.recording_upstream import RecordingUpstream
from support.servers import serve_app

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", ("asyncio", {"use_uvloop": True})], ids=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    """Both loops: the services run on uvloop, whose transports are not asyncio's classes."""
    return request.param


@asynccontextmanager
async def _httptools_peer() -> AsyncIterator[PeerClient]:
    client = HttptoolsPeerClient(connect_timeout=5, max_connections=10)
    try:
        yield client
    finally:
        await client.aclose()


@asynccontextmanager
async def _httpx_peer() -> AsyncIterator[PeerClient]:
    async with pooled_client(timeout=httpx.Timeout(10, connect=5), limits=httpx.Limits(max_connections=10)) as http:
        yield HttpxPeerClient(http)


Peer = Callable[[], AbstractAsyncContextManager[PeerClient]]
both = pytest.mark.parametrize("peer", [_httptools_peer, _httpx_peer], ids=["httptools", "httpx"])


@both
async def test_a_request_arrives_as_sent_and_its_answer_comes_back_whole(peer: Peer) -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, peer() as client:
            reply = await client.request(
                "POST", f"{url}/echo?q=a%20b", headers={"content-type": "application/json", "x-id": "7"}, content=b"{}"
            )
    assert (reply.status, reply.content) == (201, b'{"echo": true}')
    assert reply.headers["X-Upstream"] == "yes"  # names looked up case-insensitively
    path, headers, body = upstream.requests[0]
    assert (path, body) == ("/echo", b"{}")
    sent = dict(headers)
    assert (sent[b"content-type"], sent[b"x-id"], sent[b"content-length"]) == (b"application/json", b"7", b"2")
    if peer is _httptools_peer:  # only what the caller gave: nothing asks a proxy in between to compress
        assert set(sent) == {b"host", b"content-type", b"x-id", b"content-length"}


@both
async def test_sequential_requests_reuse_one_connection_and_no_cookie_is_sent_back(peer: Peer) -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, peer() as client:
            for _ in range(3):
                assert (await client.request("GET", f"{url}/echo", headers={})).status == 201
    assert len(set(upstream.clients)) == 1
    if peer is _httptools_peer:  # httpx keeps the cookies its client is given; the suite's services set none
        assert all(b"cookie" not in dict(headers) for _, headers, _ in upstream.requests)


@both
async def test_a_streamed_answer_hands_each_chunk_over_as_it_arrives(peer: Peer) -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, peer() as client, client.stream("GET", f"{url}/events", headers={}) as s:
            assert (s.status, s.headers["content-type"]) == (200, "text/event-stream")
            chunks = s.chunks()
            assert await anext(chunks) == b"data: one\n\n"  # the second event is not sent yet
            upstream.release.set()
            rest = b"".join([chunk async for chunk in chunks])
    assert rest == b"data: two\n\n"


@both
async def test_a_caller_that_stops_reading_a_stream_closes_the_connection(peer: Peer) -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, peer() as client:
            async with client.stream("GET", f"{url}/hold", headers={}) as stream:
                assert await anext(stream.chunks()) == b"partial"
            await upstream.disconnected.wait()


@both
async def test_a_call_over_its_time_limit_is_a_timeout_and_the_client_still_works(peer: Peer) -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, peer() as client:
            with pytest.raises(httpx.TimeoutException):
                await client.request("GET", f"{url}/slow", headers={}, time_limit=0.2)
            upstream.release.set()
            assert (await client.request("GET", f"{url}/echo", headers={}, time_limit=5)).status == 201


@both
async def test_a_streamed_body_past_the_time_limit_is_a_timeout_and_the_peer_sees_the_caller_go(peer: Peer) -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, peer() as client:
            async with client.stream("GET", f"{url}/hold", headers={}, time_limit=0.3) as stream:
                chunks = stream.chunks()
                assert await anext(chunks) == b"partial"
                with pytest.raises(httpx.ReadTimeout):
                    await anext(chunks)  # the rest never comes
            await upstream.disconnected.wait()


class _FramedBodies:
    """``/sized``: a body in two parts under a Content-Length; ``/chunked``: three parts, chunked; ``/none``: 204."""

    def __init__(self) -> None:
        self.clients: list[tuple[str, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.clients.append(scope["client"])
        parts = {"/sized": [b"12345", b"67890"], "/chunked": [b"abc", b"", b"defg"], "/none": []}[scope["path"]]
        headers = [(b"content-length", b"10")] if scope["path"] == "/sized" else []
        await send({"type": "http.response.start", "status": 204 if not parts else 200, "headers": headers})
        for part in parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


@both
async def test_sized_chunked_and_empty_bodies_come_whole_on_one_kept_alive_connection(peer: Peer) -> None:
    app = _FramedBodies()
    with anyio.fail_after(10):
        async with serve_app(app) as url, peer() as client:
            sized = await client.request("GET", f"{url}/sized", headers={})
            chunked = await client.request("GET", f"{url}/chunked", headers={})
            empty = await client.request("POST", f"{url}/none", headers={}, content=b"{}")
            async with client.stream("GET", f"{url}/chunked", headers={}) as stream:
                streamed = await stream.read()
            again = await client.request("GET", f"{url}/sized", headers={})
    assert (sized.status, sized.headers["content-length"], sized.content) == (200, "10", b"1234567890")
    assert (chunked.headers["transfer-encoding"], chunked.content, streamed) == ("chunked", b"abcdefg", b"abcdefg")
    assert (empty.status, empty.content) == (204, b"")
    assert again.content == b"1234567890"
    assert len(app.clients) == 5
    assert len(set(app.clients)) == 1


@both
async def test_a_refused_connection_is_a_connect_error_not_a_timeout(peer: Peer) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        with anyio.fail_after(10):
            async with peer() as client:
                with pytest.raises(httpx.ConnectError) as caught:
                    await client.request("GET", f"http://127.0.0.1:{port}/", headers={})
    assert not isinstance(caught.value, httpx.TimeoutException)


async def test_a_cancelled_call_closes_its_connection() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _httptools_peer() as client:
            with anyio.move_on_after(0.3):
                await client.request("GET", f"{url}/slow", headers={})
            upstream.release.set()
            assert (await client.request("GET", f"{url}/echo", headers={})).status == 201
    assert upstream.clients[0] != upstream.clients[1]  # the cancelled call's connection was not reused


@both
async def test_a_call_whose_time_limit_has_run_out_is_not_sent(peer: Peer) -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, peer() as client:
            with pytest.raises(httpx.ConnectTimeout):
                await client.request("GET", f"{url}/slow", headers={}, time_limit=0.0)
            with pytest.raises(httpx.ConnectTimeout):
                async with client.stream("GET", f"{url}/events", headers={}, time_limit=-1.0):
                    pass
    assert upstream.requests == []


async def test_a_closed_client_refuses_calls_instead_of_opening_a_new_pool() -> None:
    async with _httptools_peer() as client:
        await client.aclose()
        with pytest.raises(RuntimeError):
            await client.request("GET", "http://127.0.0.1:9/", headers={})
