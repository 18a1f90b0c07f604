"""One supervised MCP session per configured server.

A ``ServerConnection``'s ``run()`` is its supervisor. It resolves the server's secret references,
connects (``transports``: a stdio child with its allowed environment, or an HTTP session through
the SSRF guard), lists the server's tools to the last page (at most ``max_tools``), drops the ones
whose schema is unusable, publishes the rest, and keeps the session until it ends. While open,
the session is probed every ``probe_interval`` seconds, and its tools are listed again when the
server says they changed (``notifications/tools/list_changed``, or a ``subscriptions/listen``
event at protocol 2026; at most once per ``list_changed_debounce`` seconds) or when the catalog
TTL passes. A probe that goes unanswered ends the session only when the server is silent: not
while calls are in flight on it (a server busy with a long call may not answer a ping before it
is done, and each call has its own time limit) nor while its messages keep arriving. Whenever
connecting fails or the session ends it records why and reconnects after a bounded exponential
backoff; a ``CircuitBreaker`` stops the retries (and fails calls fast) after repeated failures in
a short window, and tries again later.

``mcp.Client`` must be entered and exited in one task, so the supervisor owns it. Request
handlers call ``call_tool`` from their own tasks: JSON-RPC multiplexes concurrent calls over the
one session.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_REQUEST,
    CallToolResult,
    Implementation,
    RequestParamsMeta,
    ServerCapabilities,
    Tool,
    ToolListChangedNotification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_client_service.connection.breaker import CallDurations, CircuitBreaker, CircuitState
from mcp_client_service.connection.failures import (
    CircuitOpenError,
    ServerStartError,
    ServerUnavailableError,
    connection_lost,
    describe_error,
    request_timed_out,
)
from mcp_client_service.connection.redaction import redact, secret_forms
from mcp_client_service.servers.config import ServerConfig
from mcp_client_service.servers.options import DEFAULT_INHERITED_ENV, Backoff, ConnectionOptions
from mcp_client_service.servers.schemas import DroppedTool, ToolListingFilter
from mcp_client_service.transport.legacy_sse import OversizedEventError
from mcp_client_service.transport.open import (
    StdioCallbacks,
    WatchedTransport,
    literal_secrets,
    open_transport,
    resolve_config,
)
from mcp_client_service.transport.response_limits import is_oversized_answer
from mcp_client_service.transport.stdio import describe_exit
from suite_common.logging import get_logger
from suite_common.tracing import trace_headers

# Backoff, ConnectionOptions, the errors and describe_error are re-exported: what a caller of a
# connection needs comes from here.
__all__ = [
    "DEFAULT_INHERITED_ENV",
    "Backoff",
    "CircuitOpenError",
    "ConnectionOptions",
    "ServerConnection",
    "ServerStartError",
    "ServerState",
    "ServerUnavailableError",
    "describe_error",
]

_log = get_logger("mcp_client_service.connection.server_connection")

ServerState = Literal["connecting", "ready", "degraded", "failed"]

T = TypeVar("T")

_CLIENT_INFO = Implementation(name="mcp-client-service", version="0.1.0")

_MAX_TOOL_PAGES = 1_000
"""A server that pages forever is cut off here (and by the list timeout, whichever comes first)."""

_NOISE_LOGGED_PER_SESSION = 5
"""Non-JSON-RPC lines of a stdio server logged per session; the rest are counted, not logged."""

_LISTEN_RETRY_SECONDS = (1.0, 60.0)
"""First and longest pause before a dropped ``subscriptions/listen`` stream is opened again."""

_STDERR_BURST = 50
_STDERR_LINES_PER_SECOND = 10.0
"""A stdio server's stderr is logged up to a burst of lines, then at this rate; the rest is counted."""

_UNPRINTABLE = {code: f"\\x{code:02x}" for code in [*range(32), 127] if code != 9}
"""Control characters (ANSI escapes, carriage returns) a child could use to forge the log's own lines."""


