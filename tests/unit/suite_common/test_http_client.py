"""The services' pooled client (httpx over aiohttp), against real loopback servers.

What the services rely on: exact requests, bodies streamed as they arrive, per-request timeouts,
failures as the httpx exceptions httpcore raises, connections closed when a caller gives up,
and the pool's limit.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
import trustme
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.tls import TLSStream

from suite_common.http_client import AiohttpTransport, PooledClient, pooled_client, send_streamed
from support.recording_upstream import RecordingUpstream
from support.servers import serve_app

pytestmark = pytest.mark.anyio

_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)
_TIMEOUT = httpx.Timeout(10, connect=5)


@asynccontextmanager
async def _client(limits: httpx.Limits = _LIMITS) -> AsyncIterator[httpx.AsyncClient]:
    async with pooled_client(timeout=_TIMEOUT, limits=limits) as client:
        yield client


async def test_a_request_arrives_exactly_as_httpx_built_it_and_the_answer_comes_back_whole() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            response = await client.post(
                f"{url}/echo?q=a%20b", content=b'{"x": 1}', headers={"content-type": "application/json", "x-id": "7"}
            )
    assert response.status_code == 201
    assert response.json() == {"echo": True}
    assert response.headers["x-upstream"] == "yes"
    assert response.http_version == "HTTP/1.1"
    path, headers, body = upstream.requests[0]
    assert (path, body) == ("/echo", b'{"x": 1}')
    sent = dict(headers)
    assert sent[b"content-type"] == b"application/json"
    assert sent[b"x-id"] == b"7"
    assert sent[b"user-agent"].startswith(b"python-httpx/")  # httpx's, not aiohttp's
    assert sent[b"content-length"] == b"8"
    assert [name for name, _ in headers].count(b"accept") == 1


async def test_a_streamed_request_body_arrives_whole() -> None:
    upstream = RecordingUpstream()

    async def parts() -> AsyncIterator[bytes]:
        for part in (b'{"a": ', b"1, ", b'"b": 2}'):
            yield part

    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            response = await client.post(f"{url}/echo", content=parts())
    assert response.status_code == 201
    assert upstream.requests[0][2] == b'{"a": 1, "b": 2}'


async def test_a_get_sends_no_content_type_and_cookies_set_upstream_are_not_sent_back_by_aiohttp() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            await client.get(f"{url}/echo")
            client.cookies.clear()  # httpx's own jar is the only one: cleared, nothing is sent
            await client.get(f"{url}/echo")
    for _, headers, _ in upstream.requests:
        names = {name for name, _ in headers}
        assert b"content-type" not in names
    assert b"cookie" not in {name for name, _ in upstream.requests[1][1]}


async def test_sequential_requests_reuse_one_connection() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            for _ in range(5):
                assert (await client.get(f"{url}/echo")).status_code == 201
    assert len(set(upstream.clients)) == 1


async def test_a_streamed_body_hands_each_event_over_as_it_arrives() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client, client.stream("GET", f"{url}/events") as response:
            lines = response.aiter_lines()
            assert await anext(lines) == "data: one"  # the second event is not sent yet
            assert upstream.first_event_sent.is_set()
            upstream.release.set()
            rest = [line async for line in lines]
    assert rest == ["", "data: two", ""]


async def test_a_read_timeout_of_one_request_is_a_read_timeout() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get(f"{url}/slow", timeout=0.2)
            upstream.release.set()
            assert (await client.get(f"{url}/echo", timeout=5)).status_code == 201


async def test_a_refused_connection_is_a_connect_error_not_a_timeout() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        with anyio.fail_after(10):
            async with _client() as client:
                with pytest.raises(httpx.ConnectError) as caught:
                    await client.get(f"http://127.0.0.1:{port}/")
    assert not isinstance(caught.value, httpx.TimeoutException)
    assert caught.value.request.url.port == port


async def test_a_server_that_hangs_up_without_answering_is_a_remote_protocol_error() -> None:
    async def hang_up(stream: SocketStream) -> None:
        async with stream:
            await stream.receive()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    with anyio.fail_after(10):
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, hang_up)
            async with _client() as client:
                with pytest.raises(httpx.RemoteProtocolError):
                    await client.get(f"http://127.0.0.1:{port}/")
            tg.cancel_scope.cancel()


@asynccontextmanager
async def _tls_hello(authority: trustme.CA) -> AsyncIterator[int]:
    """An HTTPS server on 127.0.0.1 with a certificate of ``authority``; yields its port."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)

    async def hello(stream: SocketStream) -> None:
        async with stream:
            try:
                tls = await TLSStream.wrap(stream, server_side=True, ssl_context=server_context)
                await tls.receive()
                await tls.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                await tls.aclose()
            except (ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                pass  # the client refused the certificate

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, hello)
        yield listener.extra(SocketAttribute.local_port)
        tg.cancel_scope.cancel()


