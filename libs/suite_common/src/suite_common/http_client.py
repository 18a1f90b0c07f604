"""The services' outbound HTTP client: httpx's API over aiohttp's connection pool.

httpx's own pool (httpcore) rescans every connection for every request: at a few dozen
concurrent requests it costs milliseconds of CPU per request and collapses (py-spy profiles of
``make bench``: ~46% of agent-service's CPU at 256 concurrent runs). aiohttp's pool does the same
work in constant time. Keeping httpx as the API means providers, ``httpx-sse`` and the tests
that inject ``httpx.AsyncClient(transport=httpx.MockTransport(...))`` stay as they are.

``AiohttpTransport`` is in the spirit of the ``httpx-aiohttp`` package, but translates aiohttp's
failures into the httpx exceptions httpcore would raise (httpx-aiohttp 0.2 reports a refused
connection, a TLS failure or a server that hung up as ``ConnectTimeout``, and lets others escape as
aiohttp exceptions), sends exactly the headers httpx built, and keeps no cookies of its own.

The suite's one way to open an aiohttp session is ``LazySession``, and its one translation of aiohttp's
failures ``translated_error`` (``raise_translated``); ``peer_client``'s own client of the calls between the
services raises the same httpx exceptions for the same failures.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import aiohttp
import httpx
from yarl import URL

__all__ = [
    "AiohttpTransport",
    "LazySession",
    "PooledClient",
    "iter_chunks",
    "pooled_client",
    "raise_translated",
    "send_streamed",
    "translated_error",
]

_AUTO_HEADERS = ("Accept", "Accept-Encoding", "Content-Type", "User-Agent")
"""aiohttp adds these when a request lacks them; the caller (httpx, or a peer call) already chose, so it
adds none: no Accept-Encoding (nothing in between compresses an answer that is read undecoded), no
User-Agent, no guessed Content-Type."""


def translated_error(error: Exception) -> httpx.TransportError | None:
    """The httpx exception httpcore would raise for an aiohttp failure (most specific class first)."""
    message = str(error) or type(error).__name__
    if isinstance(error, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(error, aiohttp.ServerTimeoutError):  # SocketTimeoutError: no byte within the read timeout
        return httpx.ReadTimeout(message)
    if isinstance(error, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        return httpx.ProxyError(message)
    if isinstance(error, aiohttp.ClientConnectorError):  # refused, DNS, TLS handshake or certificate
        return httpx.ConnectError(message)
    if isinstance(error, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        # No response, a body cut short, or bytes that are not HTTP: httpcore's RemoteProtocolError.
        return httpx.RemoteProtocolError(message)
    if isinstance(error, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return httpx.UnsupportedProtocol(message)
    if isinstance(error, aiohttp.ClientOSError):  # reset by peer, broken pipe
        return httpx.ReadError(message)
    if isinstance(error, aiohttp.ClientConnectionError):
        return httpx.ConnectError(message)
    if isinstance(error, aiohttp.ClientError):
        return httpx.TransportError(message)
    if isinstance(error, TimeoutError):
        return httpx.ReadTimeout(message)
    return None


def raise_translated(error: Exception) -> NoReturn:
    """Raise ``error`` as the httpx exception httpcore would raise, or as it is when there is none."""
    translated = translated_error(error)
    if translated is None:
        raise error
    raise translated from error


async def iter_chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive (SSE), failures as httpx exceptions."""
    try:
        async for chunk in response.content.iter_any():
            yield chunk
    except Exception as error:
        raise_translated(error)


