"""Calls between the suite's own services: small JSON requests and SSE answers over keep-alive HTTP/1.1.

agent-service makes several such calls per round of every run. Through ``httpx.AsyncClient``,
even on ``AiohttpTransport``, each one pays for work a call to a sibling service never needs:
URL merging, cookie extraction (through ``urllib.request`` and ``http.cookiejar``), redirect and
auth handling, two layers of response objects. A py-spy profile of ``make bench`` with agent-service alone on its
core put httpx and its cookie code at about 30% of the service's CPU. ``AiohttpPeerClient`` sends
straight through one aiohttp session instead (``http_client``'s ``LazySession``, with its error
translation: the same as under the services' pooled httpx client).

``HttpxPeerClient`` offers the same calls over any ``httpx.AsyncClient``: what a test injects (a
``MockTransport``), or a deployment that must go through an HTTP proxy.

Both raise httpx's exceptions (``httpx.TimeoutException``, ``httpx.TransportError``...), so a
caller handles failures the same way whichever it was given.
"""

from __future__ import annotations

import ssl
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import aiohttp
import httpx
from yarl import URL

from suite_common.http_client import LazySession, iter_chunks, raise_translated

__all__ = ["AiohttpPeerClient", "HttpxPeerClient", "PeerClient", "PeerReply", "PeerStream"]


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
    """A call whose time has already run out is not sent (aiohttp would take a limit of 0 for no limit)."""
    if time_limit is not None and time_limit <= 0:
        raise httpx.ConnectTimeout("The call's time limit had passed before it was sent.")


class _AiohttpStream(PeerStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers = response.headers

    def chunks(self) -> AsyncIterator[bytes]:
        return iter_chunks(self._response)

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except Exception as error:
            raise_translated(error)


_NO_CEILING = float("inf")
"""aiohttp rounds a limit above ``ceil_threshold`` (5 s by default) up to the next whole second."""


class AiohttpPeerClient(PeerClient):
    """One aiohttp session (made on first use, inside the event loop) with a pool of up to
    ``max_connections``; idle connections are dropped after ``keepalive_seconds``."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        max_connections: int = 1000,
        keepalive_seconds: float = 4.0,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self._connect_timeout = connect_timeout
        self._sessions = LazySession(
            max_connections=max_connections, keepalive_seconds=keepalive_seconds, verify=verify
        )
        self._no_limit = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)

    def _timeout(self, seconds: float | None) -> aiohttp.ClientTimeout:
        if seconds is None:
            return self._no_limit
        return aiohttp.ClientTimeout(
            total=seconds, sock_connect=min(self._connect_timeout, seconds), ceil_threshold=_NO_CEILING
        )

    async def _send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> aiohttp.ClientResponse:
        session = self._sessions.session()
        try:
            return await session.request(
                method,
                URL(url, encoded=True),
                headers=headers,
                data=content,
                allow_redirects=False,
                timeout=self._timeout(time_limit),
            )
        except Exception as error:
            raise_translated(error)

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> PeerReply:
        response = await self._send(method, url, headers, content, time_limit)
        try:
            body = await response.read()
        except Exception as error:
            raise_translated(error)
        finally:
            response.release()
        return PeerReply(response.status, response.headers, body)

    @asynccontextmanager
    async def _stream(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, time_limit: float | None
    ) -> AsyncIterator[PeerStream]:
        response = await self._send(method, url, headers, content, time_limit)
        try:
            yield _AiohttpStream(response)
        finally:
            # Back to the pool when the body was read to its end; closed otherwise.
            response.release()

    async def aclose(self) -> None:
        await self._sessions.aclose()


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
