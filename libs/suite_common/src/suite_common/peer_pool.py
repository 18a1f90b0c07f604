"""The keep-alive pool under ``peer_client.HttptoolsPeerClient``: idle connections per origin, a bound on those in use.

An origin is a URL's (scheme, host, port). At most ``max_connections`` exchanges run at once (a call waits for a
slot, within its time limit); a connection whose exchange ended cleanly goes back to its origin's idle list, and
is used again most recent first, so that the oldest expire. An idle connection is closed ``keepalive_seconds``
after its last answer, by a sweep scheduled while any is idle: below the peers' own keep-alive (uvicorn's 5 s),
so that a request rarely goes out on a connection the peer is closing. One the peer closed meanwhile is skipped.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import urllib.parse
from typing import NamedTuple

import httpx

from suite_common.peer_connection import PeerConnection

__all__ = ["Origin", "PeerPool", "split_url"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


class Origin(NamedTuple):
    tls: bool
    host: str  # as connected to (an IPv6 address without its brackets)
    port: int
    authority: str  # as the Host header names it


def split_url(url: str) -> tuple[Origin, str]:
    """``url``'s origin and request target (path and query; the fragment is dropped)."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        raise httpx.UnsupportedProtocol(f"Not an absolute URL: {url!r}.")
    end = len(rest)
    for delimiter in "/?#":
        found = rest.find(delimiter, 0, end)
        if found >= 0:
            end = found
    target = rest[end:].partition("#")[0]
    return _origin(scheme.lower(), rest[:end]), target if target.startswith("/") else "/" + target


@functools.lru_cache(maxsize=64)
def _origin(scheme: str, authority: str) -> Origin:
    """Parsed once per origin: the suite's services call a handful."""
    if scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"A peer is called over http or https, not {scheme!r}.")
    try:
        parts = urllib.parse.urlsplit(f"{scheme}://{authority}")
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError as error:
        raise httpx.UnsupportedProtocol(f"Not a valid URL authority: {authority!r} ({error}).") from None
    if not parts.hostname or "@" in authority:
        raise httpx.UnsupportedProtocol(f"A peer's URL names a host and no credentials: {authority!r}.")
    return Origin(scheme == "https", parts.hostname, port, authority)


class PeerPool:
    """Connections for ``HttptoolsPeerClient``; ``verify`` as httpx's (a context, or whether to check certificates)."""

    def __init__(
        self, *, connect_timeout: float, max_connections: int, keepalive_seconds: float, verify: ssl.SSLContext | bool
    ) -> None:
        self._connect_timeout = connect_timeout
        self._keepalive_seconds = keepalive_seconds
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: dict[Origin, list[PeerConnection]] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        self.closed = False

    async def take_slot(self, deadline: float | None) -> None:
        if self.closed:
            raise RuntimeError("The client has been closed.")
        if deadline is None or not self._slots.locked():
            await self._slots.acquire()
            return
        try:
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("Every connection was in use until the call's time limit.") from None

    def idle_connection(self, origin: Origin) -> PeerConnection | None:
        """The origin's most recently used idle connection still open and not expired (the sweep may lag on a
        busy loop), if any."""
        idle = self._idle.get(origin)
        if not idle:
            return None
        expired_before = asyncio.get_running_loop().time() - self._keepalive_seconds
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.idle_since > expired_before:
                connection.reused = True
                return connection
            connection.close()
        return None

    async def connect(self, origin: Origin, deadline: float | None) -> PeerConnection:
        """A new connection, within the connect timeout and what is left of the call's time limit."""
        loop = asyncio.get_running_loop()
        timeout = self._connect_timeout if deadline is None else min(self._connect_timeout, deadline - loop.time())
        tls = self._tls_context() if origin.tls else None
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    PeerConnection, origin.host, origin.port, ssl=tls, server_hostname=origin.host if tls else None
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"No connection to {origin.authority} within {timeout:.3g} s.") from None
        except OSError as error:  # refused, unreachable, no such host, TLS handshake or certificate
            raise httpx.ConnectError(f"No connection to {origin.authority}: {error}") from error
        return connection

    def release(self, origin: Origin, connection: PeerConnection) -> None:
        """End the connection's exchange and free its slot; the connection is kept if it can carry another."""
        self._slots.release()
        if not connection.finish() or self.closed:
            connection.close()
            return
        loop = asyncio.get_running_loop()
        connection.idle_since = loop.time()
        self._idle.setdefault(origin, []).append(connection)
        if self._sweep is None:
            self._sweep = loop.call_at(connection.idle_since + self._keepalive_seconds, self._close_expired)

    def give_back_slot(self) -> None:
        """For an exchange that failed before a connection was released."""
        self._slots.release()

    def _close_expired(self) -> None:
        self._sweep = None
        loop = asyncio.get_running_loop()
        expired_before = loop.time() - self._keepalive_seconds
        oldest: float | None = None
        for idle in self._idle.values():
            fresh = 0
            while fresh < len(idle) and (idle[fresh].closed or idle[fresh].idle_since <= expired_before):
                fresh += 1  # oldest first: the expired ones lead
            for connection in idle[:fresh]:
                connection.close()
            del idle[:fresh]
            if idle and (oldest is None or idle[0].idle_since < oldest):
                oldest = idle[0].idle_since
        if oldest is not None:
            self._sweep = loop.call_at(oldest + self._keepalive_seconds, self._close_expired)

    def _tls_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            verify = self._verify
            self._ssl = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        return self._ssl

    def close(self) -> None:
        """Close the idle connections; those in use close when released. Later calls raise ``RuntimeError``."""
        self.closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
