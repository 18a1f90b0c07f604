"""The SSRF guard on the gateway's HTTP to MCP servers (the SDK's ``httpx2`` client).

The address rules are the shared core's (``suite_common.ssrf``) and so is the guard in the
connection (``suite_common.egress``, the one fetch_url's httpx client uses too), here under
httpx2's connection pool: every new connection resolves the server's name, refuses if any address
is blocked, and connects to a checked address, never to the name again (no DNS rebinding between
check and connect). TLS still verifies the URL's host name, and requests keep their ``Host``
header. The SDK follows only redirects that stay on the endpoint's origin; a redirect that needs a
new connection is checked like any other.

Before a session opens, ``check_endpoint`` checks the URL the same way, so a refused server says
why on its status at once, with the setting that would allow it.

The client's pool holds up to ``max_connections`` connections per server: at protocol 2026 every
call in flight holds one for its whole duration, and the keep-alive probe needs one too. Every
response body is bounded by ``max_response_bytes`` (``response_limits``).
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping

import httpcore2
import httpx2

from mcp_client_service.config.options import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_RESPONSE_BYTES
from mcp_client_service.transport.response_limits import limit_response
from suite_common.egress import guarded_pool
from suite_common.ssrf import EgressBlocked, EgressError, EgressPolicy, Resolver, check_url

__all__ = [
    "EgressError",
    "EgressPolicy",
    "check_endpoint",
    "guarded_http_client",
]

_MAX_IDLE_CONNECTIONS = 100
"""Connections kept open while idle, beyond which a finished one is closed."""

_HINT = (
    " Each kind of address has its switch: MCP_CLIENT_SSRF_ALLOW_LOOPBACK, MCP_CLIENT_SSRF_ALLOW_PRIVATE, "
    "MCP_CLIENT_SSRF_ALLOW_LINK_LOCAL, MCP_CLIENT_SSRF_ALLOW_MULTICAST, MCP_CLIENT_SSRF_ALLOW_CGNAT, "
    "MCP_CLIENT_SSRF_ALLOW_ULA; chosen networks are allowed by MCP_CLIENT_SSRF_ALLOWED_NETWORKS."
)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One TLS context (the system's CA certificates, verified) for every server's client: each holds its own copy
    of the certificates, about 0.85 MiB, which hundreds of tenant sessions would multiply."""
    return httpx2.create_ssl_context(trust_env=False)


class _GuardedTransport(httpx2.AsyncHTTPTransport):
    def __init__(
        self, policy: EgressPolicy, *, resolver: Resolver | None, max_connections: int, max_response_bytes: int
    ) -> None:
        limits = httpx2.Limits(
            max_connections=max_connections,
            max_keepalive_connections=min(max_connections, _MAX_IDLE_CONNECTIONS),
        )
        self._max_response_bytes = max_response_bytes
        ssl_context = _ssl_context()
        super().__init__(verify=ssl_context, limits=limits, trust_env=False)
        # httpx2 has no parameter for the network backend: its pool is replaced by the same pool
        # over the guarded backend (request handling and error mapping stay httpx2's own).
        self._pool = guarded_pool(
            httpcore2,
            policy,
            resolver=resolver,
            ssl_context=ssl_context,
            limits=limits,
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return limit_response(await super().handle_async_request(request), self._max_response_bytes)


def guarded_http_client(
    policy: EgressPolicy,
    *,
    timeout: httpx2.Timeout,
    headers: Mapping[str, str] | None = None,
    resolver: Resolver | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` whose connections reach only what ``policy`` allows.

    ``trust_env=False``: a proxy from ``HTTP(S)_PROXY`` would resolve names itself, past the guard.
    Bodies are asked for uncompressed, so that ``max_response_bytes`` bounds them as they are used.
    """
    transport = _GuardedTransport(
        policy, resolver=resolver, max_connections=max_connections, max_response_bytes=max_response_bytes
    )
    return httpx2.AsyncClient(
        transport=transport,
        headers={"Accept-Encoding": "identity", **dict(headers or {})},
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
    )


async def check_endpoint(url: str, policy: EgressPolicy, *, resolver: Resolver | None = None) -> None:
    """Raise ``EgressError`` (its message says why, and which setting allows it) if ``url`` is refused."""
    try:
        await check_url(url, policy, resolver=resolver)
    except EgressBlocked as error:
        raise EgressBlocked(error.host, error.reason, address=error.address, message=error.message + _HINT) from None
