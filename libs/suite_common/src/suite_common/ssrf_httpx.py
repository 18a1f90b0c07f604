"""The SSRF guard for httpx: every connection goes to an address checked when it is opened.

Checking a URL and then letting the HTTP client resolve the name again leaves a gap: the DNS
answer may change in between (DNS rebinding) and the second lookup may point inside. So the
check happens *in* the connection: ``GuardedTransport`` gives httpcore a network backend
whose ``connect_tcp`` resolves the name, refuses the connection if any address is blocked, and
connects to one of the checked addresses. httpcore still starts TLS with the URL's host name
(SNI and certificate verification unchanged) and the request keeps its ``Host`` header, so
only the address lookup is replaced. Redirects are followed by ``stream_following_redirects``,
one hop at a time, each hop a new check (a pooled connection was checked when it was opened).

httpx is a dependency of the packages that import this module, not of suite_common.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager

import anyio
import httpcore
import httpx

from suite_common.ssrf import EgressBlocked, EgressPolicy, Resolver, parse_http_url, resolve_allowed

__all__ = ["GuardedNetworkBackend", "GuardedTransport", "guarded_client", "stream_following_redirects"]

# A name with many addresses is tried on its first few only, so one connect stays bounded.
_MAX_ADDRESSES_TRIED = 4
_SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, with the name resolved and checked against a policy at each connect."""

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await resolve_allowed(host, port, self._policy, resolver=self._resolver)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} took longer than {timeout} s") from exc
        last_error: Exception | None = None
        for address in addresses[:_MAX_ADDRESSES_TRIED]:
            try:
                # The checked address, never the name: a second lookup could answer differently.
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last_error = exc
        assert last_error is not None  # resolve_allowed never returns an empty list
        raise last_error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EgressBlocked(path, "a Unix socket", message="Refused: connections through Unix sockets are not allowed.")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """An ``httpx.AsyncHTTPTransport`` whose connections only reach addresses ``policy`` allows.

    A refused destination raises ``EgressBlocked`` (an unknown name ``HostNotResolved``) from
    the request, before any byte is sent. Never combine it with a proxy: the proxy would resolve.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits | None = None,
        http2: bool = False,
    ) -> None:
        ssl_context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify)
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        super().__init__(verify=ssl_context, limits=limits, http2=http2, trust_env=False)
        # httpx has no parameter for the network backend: the pool it built is replaced by the same
        # pool with the guarded backend (request and error mapping stay httpx's own).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=http2,
            network_backend=GuardedNetworkBackend(policy, resolver=resolver),
        )


def guarded_client(
    policy: EgressPolicy,
    *,
    timeout: httpx.Timeout | float,
    headers: Mapping[str, str] | None = None,
    resolver: Resolver | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over a ``GuardedTransport``; it follows no redirect by itself.

    ``trust_env=False``: a proxy from ``HTTP(S)_PROXY`` would resolve names itself, past the guard.
    Follow redirects with ``stream_following_redirects``.
    """
    transport = GuardedTransport(policy, resolver=resolver, verify=verify)
    return httpx.AsyncClient(
        transport=transport, timeout=timeout, headers=headers, follow_redirects=False, trust_env=False
    )


@asynccontextmanager
async def stream_following_redirects(
    client: httpx.AsyncClient,
    url: str,
    *,
    max_redirects: int,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[httpx.Response]:
    """The final response (body not read yet) after at most ``max_redirects`` redirects.

    Each hop must be an http(s) URL and is connected through the client's transport, so with a
    ``GuardedTransport`` every hop's address is checked. More redirects raise ``httpx.TooManyRedirects``.
    """
    request = client.build_request(method, url, headers=headers)
    for _ in range(max_redirects + 1):
        parse_http_url(str(request.url))
        response = await client.send(request, stream=True, follow_redirects=False)
        next_request = response.next_request
        if next_request is None:
            try:
                yield response
            finally:
                await response.aclose()
            return
        await response.aclose()
        request = next_request
    raise httpx.TooManyRedirects(f"More than {max_redirects} redirects.", request=request)