class LazySession:
    """The one way the suite opens an aiohttp session: made on first use (inside the event loop, which
    aiohttp requires), pooled up to ``max_connections`` (0: no limit), idle connections dropped after
    ``keepalive_seconds``; no cookies, no headers of its own, bodies left as they came, no proxies
    from the environment. ``session()`` after ``aclose()`` raises ``RuntimeError``."""

    __slots__ = ("_closed", "_keepalive_seconds", "_max_connections", "_session", "_ssl")

    def __init__(self, *, max_connections: int, keepalive_seconds: float, verify: ssl.SSLContext | bool) -> None:
        self._max_connections = max_connections
        self._keepalive_seconds = keepalive_seconds
        self._ssl = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is not None:
            return session
        if self._closed:
            raise RuntimeError("The client has been closed.")
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, keepalive_timeout=self._keepalive_seconds, ssl=self._ssl
        )
        self._session = session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),  # the suite's peers set no cookies; httpx keeps its own
            skip_auto_headers=_AUTO_HEADERS,
            auto_decompress=False,
            trust_env=False,
        )
        return session

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    def __aiter__(self) -> AsyncIterator[bytes]:
        return iter_chunks(self._response)

    async def aclose(self) -> None:
        # Back to the pool when the body was read to its end; closed otherwise (cancelled, abandoned),
        # so that the server sees the caller go.
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """Sends httpx requests through one ``aiohttp.ClientSession``, made on first use (inside the loop).

    Timeouts come from each request (httpx's ``Timeout``): ``connect`` bounds the TCP and TLS
    connect, ``read`` the wait for each chunk, ``pool`` the wait for a free connection (with the
    connect inside it). aiohttp has no write timeout: a request body goes to the socket's buffer.
    """

    def __init__(self, *, limits: httpx.Limits, verify: ssl.SSLContext | bool = True) -> None:
        # httpx already handled redirects, cookies, decompression, proxies and headers.
        keepalive = limits.keepalive_expiry if limits.keepalive_expiry is not None else 5.0
        self._sessions = LazySession(
            max_connections=limits.max_connections or 0, keepalive_seconds=keepalive, verify=verify
        )

    @staticmethod
    def _timeout(timeouts: dict[str, float | None]) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=None,
            sock_connect=timeouts.get("connect"),
            sock_read=timeouts.get("read"),
            connect=timeouts.get("pool"),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = self._sessions.session()
        try:
            body: bytes | httpx.AsyncByteStream | None = request.content or None
        except httpx.RequestNotRead:  # a streamed body: aiohttp frames it itself
            body = request.stream if isinstance(request.stream, httpx.AsyncByteStream) else None
            request.headers.pop("transfer-encoding", None)
        try:
            response = await session.request(
                request.method,
                URL(str(request.url), encoded=True),
                headers=request.headers.multi_items(),
                data=body,
                allow_redirects=False,
                timeout=self._timeout(request.extensions.get("timeout", {})),
            )
        except Exception as error:
            raise_translated(error)
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode("ascii", "replace")
        return httpx.Response(
            response.status,
            headers=list(response.raw_headers),
            stream=_ResponseStream(response),
            extensions=extensions,
        )

    async def aclose(self) -> None:
        await self._sessions.aclose()


class PooledClient(httpx.AsyncClient):
    """What ``pooled_client`` makes: an ``httpx.AsyncClient`` on ``AiohttpTransport`` whose requests
    ``send_streamed`` may hand straight to that transport."""

    def __init__(self, *, timeout: httpx.Timeout, limits: httpx.Limits) -> None:
        self.aiohttp_transport = AiohttpTransport(limits=limits)
        super().__init__(timeout=timeout, limits=limits, transport=self.aiohttp_transport)
        self.proxied = any(scheme != "no" for scheme in urllib.request.getproxies())
        """Proxies are named in the environment: httpx routes some URLs to transports of its own."""


def pooled_client(*, timeout: httpx.Timeout, limits: httpx.Limits) -> PooledClient:
    """A service's one pooled client, on ``AiohttpTransport``. Proxies named in the environment still
    apply (httpx mounts its own transport for the URLs they cover)."""
    return PooledClient(timeout=timeout, limits=limits)


async def send_streamed(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    """``client.send(request, stream=True)``, less the client's own work per request.

    For a ``PooledClient`` without proxies, ``request`` (built by ``client.build_request``, so with
    the client's headers and timeouts) goes straight to the transport: no cookie extraction
    (through ``urllib.request`` and ``http.cookiejar``), redirect, auth or event-hook handling, none
    of which a call to an LLM API uses; ``make bench``'s profiles put them at about 15% of
    completion-service's CPU. The response is not bound to the client (``response.request`` is
    unset): read it, then ``aclose`` it, as a streamed response from ``send``.
    """
    if isinstance(client, PooledClient) and not client.proxied:
        return await client.aiohttp_transport.handle_async_request(request)
    return await client.send(request, stream=True)