async def test_a_certificate_the_client_does_not_trust_is_a_connect_error() -> None:
    with anyio.fail_after(10):
        async with _tls_hello(trustme.CA()) as port, _client() as client:  # default trust store: CA unknown
            with pytest.raises(httpx.ConnectError):
                await client.get(f"https://127.0.0.1:{port}/")


async def test_the_ssl_context_given_is_the_one_that_verifies_the_server() -> None:
    authority = trustme.CA()
    trusting = ssl.create_default_context()
    authority.configure_trust(trusting)
    with anyio.fail_after(10):
        async with (
            _tls_hello(authority) as port,
            httpx.AsyncClient(transport=AiohttpTransport(limits=_LIMITS, verify=trusting), timeout=_TIMEOUT) as client,
        ):
            response = await client.get(f"https://127.0.0.1:{port}/")
    assert (response.status_code, response.text) == (200, "ok")


async def test_a_caller_that_stops_reading_closes_the_connection_so_the_server_sees_it_go() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            async with client.stream("GET", f"{url}/hold") as response:
                assert await anext(response.aiter_raw()) == b"partial"
            await upstream.disconnected.wait()


async def test_a_cancelled_request_closes_its_connection() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            with anyio.move_on_after(0.3):
                await client.get(f"{url}/slow")
            upstream.release.set()
            assert (await client.get(f"{url}/echo")).status_code == 201
    # The cancelled request's connection was not reused: the next request came on a new one.
    assert upstream.clients[0] != upstream.clients[1]


async def test_the_pool_never_opens_more_connections_than_its_limit() -> None:
    upstream = RecordingUpstream()
    limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
    statuses: list[int] = []
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client(limits=limits) as client:

            async def call() -> None:
                statuses.append((await client.get(f"{url}/slow")).status_code)

            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(call)
                await upstream.two_in_flight.wait()
                upstream.release.set()
    assert statuses == [200] * 5
    assert upstream.most_in_flight == 2
    assert len(set(upstream.clients)) == 2  # the other three waited for, then reused, those two


async def test_send_streamed_hands_a_built_request_straight_to_the_pooled_transport() -> None:
    upstream = RecordingUpstream()
    with anyio.fail_after(10):
        async with serve_app(upstream) as url, _client() as client:
            request = client.build_request("POST", f"{url}/echo", json={"x": 1})
            response = await send_streamed(client, request)
            assert response.status_code == 201
            assert await response.aread() == b'{"echo": true}'
            await response.aclose()
    assert not client.cookies  # the client's own work per request (cookies here) was skipped
    path, headers, body = upstream.requests[0]
    assert (path, body) == ("/echo", b'{"x":1}')
    assert dict(headers)[b"user-agent"].startswith(b"python-httpx/")  # the client's headers, from build_request


async def test_send_streamed_goes_through_the_client_when_a_proxy_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    sent: list[httpx.Request] = []

    async def through_client(request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        sent.append(request)
        return httpx.Response(204)

    async with _client() as client:
        assert isinstance(client, PooledClient)
        assert client.proxied
        monkeypatch.setattr(client, "send", through_client)
        response = await send_streamed(client, client.build_request("GET", "https://example.invalid/"))
    assert response.status_code == 204
    assert len(sent) == 1


async def test_send_streamed_works_with_any_httpx_client() -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: httpx.Response(200, text="mocked")))
    async with client:
        response = await send_streamed(client, client.build_request("GET", "http://test/"))
        assert await response.aread() == b"mocked"
