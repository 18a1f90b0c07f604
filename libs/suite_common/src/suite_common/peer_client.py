"""Calls between the suite's own services: small JSON requests and SSE answers over keep-alive HTTP/1.1.

agent-service makes several such calls per round of every run. Through ``httpx.AsyncClient``,
even on ``AiohttpTransport``, each one pays for work a call to a sibling service never needs:
URL merging, cookie extraction (through ``urllib.request`` and ``http.cookiejar``), redirect and
auth handling, two layers of response objects: a py-spy profile of ``make bench`` put httpx and its
cookie code at about 30% of the service's CPU. Straight through one aiohttp session, aiohttp's client
was still 30% of it. ``HttptoolsPeerClient`` does only what a call to a sibling needs: an asyncio
protocol per connection (``peer_connection``, answers parsed by httptools, as uvicorn parses requests),
a keep-alive pool per origin (``peer_pool``), a time limit per exchange; about a third of aiohttp's CPU
per call (docs/performance.md).

``HttpxPeerClient`` offers the same calls over any ``httpx.AsyncClient``: what a test injects (a
``MockTransport``), or a deployment that must go through an HTTP proxy.

Both raise httpx's exceptions (``httpx.TimeoutException``, ``httpx.TransportError``...), so a
caller handles failures the same way whichever it was given.
"""

from __future__ import annotations

import asyncio
import ssl
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import httpx
from multidict import CIMultiDict

from suite_common.peer_connection import PeerConnection, request_bytes
from suite_common.peer_pool import Origin, PeerPool, split_url

__all__ = ["HttptoolsPeerClient", "HttpxPeerClient", "PeerClient", "PeerReply", "PeerStream"]


@dataclass(frozen=True, slots=True)
class PeerReply:
    """A whole answer. ``headers`` look names up case-insensitively."""

    status: int
    headers: Mapping[str, str]
    content: bytes


class PeerStream(ABC):
    """An answer whose body is read as it arrives (``chunks``) or whole (``read``)."""

    status: int
    headers: Mapping[str, str]

    @abstractmethod
    def chunks(self) -> AsyncIterator[bytes]: ...

    @abstractmethod
    async def read(self) -> bytes: ...


class PeerClient(ABC):
    """``time_limit``: seconds for the whole exchange (``None``: no limit but the caller's own cancel scope);
    a call whose limit has already run out (``<= 0``) raises ``httpx.ConnectTimeout`` unsent.

    A subclass sends: ``_request`` and ``_stream``, called only with time left."""

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        content: bytes | None = None,
        time_limit: float | None = None,
    ) -> PeerReply:
        _check_time_left(time_limit)
        return await self._request(method, url, headers, content, time_limit)

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        content: bytes | None = None,
        time_limit: float | None = None,
    ) -> AsyncIterator[PeerStream]:
        """The answer once its headers have come; leaving the block before the body's end closes the
        connection, so that the peer sees the caller go."""
        _check_time_left(time_limit)
        async with self._stream(method, url, headers, content, time_limit) as stream:
            yield stream

    @abstractmethod
    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> PeerReply: ...

    @abstractmethod
    def _stream(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> AbstractAsyncContextManager[PeerStream]: ...

    @abstractmethod
    async def aclose(self) -> None: ...


def _check_time_left(time_limit: float | None) -> None:
    """A call whose time has already run out is not sent."""
    if time_limit is not None and time_limit <= 0:
        raise httpx.ConnectTimeout("The call's time limit had passed before it was sent.")


_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


class _HttptoolsStream(PeerStream):
    def __init__(self, connection: PeerConnection, headers: CIMultiDict[str]) -> None:
        self._connection = connection
        self.status = connection.status
        self.headers = headers

    async def chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self._connection.next_body()) is not None:
            yield chunk

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])


