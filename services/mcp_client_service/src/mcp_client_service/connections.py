"""One supervised MCP session per configured server.

A ``ServerConnection``'s ``run()`` is its supervisor: it connects (spawning a stdio child or
opening a streamable HTTP session), lists the server's tools to the last page, publishes them,
then keeps the session open until it ends; whenever connecting fails or the session ends it
records why and reconnects after a bounded exponential backoff.

``mcp.Client`` must be entered and exited in one task, so the supervisor owns it. Request
handlers call ``call_tool`` from their own tasks: JSON-RPC multiplexes concurrent calls over the
one session.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client import Transport
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST, CallToolResult, Implementation, Tool

from mcp_client_service.config import HttpServerConfig, ServerConfig, StdioServerConfig
from mcp_client_service.redaction import redact, secret_forms
from suite_common.logging import get_logger

__all__ = [
    "Backoff",
    "ServerConnection",
    "ServerStartError",
    "ServerState",
    "ServerUnavailableError",
    "describe_error",
]

_log = get_logger("mcp_client_service.connections")

ServerState = Literal["connecting", "ready", "failed"]

_CLIENT_INFO = Implementation(name="mcp-client-service", version="0.1.0")

_HTTP_READ_TIMEOUT_SECONDS = 300.0
"""The SDK's own default: a server may keep a response stream open that long between events.
Calls are bounded by their own timeouts."""

_MAX_TOOL_PAGES = 1_000
"""A server that pages forever is cut off here (and by the list timeout, whichever comes first)."""


class ServerStartError(Exception):
    """A stdio server's command could not be started; the message names it."""


class ServerUnavailableError(Exception):
    """The server has no open session right now; the message says what state it is in and why."""


@dataclass(frozen=True)
class Backoff:
    """Delays between reconnection attempts: ``initial`` doubling up to ``maximum``.

    A session that stayed up at least ``maximum`` seconds was healthy, so the next failure
    starts again from ``initial``.
    """

    initial: float = 0.5
    maximum: float = 30.0

    def next(self, delay: float) -> float:
        return min(delay * 2, self.maximum)


def describe_error(error: BaseException) -> str:
    """A one-line reason for a log line or a status page: the innermost real errors, by type."""
    if isinstance(error, BaseExceptionGroup):
        leaves = [describe_error(inner) for inner in error.exceptions]
        return "; ".join(dict.fromkeys(leaves))  # keep order, drop repeats
    if isinstance(error, ServerStartError):
        return str(error)
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _configured_secrets(config: ServerConfig) -> list[str]:
    """What an error could quote that must never leave: header and env values, URL credentials."""
    if isinstance(config, StdioServerConfig):
        return secret_forms(config.env.values())
    url = urlsplit(config.url)
    return secret_forms([*config.headers.values(), url.password or "", url.query, url.fragment])


class _SessionEndWatcher:
    """Wraps a transport's read stream to notice when the server ends the session.

    The dispatcher of ``mcp.Client`` reads the stream inside ``async with`` until EOF (a stdio
    child exiting, a transport failing) and leaves it then, which is the moment to reconnect.
    """

    def __init__(self, inner: ReadStream[SessionMessage | Exception], ended: anyio.Event) -> None:
        self._inner = inner
        self._ended = ended

    @property
    def last_context(self) -> Any:
        # The dispatcher duck-types this to carry the sender's contextvars (tracing) along.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return await self._inner.receive()

    async def aclose(self) -> None:
        self._ended.set()
        await self._inner.aclose()

    def __aiter__(self) -> _SessionEndWatcher:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return await self._inner.__anext__()

    async def __aenter__(self) -> _SessionEndWatcher:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._ended.set()
        return await self._inner.__aexit__(exc_type, exc, tb)


class _WatchedTransport(AbstractAsyncContextManager[TransportStreams]):
    def __init__(self, inner: Transport, ended: anyio.Event) -> None:
        self._inner = inner
        self._ended = ended

    async def __aenter__(self) -> TransportStreams:
        read_stream, write_stream = await self._inner.__aenter__()
        return _SessionEndWatcher(read_stream, self._ended), write_stream

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._ended.set()
        return await self._inner.__aexit__(exc_type, exc, tb)


