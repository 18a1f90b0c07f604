"""The SSRF guard in the connection: one network backend for both httpcore flavours.

Checking a URL and then letting the HTTP client resolve the name again leaves a gap: the DNS
answer may change in between (DNS rebinding) and the second lookup may point inside. So the
check happens *in* the connection: ``GuardedNetworkBackend`` is what the connection pool asks
for a socket; its ``connect_tcp`` resolves the name, refuses the connection if any address is
blocked (``suite_common.ssrf``'s rules), and connects to one of the checked addresses, never to
the name again. The pool still starts TLS with the URL's host name (SNI and certificate
verification unchanged) and the request keeps its ``Host`` header: only the lookup is replaced.

Two copies of httpcore are in use: ``httpcore`` (under ``httpx``: fetch_url) and ``httpcore2``
(under ``httpx2``, which the ``mcp`` SDK uses: mcp-client-service's gateway). They have the same
network-backend interface under different module names, and their pools call the backend's
methods without checking its class, so this one backend serves both; ``guarded_pool`` takes the
flavour's module and builds that flavour's pool, with its own exception types for connect errors.
Neither flavour is imported here: the caller passes the module it uses.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import anyio

from suite_common.ssrf import EgressBlocked, EgressPolicy, Resolver, resolve_allowed

__all__ = ["GuardedNetworkBackend", "guarded_pool"]

MAX_ADDRESSES_TRIED = 4
"""A name with many addresses is tried on its first few only, so one connect stays bounded."""

_SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


class GuardedNetworkBackend:
    """An httpcore (or httpcore2) network backend: the name resolved and checked against a policy at each connect.

    ``core`` is the flavour's module (``httpcore`` or ``httpcore2``): its ``AnyIOBackend`` opens the
    sockets, and its ``ConnectError``/``ConnectTimeout`` are what its pool expects from a failed connect.
    A refused destination raises ``EgressBlocked`` (an unknown name ``HostNotResolved``).
    """

    def __init__(
        self,
        core: ModuleType,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        inner: Any = None,
    ) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = inner if inner is not None else core.AnyIOBackend()
        self._connect_errors: tuple[type[Exception], ...] = (core.ConnectError, core.ConnectTimeout)
        self._connect_timeout: type[Exception] = core.ConnectTimeout

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> Any:
        try:
            with anyio.fail_after(timeout):
                addresses = await resolve_allowed(host, port, self._policy, resolver=self._resolver)
        except TimeoutError as exc:
            raise self._connect_timeout(f"resolving {host} took longer than {timeout} s") from exc
        last_error: Exception | None = None
        for address in addresses[:MAX_ADDRESSES_TRIED]:
            try:
                # The checked address, never the name: a second lookup could answer differently.
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except self._connect_errors as exc:
                last_error = exc
        assert last_error is not None  # resolve_allowed never returns an empty list
        raise last_error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> Any:
        raise EgressBlocked(path, "a Unix socket", message="Refused: connections through Unix sockets are not allowed.")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_pool(
    core: ModuleType,
    policy: EgressPolicy,
    *,
    ssl_context: ssl.SSLContext,
    limits: Any,
    http2: bool = False,
    resolver: Resolver | None = None,
) -> Any:
    """``core.AsyncConnectionPool`` whose connections only reach addresses ``policy`` allows.

    ``limits`` is the client's ``httpx.Limits`` or ``httpx2.Limits`` (the same fields).

    httpx and httpx2 have no parameter for the network backend: their transports build this pool
    in place of their own (request handling and error mapping stay theirs). Never give it a proxy:
    the proxy would resolve names itself, past the guard.
    """
    return core.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=http2,
        network_backend=GuardedNetworkBackend(core, policy, resolver=resolver),
    )
