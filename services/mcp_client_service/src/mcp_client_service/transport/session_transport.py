"""The transport of one session: the config resolved, the child spawned or the HTTP client opened,
and the streams the gateway watches on their way to the SDK session.

``open_transport`` builds the transport of a resolved config: a stdio child with only its
allowed environment and a bounded line reader, or an HTTP client (streamable HTTP or SSE) behind
the SSRF guard. ``WatchedTransport`` wraps it to notice when the session ends and to pass every
``tools/list`` response through the schema filter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import httpx2
from mcp.client import Transport
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage

from mcp_client_service.config.options import ConnectionOptions
from mcp_client_service.config.references import ReferenceResolver
from mcp_client_service.config.schemas import ToolListingFilter
from mcp_client_service.config.servers_file import HttpServerConfig, ServerConfig, StdioServerConfig
from mcp_client_service.failures import ServerStartError, describe_error
from mcp_client_service.transport.legacy_sse import legacy_sse_transport
from mcp_client_service.transport.ssrf_guard import check_endpoint, guarded_http_client
from mcp_client_service.transport.stdio import bounded_stdio_transport, inherited_environment

__all__ = ["StdioCallbacks", "WatchedTransport", "literal_secrets", "open_transport", "resolve_config"]

_HTTP_READ_TIMEOUT_SECONDS = 300.0
"""The SDK's own default: a server may keep a response stream open that long between events.
Calls are bounded by their own timeouts."""


def literal_secrets(config: ServerConfig) -> list[str]:
    """What an error could quote that must never leave: header and env values, URL credentials."""
    if isinstance(config, StdioServerConfig):
        return list(config.env.values())
    url = urlsplit(config.url)
    oauth = [config.auth.client_secret or ""] if config.auth is not None else []
    return [*config.headers.values(), url.password or "", url.query, url.fragment, *oauth]


def resolve_config(config: ServerConfig, options: ConnectionOptions, base_dir: Path) -> tuple[ServerConfig, list[str]]:
    """The config with its references resolved, and the values they resolved to (secrets to mask).

    Raises ``UnresolvedReferenceError``, and ``ServerStartError`` for a config that would pass a
    forbidden value (the gateway's shared secret) to the server.
    """
    if not options.resolve_references:
        _refuse_forbidden(config, options)
        return config, []
    resolver = ReferenceResolver(environ=options.environ, base_dir=base_dir)
    resolved: ServerConfig
    if isinstance(config, StdioServerConfig):
        stdio = config.model_copy(
            update={
                "args": [resolver.resolve(arg) for arg in config.args],
                "env": {key: resolver.resolve(value) for key, value in config.env.items()},
            }
        )
        resolved = stdio
    else:
        auth = config.auth
        if auth is not None:
            auth = auth.model_copy(
                update={
                    "client_id": resolver.resolve(auth.client_id) if auth.client_id else None,
                    "client_secret": resolver.resolve(auth.client_secret) if auth.client_secret else None,
                }
            )
        http = config.model_copy(
            update={
                "url": resolver.resolve(config.url),
                "headers": {key: resolver.resolve(value) for key, value in config.headers.items()},
                "auth": auth,
            }
        )
        resolved = http
    _refuse_forbidden(resolved, options)
    return resolved, resolver.values


def _refuse_forbidden(config: ServerConfig, options: ConnectionOptions) -> None:
    """``ServerStartError`` if what reaches the server holds a forbidden value (the gateway's shared secret)."""
    if isinstance(config, StdioServerConfig):
        passed = [*config.args, *config.env.values()]
    else:
        passed = [config.url, *config.headers.values()]
    for value in options.forbidden_values:
        if value and any(value in text for text in passed):
            raise ServerStartError(
                "its config would pass the gateway's own shared secret to the server, so it was not started"
            )


def _ignore(_: Any) -> None:
    return None


@dataclass(frozen=True)
class StdioCallbacks:
    """What the stdio reader tells the connection: noise skipped, a fatal breach, the child's exit, its stderr."""

    on_noise: Callable[[str], None] = _ignore
    on_fatal: Callable[[str], None] = _ignore
    on_exit: Callable[[int | None], None] = _ignore
    on_stderr: Callable[[str], None] = _ignore


def open_transport(
    config: ServerConfig, options: ConnectionOptions, callbacks: StdioCallbacks, auth: httpx2.Auth | None = None
) -> Transport:
    """The transport to a server whose config has been resolved; ``auth``: its OAuth (HTTP servers), whose own
    requests (discovery, registration, token) go through the session's guarded client."""
    if isinstance(config, StdioServerConfig):
        return _stdio_transport(config, options, callbacks)
    return _http_transport(config, options, auth)


@asynccontextmanager
async def _stdio_transport(
    config: StdioServerConfig, options: ConnectionOptions, callbacks: StdioCallbacks
) -> AsyncIterator[TransportStreams]:
    env = inherited_environment(options.environ, options.inherit_env) | dict(config.env)
    spawned = False
    try:
        async with bounded_stdio_transport(
            config.command,
            config.args,
            env=env,
            cwd=config.cwd,
            max_line_bytes=options.max_line_bytes,
            on_noise=callbacks.on_noise,
            on_fatal=callbacks.on_fatal,
            on_exit=callbacks.on_exit,
            on_stderr=callbacks.on_stderr,
        ) as streams:
            spawned = True
            yield streams
    except OSError as error:
        if spawned:
            raise
        # Under uvloop the error does not say which file was missing: the command or the cwd.
        where = f" in {config.cwd}" if config.cwd else ""
        raise ServerStartError(f'cannot start the command "{config.command}"{where}: {describe_error(error)}') from None


@asynccontextmanager
async def _http_transport(
    config: HttpServerConfig, options: ConnectionOptions, auth: httpx2.Auth | None
) -> AsyncIterator[TransportStreams]:
    if not config.url.startswith(("http://", "https://")):
        raise ServerStartError("its url, once its references are resolved, is not an http:// or https:// URL")
    policy = options.egress_for(config.url)
    await check_endpoint(config.url, policy, resolver=options.resolver)
    timeout = httpx2.Timeout(options.connect_timeout, read=_HTTP_READ_TIMEOUT_SECONDS)
    http = guarded_http_client(
        policy,
        timeout=timeout,
        headers=config.headers,
        resolver=options.resolver,
        max_connections=options.http_max_connections,
        max_response_bytes=options.max_response_bytes,
    )
    if auth is not None:
        http.auth = auth
    # One SSE event is bounded like a whole JSON answer: the SDK's 1 MiB default would end the
    # session over a legitimate 2 MB result.
    if config.transport == "sse":
        async with http, legacy_sse_transport(config.url, http, max_event_size=options.max_response_bytes) as streams:
            yield streams
        return
    async with (
        http,
        streamable_http_client(config.url, http_client=http, max_sse_event_size=options.max_response_bytes) as streams,
    ):
        yield streams


class _WatchedReadStream:
    """The transport's read stream, seen by the gateway on its way to the session.

    It notices when the session ends (the dispatcher leaves the stream at EOF: a stdio child
    exiting, a transport failing), tells ``on_message`` of every message (the server is alive
    while messages arrive) and passes ``tools/list`` responses through the listing filter, on a
    worker thread: checking a large listing must not stall the event loop.
    """

    def __init__(
        self,
        inner: ReadStream[SessionMessage | Exception],
        on_end: Callable[[], None],
        listing: ToolListingFilter,
        on_message: Callable[[], None],
    ) -> None:
        self._inner = inner
        self._on_end = on_end
        self._listing = listing
        self._on_message = on_message

    @property
    def last_context(self) -> Any:
        # The dispatcher duck-types this to carry the sender's contextvars (tracing) along.
        return getattr(self._inner, "last_context", None)

    async def _seen(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        self._on_message()
        if isinstance(item, SessionMessage) and self._listing.wants(item):
            return await anyio.to_thread.run_sync(self._listing.filter_received, item)
        return item

    async def receive(self) -> SessionMessage | Exception:
        return await self._seen(await self._inner.receive())

    async def aclose(self) -> None:
        self._on_end()
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return await self._seen(await self._inner.__anext__())

    async def __aenter__(self) -> _WatchedReadStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._on_end()
        return await self._inner.__aexit__(exc_type, exc, tb)


class _WatchedWriteStream:
    """The transport's write stream; tells the listing filter which requests are ``tools/list``."""

    def __init__(self, inner: WriteStream[SessionMessage], listing: ToolListingFilter) -> None:
        self._inner = inner
        self._listing = listing

    async def send(self, item: SessionMessage, /) -> None:
        self._listing.note_sent(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedWriteStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)


class WatchedTransport(AbstractAsyncContextManager[TransportStreams]):
    def __init__(
        self,
        inner: Transport,
        on_end: Callable[[], None],
        listing: ToolListingFilter,
        on_message: Callable[[], None] = lambda: None,
    ) -> None:
        self._inner = inner
        self._on_end = on_end
        self._listing = listing
        self._on_message = on_message

    async def __aenter__(self) -> TransportStreams:
        read_stream, write_stream = await self._inner.__aenter__()
        return (
            _WatchedReadStream(read_stream, self._on_end, self._listing, self._on_message),
            _WatchedWriteStream(write_stream, self._listing),
        )

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._on_end()
        return await self._inner.__aexit__(exc_type, exc, tb)
