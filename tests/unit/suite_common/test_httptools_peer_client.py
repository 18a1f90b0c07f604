"""What ``HttptoolsPeerClient`` does on its own, beyond the contract both peer clients keep (test_peer_client):
its keep-alive pool (a connection the peer closed, the race of a request sent as the peer closes, the bound on
connections), HEAD, headers that would inject lines, and reading paused while the consumer lags."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
import trustme
import uvicorn

from suite_common.peer_client import HttptoolsPeerClient
from suite_common.peer_connection import PeerConnection
from support.recording_upstream import RecordingUpstream
from support.servers import serve_app

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", ("asyncio", {"use_uvloop": True})], ids=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    """Both loops: the services run on uvloop, whose transports are not asyncio's classes."""
    return request.param


@asynccontextmanager
async def _client(max_connections: int = 10) -> AsyncIterator[HttptoolsPeerClient]:
    client = HttptoolsPeerClient(connect_timeout=5, max_connections=max_connections)
    try:
        yield client
    finally:
        await client.aclose()


class _OneAnswerPerConnection:
    """A raw HTTP/1.1 server that answers the first request of each connection and keeps it open (no
    ``Connection: close``), then either closes it at once, idle (``hang_up_on_next=False``), or reads the next
    request and hangs up without answering it: the race of a request that meets the peer's close."""

    def __init__(self, *, hang_up_on_next: bool) -> None:
        self.hang_up_on_next = hang_up_on_next
        self.connections = 0
        self.requests_read = 0
        self.closed_idle = asyncio.Event()

    async def _read_request(self, reader: asyncio.StreamReader) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lengths = [line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")]
        await reader.readexactly(int(lengths[0].split(b":")[1]) if lengths else 0)
        self.requests_read += 1

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        await self._read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        if self.hang_up_on_next:
            with contextlib.suppress(asyncio.IncompleteReadError):  # the client closed it first (the test's end)
                await self._read_request(reader)
        writer.close()
        await writer.wait_closed()
        self.closed_idle.set()

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        finally:
            server.close()


async def test_a_connection_the_peer_closed_while_idle_is_not_used_again() -> None:
    server = _OneAnswerPerConnection(hang_up_on_next=False)
    with anyio.fail_after(10):
        async with server.serving() as url, _client() as client:
            assert (await client.request("POST", f"{url}/a", headers={}, content=b"{}")).content == b"ok"
            await server.closed_idle.wait()
            await anyio.wait_all_tasks_blocked()  # the client's loop has seen the peer's end of the connection
            assert (await client.request("POST", f"{url}/b", headers={}, content=b"{}")).content == b"ok"
    assert (server.connections, server.requests_read) == (2, 2)


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_an_idempotent_request_that_met_the_peers_close_is_sent_once_more_on_a_new_connection(
    method: str,
) -> None:
    server = _OneAnswerPerConnection(hang_up_on_next=True)
    with anyio.fail_after(10):
        async with server.serving() as url, _client() as client:
            assert (await client.request(method, f"{url}/a", headers={})).content == b"ok"
            assert (await client.request(method, f"{url}/b", headers={})).content == b"ok"
    assert (server.connections, server.requests_read) == (2, 3)


async def test_a_post_that_met_the_peers_close_is_not_sent_again() -> None:
    # The peer may have read it and failed before answering: a tool call must not run twice.
    server = _OneAnswerPerConnection(hang_up_on_next=True)
    with anyio.fail_after(10):
        async with server.serving() as url, _client() as client:
            assert (await client.request("POST", f"{url}/a", headers={}, content=b"{}")).content == b"ok"
            with pytest.raises(httpx.RemoteProtocolError):
                await client.request("POST", f"{url}/b", headers={}, content=b"{}")
            assert (await client.request("POST", f"{url}/c", headers={}, content=b"{}")).content == b"ok"
    assert (server.connections, server.requests_read) == (2, 3)


async def test_a_head_request_gets_the_headers_without_waiting_for_a_body() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            head = await client.request("HEAD", f"{url}/echo", headers={})
            after = await client.request("GET", f"{url}/echo", headers={})
    assert (head.status, head.headers["x-upstream"], head.content) == (201, "yes", b"")
    assert after.content == b'{"echo": true}'


async def test_calls_beyond_the_connection_bound_wait_for_a_slot_within_their_time_limit() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client(max_connections=1) as client, anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(client.request, "GET", f"{url}/slow", headers={}))
            await anyio.wait_all_tasks_blocked()  # the first call holds the one slot
            with pytest.raises(httpx.PoolTimeout):
                await client.request("GET", f"{url}/echo", headers={}, time_limit=0.2)
            upstream.release.set()
            assert (await client.request("GET", f"{url}/echo", headers={}, time_limit=5)).status == 201
    assert [path for path, _, _ in upstream.requests] == ["/slow", "/echo"]
    assert upstream.most_in_flight == 1