@asynccontextmanager
async def _http_transport(config: HttpServerConfig, connect_timeout: float) -> AsyncIterator[TransportStreams]:
    """Streamable HTTP with the configured headers, on an HTTP client this session owns."""
    timeout = httpx2.Timeout(connect_timeout, read=_HTTP_READ_TIMEOUT_SECONDS)
    async with (
        httpx2.AsyncClient(headers=dict(config.headers), timeout=timeout) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams


@asynccontextmanager
async def _stdio_transport(config: StdioServerConfig) -> AsyncIterator[TransportStreams]:
    # The child gets the SDK's safe defaults (PATH, HOME, ...) plus its configured env, never
    # this process's environment: the gateway's secret must not reach a tool server.
    parameters = StdioServerParameters(
        command=config.command, args=list(config.args), env=dict(config.env), cwd=config.cwd
    )
    spawned = False
    try:
        async with stdio_client(parameters) as streams:
            spawned = True
            yield streams
    except OSError as error:
        if spawned:
            raise
        # Under uvloop the error does not say which file was missing: the command or the cwd.
        where = f" in {config.cwd}" if config.cwd else ""
        raise ServerStartError(f'cannot start the command "{config.command}"{where}: {describe_error(error)}') from None


def _transport(config: ServerConfig, connect_timeout: float) -> Transport:
    if isinstance(config, StdioServerConfig):
        return _stdio_transport(config)
    return _http_transport(config, connect_timeout)


async def _list_all_tools(client: Client) -> list[Tool]:
    """Every page of ``tools/list``, following cursors to the end."""
    tools: list[Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(_MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise RuntimeError("the server repeated a tools/list cursor")
        seen.add(cursor)
    raise RuntimeError(f"the server's tool list did not end within {_MAX_TOOL_PAGES} pages")


class ServerConnection:
    """The supervised session of one MCP server, and its state for status pages.

    ``on_change`` is called (synchronously) whenever ``state`` or ``tools`` change. Every
    ``probe_interval`` seconds the open session is checked by listing the tools again: a server
    that stopped answering is reconnected, and a changed tool list is published.
    """

    def __init__(
        self,
        name: str,
        config: ServerConfig,
        *,
        connect_timeout: float,
        list_timeout: float,
        probe_interval: float = 30.0,
        on_change: Callable[[], None] = lambda: None,
        backoff: Backoff | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.connect_timeout = connect_timeout
        self.list_timeout = list_timeout
        self.probe_interval = probe_interval
        self.backoff = backoff or Backoff()
        self.state: ServerState = "connecting"
        self.tools: tuple[Tool, ...] = ()
        """The server's tools while it is ready; empty otherwise."""
        self.known_tool_names: frozenset[str] = frozenset()
        """The tools of the last successful listing, kept while the server is away, so that a
        call to one of them can say "not ready" rather than "no such tool"."""
        self.last_error: str | None = None
        self.attempts = 0
        self._on_change = on_change
        self._client: Client | None = None
        self._session_ended: anyio.Event | None = None
        self._end_reason: str | None = None
        self._secrets = _configured_secrets(config)

    @property
    def transport(self) -> str:
        return self.config.transport

    def redact(self, text: str) -> str:
        """``text`` without this server's configured secrets or any URL's credentials, for logs and callers."""
        return redact(text, self._secrets)

    def _set(self, state: ServerState, *, tools: Sequence[Tool] = (), error: str | None = None) -> None:
        self.state = state
        self.tools = tuple(tools)
        if tools:
            self.known_tool_names = frozenset(tool.name for tool in tools)
        if error is not None:
            self.last_error = error
        self._on_change()

    def _end_session(self, reason: str) -> None:
        """Have the supervisor drop the current session and reconnect."""
        if self._session_ended is not None and not self._session_ended.is_set():
            self._end_reason = reason
            self._session_ended.set()

    async def run(self) -> None:
        """Connect, serve, reconnect: until cancelled."""
        delay = self.backoff.initial
        while True:
            self.attempts += 1
            self._set("connecting")
            _log.info("mcp_server_connecting", server=self.name, transport=self.transport, attempt=self.attempts)
            started = anyio.current_time()
            try:
                await self._serve_one_session()
                error = self._end_reason or "the server ended the session"
            except Exception as failure:
                error = describe_error(failure)
            error = self.redact(error)
            if anyio.current_time() - started >= self.backoff.maximum:
                delay = self.backoff.initial
            self._set("failed", error=error)
            _log.warning("mcp_server_failed", server=self.name, error=error, retry_in_seconds=delay)
            await anyio.sleep(delay)
            delay = self.backoff.next(delay)

    async def _serve_one_session(self) -> None:
        """One session from connect to its end; returns when it ends, raises if it cannot start."""
        ended = self._session_ended = anyio.Event()
        self._end_reason = None
        transport = _WatchedTransport(_transport(self.config, self.connect_timeout), ended)
        phase = f"connecting timed out after {self.connect_timeout:g} s"
        started = anyio.current_time()
        # One scope whose deadline moves: a cancel scope may not be left while the task groups
        # the client opened inside it are still open, so connect and list share it.
        with anyio.CancelScope(deadline=started + self.connect_timeout) as deadline:
            async with Client(transport, cache=None, client_info=_CLIENT_INFO) as client:
                phase = f"listing tools timed out after {self.list_timeout:g} s"
                deadline.deadline = anyio.current_time() + self.list_timeout
                tools = await _list_all_tools(client)
                deadline.deadline = math.inf
                self._client = client
                try:
                    self._set("ready", tools=tools)
                    _log.info(
                        "mcp_server_ready",
                        server=self.name,
                        tool_count=len(tools),
                        protocol_version=client.protocol_version,
                        seconds=round(anyio.current_time() - started, 3),
                    )
                    await self._keep_alive(client, ended)
                finally:
                    self._client = None
        if deadline.cancelled_caught:
            raise TimeoutError(phase)

    async def _keep_alive(self, client: Client, ended: anyio.Event) -> None:
        """Wait for the session to end, checking on it every ``probe_interval`` seconds."""
        while True:
            with anyio.move_on_after(self.probe_interval):
                await ended.wait()
                return
            try:
                with anyio.fail_after(self.list_timeout):
                    tools = await _list_all_tools(client)
            except Exception as failure:
                self._end_reason = f"the server stopped answering: {describe_error(failure)}"
                return
            if tools != list(self.tools):
                _log.info("mcp_server_tools_changed", server=self.name, tool_count=len(tools))
                self._set("ready", tools=tools)

    async def call_tool(self, name: str, arguments: dict[str, Any], time_limit: float) -> CallToolResult:
        """One ``tools/call`` on the open session, bounded by ``time_limit`` seconds.

        Raises ``ServerUnavailableError`` without a session, ``TimeoutError`` past the time limit
        and ``mcp.shared.exceptions.MCPError`` for protocol errors and dropped connections (which
        also make the supervisor reconnect). Never retried: the tool may have run.
        """
        client = self._client
        if client is None or self.state != "ready":
            reason = f": {self.last_error}" if self.last_error else ""
            raise ServerUnavailableError(
                f'its MCP server "{self.name}" is not ready ({self.state}{reason}); the gateway keeps reconnecting'
            )
        try:
            # The SDK's read timeout ends the request (and tells the server to cancel it); the
            # outer bound also covers a write that cannot complete.
            with anyio.fail_after(time_limit + 1.0):
                return await client.call_tool(name, arguments, read_timeout_seconds=time_limit)
        except MCPError as error:
            if _session_is_gone(error):
                self._end_session(f"the session was lost during a call: {error.message}")
            raise


def _session_is_gone(error: MCPError) -> bool:
    """A dropped connection, or a streamable HTTP server that no longer knows our session (it restarted)."""
    return error.code == CONNECTION_CLOSED or (error.code == INVALID_REQUEST and error.message == "Session terminated")
