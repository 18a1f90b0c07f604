"""The SSRF guard for httpx: every connection goes to an address checked when it is opened.

``GuardedTransport`` is httpx's transport over ``suite_common.egress``'s guarded pool (the same
guard mcp-client-service puts under httpx2): the name is resolved and checked at each connect and
the connection goes to a checked address. Redirects are followed by ``stream_following_redirects``,
one hop at a time, each hop a new check (a pooled connection was checked when it was opened).

httpx is a dependency of the packages that import this module, not of suite_common.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpcore
import httpx

from suite_common.egress import guarded_pool
from suite_common.ssrf import EgressPolicy, Resolver, parse_http_url

__all__ = ["GuardedTransport", "guarded_client", "stream_following_redirects"]


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
        # pool over the guarded backend (request handling and error mapping stay httpx's own).
        self._pool = guarded_pool(
            httpcore,
            policy,
            resolver=resolver,
            ssl_context=ssl_context,
            limits=limits,
            http2=http2,
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