@pytest.mark.parametrize(("name", "value"), [("x-id", "7\r\nx-injected: 1"), ("x-id\r\nx-injected", "1")])
async def test_a_header_with_a_line_break_is_refused_unsent(name: str, value: str) -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            with pytest.raises(httpx.LocalProtocolError):
                await client.request("GET", f"{url}/echo", headers={name: value})
            with pytest.raises(httpx.LocalProtocolError):
                await client.request("GET", f"{url}/echo two", headers={})
    assert upstream.requests == []


async def test_an_https_peer_is_verified_with_the_context_given_and_its_connection_kept() -> None:
    authority = trustme.CA()
    trusting = ssl.create_default_context()
    authority.configure_trust(trusting)
    upstream = RecordingUpstream()
    with authority.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.tempfile() as pem, anyio.fail_after(10):
        config = uvicorn.Config(upstream, log_config=None, ssl_certfile=pem, ssl_keyfile=pem)
        async with serve_app(upstream, config=config) as url:
            url = url.replace("http://", "https://")
            trusted = HttptoolsPeerClient(connect_timeout=5, verify=trusting)
            untrusted = HttptoolsPeerClient(connect_timeout=5)  # the default trust store: the CA is unknown
            try:
                for _ in range(2):
                    assert (await trusted.request("GET", f"{url}/echo", headers={})).content == b'{"echo": true}'
                with pytest.raises(httpx.ConnectError):
                    await untrusted.request("GET", f"{url}/echo", headers={})
            finally:
                await trusted.aclose()
                await untrusted.aclose()
    assert len(upstream.requests) == 2
    assert len(set(upstream.clients)) == 1


class _Transport(asyncio.Transport):
    """Records what the protocol asks of it: writes, and reading paused or resumed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.reading = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.reading = False


async def test_reading_pauses_while_the_consumer_lags_and_resumes_once_it_has_read() -> None:
    connection = PeerConnection()
    transport = _Transport()
    connection.connection_made(transport)
    connection.send(b"GET / HTTP/1.1\r\n\r\n", head_only=False, deadline=None)
    connection.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    await connection.answer_head()
    connection.data_received(b"8000\r\n" + b"a" * 0x8000 + b"\r\n")
    assert transport.reading  # 32 KiB held: below the mark
    connection.data_received(b"8001\r\n" + b"b" * 0x8001 + b"\r\n")
    assert not transport.reading  # over 64 KiB held: paused
    assert await connection.next_body() == b"a" * 0x8000 + b"b" * 0x8001
    assert transport.reading
    connection.data_received(b"0\r\n\r\n")
    assert await connection.next_body() is None
    assert connection.finish()  # whole, kept alive: reusable


async def test_a_connection_whose_whole_body_came_but_was_left_unread_is_not_kept() -> None:
    """Past the buffer's high-water mark reading pauses; a caller that leaves the stream then must not hand the
    paused connection, its body unread, to the next exchange (which would wait for an answer that never comes)."""
    connection = PeerConnection()
    transport = _Transport()
    connection.connection_made(transport)
    connection.send(b"GET / HTTP/1.1\r\nHost: peer\r\n\r\n", head_only=False, deadline=None)
    body = b"x" * 100_000
    connection.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert connection.status == 200
    assert not transport.reading  # the whole body came, and reading paused for its reader

    assert connection.finish() is False


async def test_a_reset_in_a_body_without_a_length_is_a_read_error_not_its_end() -> None:
    connection = PeerConnection()
    connection.connection_made(_Transport())
    connection.send(b"GET / HTTP/1.1\r\nHost: peer\r\n\r\n", head_only=False, deadline=None)
    connection.data_received(b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"partial": ')
    assert await connection.next_body() == b'{"partial": '

    connection.connection_lost(ConnectionResetError(104, "Connection reset by peer"))

    with pytest.raises(httpx.ReadError):
        await connection.next_body()