class HttptoolsPeerClient(PeerClient):
    """Keep-alive HTTP/1.1 straight on asyncio (``peer_connection``, ``peer_pool``): up to ``max_connections``
    exchanges at once, idle connections dropped after ``keepalive_seconds``; ``verify`` as httpx's."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        max_connections: int = 1000,
        keepalive_seconds: float = 4.0,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self._pool = PeerPool(
            connect_timeout=connect_timeout,
            max_connections=max_connections,
            keepalive_seconds=keepalive_seconds,
            verify=verify,
        )

    async def _send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> tuple[Origin, PeerConnection, CIMultiDict[str]]:
        """The request sent and its answer's head come, on a connection that holds a slot of the pool."""
        origin, target = split_url(url)
        request = request_bytes(method, target, origin.authority, headers, content)
        deadline = None if time_limit is None else asyncio.get_running_loop().time() + time_limit
        await self._pool.take_slot(deadline)
        connection = self._pool.idle_connection(origin)
        try:
            while True:
                if connection is None:
                    connection = await self._pool.connect(origin, deadline)
                connection.send(request, head_only=method == "HEAD", deadline=deadline)
                try:
                    return origin, connection, await connection.answer_head()
                except httpx.TransportError:
                    # Sent again, once and on a new connection, only when it cannot have been acted on twice:
                    # the connection had served an earlier answer (so the peer may have closed it as idle just
                    # as the request went out), no byte of this answer came, and the method is idempotent. A
                    # POST is not resent: the peer may have read it and failed before answering (a tool call
                    # must not run twice); the pool's idle expiry, below the peers' keep-alive, keeps that
                    # race rare.
                    if not (connection.reused and connection.hung_up_unanswered and method in _IDEMPOTENT_METHODS):
                        raise
                    connection.finish()
                    connection = None
        except BaseException:  # cancelled, timed out, failed: the peer sees the caller go
            if connection is not None:
                connection.finish()
                connection.close()
            self._pool.give_back_slot()
            raise

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> PeerReply:
        origin, connection, answer_headers = await self._send(method, url, headers, content, time_limit)
        body = []
        try:
            while (chunk := await connection.next_body()) is not None:
                body.append(chunk)
        finally:
            self._pool.release(origin, connection)  # kept only when the body was read to its end
        return PeerReply(connection.status, answer_headers, body[0] if len(body) == 1 else b"".join(body))

    @asynccontextmanager
    async def _stream(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> AsyncIterator[PeerStream]:
        origin, connection, answer_headers = await self._send(method, url, headers, content, time_limit)
        try:
            yield _HttptoolsStream(connection, answer_headers)
        finally:
            # Back to the pool when the body was read to its end; closed otherwise.
            self._pool.release(origin, connection)

    async def aclose(self) -> None:
        self._pool.close()


class _HttpxStream(PeerStream):
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = response.headers

    async def chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.aiter_bytes():
            yield chunk

    async def read(self) -> bytes:
        return await self._response.aread()


class HttpxPeerClient(PeerClient):
    """The same calls over ``client``, which stays its owner's: ``aclose`` leaves it open."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> PeerReply:
        response = await self.client.request(
            method, url, headers=dict(headers), content=content, timeout=_httpx_timeout(self.client, time_limit)
        )
        return PeerReply(response.status_code, response.headers, response.content)

    @asynccontextmanager
    async def _stream(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> AsyncIterator[PeerStream]:
        async with self.client.stream(
            method, url, headers=dict(headers), content=content, timeout=_httpx_timeout(self.client, time_limit)
        ) as response:
            yield _HttpxStream(response)

    async def aclose(self) -> None:
        return None


def _httpx_timeout(client: httpx.AsyncClient, seconds: float | None) -> httpx.Timeout:
    """Each phase within ``seconds``: httpx has no limit for a whole exchange, so a body that trickles in
    may take longer (the callers' own deadlines bound that). The client's connect timeout is kept when
    shorter; with no limit, the client's own timeouts apply."""
    if seconds is None:
        return client.timeout
    connect = client.timeout.connect
    return httpx.Timeout(seconds, connect=seconds if connect is None else min(connect, seconds))