async def _list_all_tools(client: Client) -> list[Tool]:
    """Every page of ``tools/list``, following cursors to the end (the listing filter ends it at its cap)."""
    tools: list[Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(_MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise RuntimeError("the server repeated a tools/list cursor")
        seen.add(cursor)
    raise RuntimeError(f"the server's tool list did not end within {_MAX_TOOL_PAGES} pages")


async def _probe(client: Client) -> None:
    """The cheapest request the server must answer: ``server/discover`` at 2026, ``ping`` before."""
    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
        await client.session.send_discover(client.protocol_version)
    else:
        await client.session.send_ping()


class ServerConnection:
    """The supervised session of one MCP server, and its state for status pages.

    ``on_change`` is called (synchronously) whenever ``state`` or ``tools`` change.
    """

    def __init__(
        self,
        name: str,
        config: ServerConfig,
        options: ConnectionOptions | None = None,
        *,
        base_dir: Path | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self.config = config
        self.options = options or ConnectionOptions()
        self.base_dir = base_dir or Path()
        self.tools: tuple[Tool, ...] = ()
        """The server's valid tools while it has a session, as the server names them; empty otherwise."""
        self.known_tools: tuple[Tool, ...] = ()
        """The tools of the last successful listing, kept while the server is away: they stay
        listed as unavailable, and a call to one of them says "not ready", not "no such tool"."""
        self.invalid_tools: tuple[DroppedTool, ...] = ()
        """Tools of the last listing dropped by the schema check, and why."""
        self.last_error: str | None = None
        self.attempts = 0
        self._retry_at: float | None = None
        """While it waits to reconnect: when (``time.monotonic``) the next attempt starts."""
        self.breaker = CircuitBreaker(self.options.breaker)
        self.durations = CallDurations()
        self._on_change = on_change
        self._client: Client | None = None
        self._connecting = True
        self._wake = anyio.Event()
        self._session_ended = False
        self._refresh_wanted = False
        self._end_reason: str | None = None
        self._noise_lines = 0
        self._reported_no_tools = False
        self._last_call_failed = False
        self._exit_status: int | None = None
        self._calls_lost_with_session = 0
        self._secrets = secret_forms([*literal_secrets(config), *self.options.forbidden_values])
        self._in_flight = 0
        self._idle: anyio.Event | None = None
        self._last_message_at = -math.inf
        self._last_listed_at = -math.inf
        self._first_attempt_done = False
        self._verdicts: dict[tuple[str | None, str], str | None] = {}
        """The schema check's verdict on each distinct tool, kept across sessions."""
        self._stderr_tokens = float(_STDERR_BURST)
        self._stderr_refilled_at = -math.inf
        self._stderr_suppressed = 0

    # --- state ---------------------------------------------------------------------------------

    @property
    def transport(self) -> str:
        return self.config.transport

    @property
    def state(self) -> ServerState:
        if self._client is None:
            return "connecting" if self._connecting else "failed"
        if self.breaker.state != "closed" or self._last_call_failed or self.invalid_tools:
            return "degraded"
        return "ready"

    @property
    def serving(self) -> bool:
        """Whether the server has an open session, its tools listed (``ready`` or ``degraded``)."""
        return self._client is not None

    @property
    def first_attempt_done(self) -> bool:
        """Whether its first connection attempt has ended, serving or failed (readiness waits for that)."""
        return self._first_attempt_done

    @property
    def required(self) -> bool:
        """Whether readiness waits for it to be serving (``"required": true`` in the config)."""
        return self.config.required

    @property
    def circuit(self) -> CircuitState:
        return self.breaker.state

    def circuit_detail(self) -> str | None:
        """Why the circuit is open and when it is tried again; ``None`` while it is closed."""
        state = self.breaker.state
        if state == "open":
            return self.redact(self.breaker.describe_open(self.name))
        if state == "half_open":
            return "the circuit is half-open: the server is being tried again after repeated failures"
        return None

    @property
    def call_timeout(self) -> float:
        """This server's limit for one call: its own ``callTimeoutSeconds``, else the service's."""
        return self.config.call_timeout_seconds or self.options.call_timeout

    @property
    def calls_in_flight(self) -> int:
        return self._in_flight

    def redact(self, text: str) -> str:
        """``text`` without this server's secrets (configured or resolved) or any URL's credentials."""
        return redact(text, self._secrets)

    def _remember_secrets(self, values: Sequence[str]) -> None:
        if values:
            self._secrets = secret_forms([*literal_secrets(self.config), *self.options.forbidden_values, *values])

    def _changed(self) -> None:
        self._on_change()

    def record_call(self, seconds: float, *, ok: bool | None) -> None:
        """A call that reached the server: its duration for the p50, its outcome for the breaker.

        ``ok=None``: the outcome says nothing of the server's health (the caller's own deadline
        ended it, its answer was too large), so the breaker is not told.
        """
        self.durations.add(seconds)
        if ok is None:
            return
        if not ok and self._calls_lost_with_session:
            # The session dropped under this call: the supervisor counts that once, as the session's end.
            self._calls_lost_with_session -= 1
            return
        failed_before, self._last_call_failed = self._last_call_failed, not ok
        if ok:
            self.breaker.record_success()
            if failed_before:
                self._changed()
            return
        if self.breaker.record_failure("calls failed at the transport or protocol level"):
            _log.warning("mcp_server_circuit_open", server=self.name, reason="calls failed")
            self._wake.set()  # the supervisor announces when it half-opens
        self._changed()

    def away(self) -> tuple[str, float | None] | None:
        """``None`` while it takes calls; else why not, in words that stay true while it lasts (no
        countdown), and when (``time.monotonic``) it is tried again, ``None`` while being tried now."""
        if not self.breaker.allows_calls():
            reason = self.redact(self.breaker.open_reason(self.name))
            return reason, time.monotonic() + self.breaker.seconds_until_half_open()
        if self._client is None:
            return self._not_ready(), None if self._connecting else self._retry_at
        return None

    def _not_ready(self) -> str:
        reason = f": {self.last_error}" if self.last_error else ""
        return f'its MCP server "{self.name}" is not ready ({self.state}{reason}); the gateway keeps reconnecting'

    def refuse_reason(self) -> str | None:
        """Why a call to this server would fail fast now (circuit open, no session), or ``None``."""
        if not self.breaker.allows_calls():
            return self.redact(self.breaker.describe_open(self.name))
        if self._client is None:
            return self._not_ready()
        return None

    # --- supervision ---------------------------------------------------------------------------

    def _end_session(self, reason: str) -> None:
        """Have the supervisor drop the current session and reconnect."""
        if not self._session_ended:
            self._end_reason = reason
            self._session_ended = True
            self._wake.set()

    def _transport_ended(self) -> None:
        self._session_ended = True
        self._wake.set()

    def _exit_reason(self) -> str | None:
        return describe_exit(self._exit_status) if self._exit_status is not None else None

    def _on_exit(self, status: int | None) -> None:
        self._exit_status = status

    def _request_refresh(self, why: str | None = None) -> None:
        if why is not None and not self._refresh_wanted:
            _log.info(why, server=self.name)  # once per refresh: a change may be announced twice
        self._refresh_wanted = True
        self._wake.set()

    async def run(self) -> None:
        """Connect, serve, reconnect: until cancelled (which closes the session and any stdio child)."""
        delay = self.options.backoff.initial
        while True:
            wait = self.breaker.seconds_until_half_open()
            if wait > 0:
                self._connecting = False
                self._changed()
                _log.warning("mcp_server_circuit_open", server=self.name, retry_in_seconds=round(wait, 1))
                await anyio.sleep(wait)
            self.attempts += 1
            self._connecting = True
            self._changed()
            _log.info("mcp_server_connecting", server=self.name, transport=self.transport, attempt=self.attempts)
            started = anyio.current_time()
            self._exit_status = None
            failure: Exception | None = None
            try:
                await self._serve_one_session()
                error = self._end_reason or self._exit_reason() or "the server ended the session"
            except Exception as raised:
                failure = raised
                # A session that saw its transport close: for a stdio child, how the process ended says more.
                closed = self._exit_reason() if _connection_closed(raised) else None
                error = self._end_reason or closed or describe_error(raised)
            error = self.redact(error)
            self._connecting = False
            self._first_attempt_done = True
            if anyio.current_time() - started >= self.options.backoff.maximum:
                delay = self.options.backoff.initial
            # An answer too large for the gateway ends an SSE session, but says nothing of the
            # server's health: it is not counted against its circuit.
            oversized = failure is not None and _caused_by(failure, OversizedEventError)
            opened = False if oversized else self.breaker.record_failure(error)
            self.last_error = error
            self._retry_at = None if opened else time.monotonic() + delay
            self._changed()
            _log.warning(
                "mcp_server_failed", server=self.name, error=error, retry_in_seconds=delay, circuit=self.breaker.state
            )
            if not opened:
                await anyio.sleep(delay)
                delay = self.options.backoff.next(delay)

    def _on_stdout_noise(self, line: str) -> None:
        self._noise_lines += 1
        if self._noise_lines <= _NOISE_LOGGED_PER_SESSION:
            _log.warning(
                "mcp_server_stdout_not_jsonrpc",
                server=self.name,
                line=self.redact(line),
                detail="a stdio server must write only JSON-RPC messages to stdout; the line was skipped",
                more_are_not_logged=self._noise_lines == _NOISE_LOGGED_PER_SESSION,
            )

    def _on_stderr(self, line: str) -> None:
        """A line the stdio child wrote to stderr: logged as its own, within a rate."""
        now = anyio.current_time()
        elapsed = now - self._stderr_refilled_at
        self._stderr_refilled_at = now
        self._stderr_tokens = min(float(_STDERR_BURST), self._stderr_tokens + elapsed * _STDERR_LINES_PER_SECOND)
        if self._stderr_tokens < 1:
            self._stderr_suppressed += 1
            return
        self._stderr_tokens -= 1
        suppressed, self._stderr_suppressed = self._stderr_suppressed, 0
        extra = {"lines_not_logged_before": suppressed} if suppressed else {}
        _log.info("mcp_server_stderr", server=self.name, line=self.redact(line.translate(_UNPRINTABLE)), **extra)

    def _report_suppressed_stderr(self) -> None:
        if self._stderr_suppressed:
            _log.info(
                "mcp_server_stderr_not_logged",
                server=self.name,
                lines=self._stderr_suppressed,
                detail=f"stderr is logged at most {_STDERR_LINES_PER_SECOND:g} lines a second after a burst",
            )
            self._stderr_suppressed = 0

    def _on_transport_message(self) -> None:
        self._last_message_at = anyio.current_time()

    async def _on_message(self, message: IncomingMessage) -> None:
        """The SDK session's handler for what the server sends unasked (protocols before 2026)."""
        if isinstance(message, ToolListChangedNotification):
            self._request_refresh("mcp_server_tools_list_changed")
        elif isinstance(message, Exception):
            _log.warning("mcp_server_transport_error", server=self.name, error=self.redact(describe_error(message)))

    async def _serve_one_session(self) -> None:
        """One session from connect to its end; returns when it ends, raises if it cannot start."""
        self._session_ended = False
        self._refresh_wanted = False
        self._end_reason = None
        self._noise_lines = 0
        self._last_call_failed = False
        self._wake = anyio.Event()
        listing = ToolListingFilter(max_tools=self.options.max_tools, verdicts=self._verdicts)
        resolved, resolved_values = resolve_config(self.config, self.options, self.base_dir)
        self._remember_secrets(resolved_values)
        callbacks = StdioCallbacks(
            on_noise=self._on_stdout_noise, on_fatal=self._end_session, on_exit=self._on_exit, on_stderr=self._on_stderr
        )
        transport = WatchedTransport(
            open_transport(resolved, self.options, callbacks),
            self._transport_ended,
            listing,
            on_message=self._on_transport_message,
        )
        phase = f"connecting timed out after {self.options.connect_timeout:g} s"
        started = anyio.current_time()
        # One scope whose deadline moves: a cancel scope may not be left while the task groups
        # the client opened inside it are still open, so connect and list share it.
        try:
            with anyio.CancelScope(deadline=started + self.options.connect_timeout) as deadline:
                async with Client(
                    transport, cache=None, client_info=_CLIENT_INFO, message_handler=self._on_message
                ) as client:
                    listing.protocol_version = client.protocol_version
                    phase = f"listing tools timed out after {self.options.list_timeout:g} s"
                    deadline.deadline = anyio.current_time() + self.options.list_timeout
                    tools = await _list_all_tools(client)
                    deadline.deadline = math.inf
                    self._client = client
                    self._first_attempt_done = True
                    # Serving again: why an earlier session ended is history (the log keeps it).
                    self.last_error = None
                    try:
                        self._publish_tools(tools, listing)
                        if self.breaker.state == "half_open":
                            self.breaker.record_success()
                        _log.info(
                            "mcp_server_ready",
                            server=self.name,
                            tool_count=len(self.tools),
                            protocol_version=client.protocol_version,
                            seconds=round(anyio.current_time() - started, 3),
                        )
                        async with anyio.create_task_group() as tg:
                            if client.protocol_version in MODERN_PROTOCOL_VERSIONS and _announces_changes(client):
                                tg.start_soon(self._listen_for_changes, client)
                            await self._keep_alive(client, listing)
                            tg.cancel_scope.cancel()
                    finally:
                        self._client = None
                        self.tools = ()
        finally:
            self._report_suppressed_stderr()  # the child's stderr was read to its end on the way out
        if deadline.cancelled_caught:
            raise TimeoutError(phase)

    def _publish_tools(self, tools: Sequence[Tool], listing: ToolListingFilter) -> None:
        self._last_listed_at = anyio.current_time()
        dropped: Sequence[DroppedTool] = listing.take_dropped()
        left_out = listing.take_left_out()
        if left_out:
            _log.warning(
                "mcp_server_too_many_tools",
                server=self.name,
                listed=len(tools),
                left_out=left_out,
                detail=(
                    f"a server's tools beyond the first {listing.max_tools} are left out "
                    "(MCP_CLIENT_MAX_TOOLS_PER_SERVER)"
                ),
            )
        before = {(tool.name, tool.reason) for tool in self.invalid_tools}
        for tool in dropped:
            if (tool.name, tool.reason) not in before:
                _log.warning(f"mcp_tool_{tool.kind}", server=self.name, tool=tool.name, reason=tool.reason)
        if not tools and not self._reported_no_tools:
            _log.warning(
                "mcp_server_no_valid_tools",
                server=self.name,
                dropped=len(dropped),
                detail="the server is connected but offers no tool the gateway can list",
            )
        self._reported_no_tools = not tools
        changed = tuple(tools) != self.tools
        if changed and self.known_tools:
            _log.info("mcp_server_tools_changed", server=self.name, tool_count=len(tools))
        self.tools = tuple(tools)
        self.invalid_tools = tuple(dropped)
        if tools:
            self.known_tools = self.tools
        self._changed()

    async def _keep_alive(self, client: Client, listing: ToolListingFilter) -> None:
        """Serve until the session ends: probe it, and list the tools again when they may have changed."""
        options = self.options
        now = anyio.current_time()
        next_probe, next_refresh = now + options.probe_interval, now + options.catalog_ttl
        while True:
            # A circuit opened by failing calls half-opens with time alone: wake up to announce it.
            half_open_in = self.breaker.seconds_until_half_open() if self.breaker.state == "open" else math.inf
            # Changes announced in quick succession are answered by one listing, debounced.
            relist_at = self._last_listed_at + options.list_changed_debounce if self._refresh_wanted else math.inf
            next_wake = min(next_probe, next_refresh, relist_at, anyio.current_time() + half_open_in)
            with anyio.move_on_after(max(0.0, next_wake - anyio.current_time())):
                await self._wake.wait()
            self._wake = anyio.Event()  # flags set from here on wake the next wait
            if self._session_ended:
                return
            if half_open_in < math.inf and self.breaker.state != "open":
                self._changed()
            now = anyio.current_time()
            announced = self._refresh_wanted and now >= self._last_listed_at + options.list_changed_debounce
            refresh = announced or now >= next_refresh
            if not refresh and now < next_probe:
                continue
            if refresh:
                self._refresh_wanted = False
            asked_at = anyio.current_time()
            try:
                with anyio.fail_after(options.list_timeout):
                    if refresh:
                        self._publish_tools(await _list_all_tools(client), listing)
                    else:
                        await _probe(client)
            except Exception as failure:
                if not _timed_out(failure) or not self._busy_since(asked_at):
                    self._end_reason = f"the server stopped answering: {describe_error(failure)}"
                    return
                # Unanswered, but not silent: calls are in flight (each bounded by its own time
                # limit) or messages keep arriving. The next probe decides.
                _log.info(
                    "mcp_server_busy",
                    server=self.name,
                    calls_in_flight=self._in_flight,
                    detail=f"a {'listing' if refresh else 'probe'} went unanswered for {options.list_timeout:g} s "
                    "while the server is busy; the session is kept",
                )
                now = anyio.current_time()
                next_probe = now + options.probe_interval
                if refresh:  # tried again later: a listing asked for by the server, or the TTL's
                    self._refresh_wanted = self._refresh_wanted or announced
                    self._last_listed_at = now
                    next_refresh = max(next_refresh, next_probe)
                continue
            now = anyio.current_time()
            next_probe = now + options.probe_interval
            if refresh:
                next_refresh = now + options.catalog_ttl

    def _busy_since(self, moment: float) -> bool:
        """Whether calls are in flight, or a message arrived since ``moment``: the server is not silent."""
        return self._in_flight > 0 or self._last_message_at >= moment

    async def _listen_for_changes(self, client: Client) -> None:
        """At protocol 2026 a server tells of changed tools only on a ``subscriptions/listen`` stream."""
        pause, longest = _LISTEN_RETRY_SECONDS
        while True:
            try:
                async with AsyncExitStack() as stack:
                    with anyio.fail_after(self.options.list_timeout):
                        subscription = await stack.enter_async_context(client.listen(tools_list_changed=True))
                    if not subscription.honored.tools_list_changed:
                        return
                    pause = _LISTEN_RETRY_SECONDS[0]
                    async for _ in subscription:
                        self._request_refresh("mcp_server_tools_list_changed")
            except ListenNotSupportedError:
                return
            except (SubscriptionLost, MCPError, TimeoutError) as lost:
                _log.info("mcp_server_listen_lost", server=self.name, error=self.redact(describe_error(lost)))
            self._request_refresh()  # events may have been missed while no stream was open
            await anyio.sleep(pause)
            pause = min(pause * 2, longest)

    # --- calls ---------------------------------------------------------------------------------

    async def call_tool(
        self, name: str, arguments: dict[str, Any], time_limit: float, on_progress: ProgressFnT | None = None
    ) -> CallToolResult:
        """One ``tools/call`` (``name`` as the server knows it) on the open session, bounded by ``time_limit`` s.

        With ``on_progress`` the request carries a progress token, and the server's
        ``notifications/progress`` for it are handed over as they arrive.

        Raises ``ServerUnavailableError`` without a session (``CircuitOpenError`` while the circuit
        is open), ``TimeoutError`` past the time limit and ``mcp.shared.exceptions.MCPError`` for
        protocol errors and dropped connections (which also make the supervisor reconnect).
        Never retried: the tool may have run. Does not record the outcome: see ``record_call``.
        """
        client = self._client
        refusal = self.refuse_reason()
        if refusal is not None:
            raise (CircuitOpenError if not self.breaker.allows_calls() else ServerUnavailableError)(refusal)
        assert client is not None
        self._in_flight += 1
        try:
            # The SDK's read timeout ends the request (and tells the server to cancel it); the
            # outer bound also covers a write that cannot complete.
            with anyio.fail_after(time_limit + 1.0):
                # The caller's trace goes along (W3C trace context in _meta), so a traced server joins it.
                meta: RequestParamsMeta | None = None
                if context := trace_headers():
                    meta = RequestParamsMeta()
                    meta.update(context)  # type: ignore[typeddict-item]  # traceparent: an extra item, as the type allows
                return await client.call_tool(
                    name, arguments, read_timeout_seconds=time_limit, progress_callback=on_progress, meta=meta
                )
        except MCPError as error:
            # An answer dropped for its size fails this call only: the session is fine.
            if _session_is_gone(error) and not is_oversized_answer(error.message):
                self._calls_lost_with_session += 1
                if self._client is client:
                    self._end_session(f"the session was lost during a call: {error.message}")
            raise
        finally:
            self._request_done()

    async def request(self, send: Callable[[Client], Awaitable[T]], time_limit: float) -> T:
        """A request other than ``tools/call`` (resources, prompts) on the open session, bounded by ``time_limit`` s.

        Raises ``ServerUnavailableError`` without a session, ``TimeoutError`` past the limit, and
        what the SDK raises (``MCPError`` for an error answer). In flight like a call: a probe
        that goes unanswered meanwhile does not end the session, a reload waits for it.
        """
        client = self._client
        if client is None:
            raise ServerUnavailableError(self.refuse_reason() or f'the MCP server "{self.name}" has no session')
        self._in_flight += 1
        try:
            with anyio.fail_after(time_limit):
                return await send(client)
        finally:
            self._request_done()

    def _request_done(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()

    @property
    def capabilities(self) -> ServerCapabilities | None:
        """What the server said it offers when its session opened; ``None`` without a session."""
        client = self._client
        return client.server_capabilities if client is not None else None

    async def wait_idle(self) -> None:
        """Return once no call is in flight on this server (bound it with a timeout)."""
        while self._in_flight:
            self._idle = anyio.Event()
            await self._idle.wait()


def _connection_closed(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return any(_connection_closed(inner) for inner in error.exceptions)
    return connection_lost(error)


def _timed_out(error: Exception) -> bool:
    """Our own bound, or the SDK's (``server/discover`` has one of its own)."""
    return request_timed_out(error)


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(error, kind):
        return True
    if isinstance(error, BaseExceptionGroup):
        return any(_caused_by(inner, kind) for inner in error.exceptions)
    return error.__cause__ is not None and _caused_by(error.__cause__, kind)


def _announces_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return tools is not None and bool(tools.list_changed)


def _session_is_gone(error: MCPError) -> bool:
    """A dropped connection, or a streamable HTTP server that no longer knows our session (it restarted)."""
    return connection_lost(error) or (error.code == INVALID_REQUEST and error.message == "Session terminated")
