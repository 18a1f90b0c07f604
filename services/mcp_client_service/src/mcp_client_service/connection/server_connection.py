"""One supervised MCP session per configured server: what the rest of the service holds for it.

A ``ServerConnection`` is made of parts: its session loop (``supervisor.SessionLoop``: connect,
list, probe, reconnect), the tools of its listings (``tool_listing.ToolListing``), its calls in
flight and their outcomes (``call_accounting.CallAccounting``, feeding the ``CircuitBreaker``),
the calls of its tools that can only run as tasks (``tasks.TaskCalls``), and the log of what a
stdio child writes besides JSON-RPC (``child_output.ChildOutputLog``).
The state they share (the open ``mcp.Client``, the last error) is a ``state.ConnectionState``,
kept up to date by the session loop; the connection reads it and makes the calls.

``mcp.Client`` must be entered and exited in one task, so the session loop owns it. Request
handlers call ``call_tool`` from their own tasks: JSON-RPC multiplexes concurrent calls over the
one session.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
from mcp import Client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST, CallToolResult, RequestParamsMeta, ServerCapabilities

from mcp_client_service.config.options import ConnectionOptions
from mcp_client_service.config.servers_file import ServerConfig
from mcp_client_service.connection.breaker import CircuitBreaker, CircuitState
from mcp_client_service.connection.call_accounting import CallAccounting
from mcp_client_service.connection.child_output import ChildOutputLog
from mcp_client_service.connection.state import ConnectionState
from mcp_client_service.connection.supervisor import SessionLoop
from mcp_client_service.connection.tasks import TaskCalls
from mcp_client_service.connection.tool_listing import ToolListing
from mcp_client_service.failures import CircuitOpenError, ServerUnavailableError, connection_lost
from mcp_client_service.oauth import AuthorizationRequired, SessionOAuth
from mcp_client_service.transport.response_limits import is_oversized_answer
from suite_common.tracing import trace_headers
from suite_common.wire import CALLER_META_KEY

__all__ = ["ServerConnection", "ServerState"]

ServerState = Literal["connecting", "ready", "degraded", "failed", "unauthorized"]
"""``unauthorized``: an OAuth server waiting for a person's consent (no session until one completes)."""

T = TypeVar("T")


class ServerConnection:
    """The supervised session of one MCP server, and its state for status pages.

    ``on_change`` is called (synchronously) whenever ``state`` or the listed tools change.
    """

    def __init__(
        self,
        name: str,
        config: ServerConfig,
        options: ConnectionOptions | None = None,
        *,
        base_dir: Path | None = None,
        on_change: Callable[[], None] = lambda: None,
        oauth: SessionOAuth | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.options = options or ConnectionOptions()
        self.base_dir = base_dir or Path()
        self.breaker = CircuitBreaker(self.options.breaker)
        self.listing = ToolListing(name)
        self.calls = CallAccounting(name, self.breaker, on_change=on_change, on_circuit_opened=self._wake_loop)
        self.output = ChildOutputLog(name, self.redact)
        self.tasks = TaskCalls(name, self.redact)
        self._state = ConnectionState(
            name=name,
            config=config,
            options=self.options,
            base_dir=self.base_dir,
            breaker=self.breaker,
            listing=self.listing,
            calls=self.calls,
            output=self.output,
            tasks=self.tasks,
            changed=on_change,
            oauth=oauth,
        )
        """What the session loop keeps up to date (read through the properties below)."""
        self._loop = SessionLoop(self._state)

    async def run(self) -> None:
        """Connect, serve, reconnect: until cancelled (which closes the session and any stdio child)."""
        await self._loop.run()

    def _wake_loop(self) -> None:
        self._loop.wake()

    # --- state ---------------------------------------------------------------------------------

    @property
    def client(self) -> Client | None:
        """The open session while the server serves (its tools listed); ``None`` otherwise."""
        return self._state.client

    @property
    def connecting(self) -> bool:
        return self._state.connecting

    @property
    def first_attempt_done(self) -> bool:
        """Whether its first connection attempt has ended, serving or failed (readiness waits for that)."""
        return self._state.first_attempt_done

    @property
    def attempts(self) -> int:
        return self._state.attempts

    @property
    def last_error(self) -> str | None:
        return self._state.last_error

    @property
    def egress_refusal(self) -> str | None:
        """Why the outbound policy refused its last connection attempt (safe to show); ``None`` if it did not."""
        return self._state.egress_refusal

    @property
    def retry_at(self) -> float | None:
        """While it waits to reconnect: when (``time.monotonic``) the next attempt starts."""
        return self._state.retry_at

    @property
    def transport(self) -> str:
        return self.config.transport

    @property
    def oauth(self) -> SessionOAuth | None:
        """How its sessions authorize themselves (an ``auth`` server); ``None``: no OAuth."""
        return self._state.oauth

    @property
    def consent(self) -> AuthorizationRequired | None:
        """Set while it waits for a person's consent: the URL to open."""
        return self._state.consent

    def token_changed(self, authorized: bool) -> None:
        """Its principal's OAuth token changed: a consent completed (connect again if it waited for one), or it
        was revoked (the session ends: it was opened with that token)."""
        if not authorized and self.client is not None:
            self._loop.end_session("its OAuth token was revoked")
        self._loop.wake()

    @property
    def state(self) -> ServerState:
        if self.client is None:
            if self._state.consent is not None:
                return "unauthorized"
            return "connecting" if self.connecting else "failed"
        if self.breaker.state != "closed" or self.calls.last_call_failed or self.listing.invalid_tools:
            return "degraded"
        return "ready"

    @property
    def serving(self) -> bool:
        """Whether the server has an open session, its tools listed (``ready`` or ``degraded``)."""
        return self.client is not None

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
    def capabilities(self) -> ServerCapabilities | None:
        """What the server said it offers when its session opened; ``None`` without a session."""
        client = self.client
        return client.server_capabilities if client is not None else None

    def redact(self, text: str) -> str:
        """``text`` without this server's secrets (configured or resolved) or any URL's credentials."""
        return self._state.redact(text)

    def remember_secrets(self, values: Sequence[str]) -> None:
        """Secrets resolved from references (``${env:...}``, ``${file:...}``): redacted from now on."""
        self._state.remember_secrets(values)

    def away(self) -> tuple[str, float | None] | None:
        """``None`` while it takes calls; else why not, in words that stay true while it lasts (no
        countdown), and when (``time.monotonic``) it is tried again, ``None`` while being tried now."""
        if not self.breaker.allows_calls():
            reason = self.redact(self.breaker.open_reason(self.name))
            return reason, time.monotonic() + self.breaker.seconds_until_half_open()
        if self.client is None:
            return self._not_ready(), None if self.connecting else self.retry_at
        return None

    def _not_ready(self) -> str:
        reason = f": {self.last_error}" if self.last_error else ""
        return f'its MCP server "{self.name}" is not ready ({self.state}{reason}); the gateway keeps reconnecting'

    def refuse_reason(self) -> str | None:
        """Why a call to this server would fail fast now (circuit open, no session), or ``None``."""
        if not self.breaker.allows_calls():
            return self.redact(self.breaker.describe_open(self.name))
        if self.client is None:
            return self._not_ready()
        return None

    # --- calls ---------------------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        time_limit: float,
        on_progress: ProgressFnT | None = None,
        caller: Mapping[str, Any] | None = None,
    ) -> CallToolResult:
        """One ``tools/call`` (``name`` as the server knows it) on the open session, bounded by ``time_limit`` s.

        With ``on_progress`` the request carries a progress token, and the server's
        ``notifications/progress`` for it are handed over as they arrive. ``caller`` (a ``CallerContext`` as
        JSON) goes along as ``_meta["io.loopsuite/caller"]``, so the server learns who the call acts for. A tool
        that can only run as a task is run as one (``tasks.TaskCalls``), within the same time limit.

        Raises ``ServerUnavailableError`` without a session (``CircuitOpenError`` while the circuit
        is open), ``TimeoutError`` past the time limit and ``mcp.shared.exceptions.MCPError`` for
        protocol errors and dropped connections (which also make the supervisor reconnect).
        Never retried: the tool may have run. Does not record the outcome: see ``calls.record``.
        """
        client = self.client
        if self._state.consent is not None:
            raise self._state.consent
        refusal = self.refuse_reason()
        if refusal is not None:
            raise (CircuitOpenError if not self.breaker.allows_calls() else ServerUnavailableError)(refusal)
        assert client is not None
        calls = self.calls
        calls.in_flight += 1
        try:
            # The SDK's read timeout ends the request (and tells the server to cancel it); the
            # outer bound also covers a write that cannot complete.
            with anyio.fail_after(time_limit + 1.0):
                meta = _request_meta(caller)
                if name in self.listing.task_only:
                    return await self.tasks.call(
                        client, name, arguments, time_limit=time_limit, on_progress=on_progress, meta=meta
                    )
                result = await client.call_tool(
                    name, arguments, read_timeout_seconds=time_limit, progress_callback=on_progress, meta=meta
                )
                if self._state.oauth is not None:
                    self._state.oauth.context.served(self._state.oauth.principal)
                return result
        except MCPError as error:
            auth = self._state.auth
            if auth is not None and auth.pending is not None:
                raise auth.pending from None  # refused for want of a consent (a step-up): nothing ran
            # An answer dropped for its size fails this call only: the session is fine.
            if _session_is_gone(error) and not is_oversized_answer(error.message):
                calls.lost_with_session()
                if self.client is client:
                    self._loop.end_session(f"the session was lost during a call: {error.message}")
            raise
        finally:
            calls.done()

    async def request(self, send: Callable[[Client], Awaitable[T]], time_limit: float) -> T:
        """A request other than ``tools/call`` (resources, prompts) on the open session, bounded by ``time_limit`` s.

        Raises ``ServerUnavailableError`` without a session, ``TimeoutError`` past the limit, and
        what the SDK raises (``MCPError`` for an error answer). In flight like a call: a probe
        that goes unanswered meanwhile does not end the session, a reload waits for it.
        """
        client = self.client
        if client is None:
            raise ServerUnavailableError(self.refuse_reason() or f'the MCP server "{self.name}" has no session')
        calls = self.calls
        calls.in_flight += 1
        try:
            with anyio.fail_after(time_limit):
                return await send(client)
        finally:
            calls.done()


def _request_meta(caller: Mapping[str, Any] | None) -> RequestParamsMeta | None:
    """The ``_meta`` of a ``tools/call``: the caller's trace (W3C trace context, so a traced server joins it) and who
    the call acts for; ``None`` when there is neither."""
    extra: dict[str, Any] = dict(trace_headers())
    if caller is not None:
        extra[CALLER_META_KEY] = dict(caller)
    if not extra:
        return None
    meta = RequestParamsMeta()
    meta.update(extra)  # type: ignore[typeddict-item]  # traceparent and the caller: extra items, as the type allows
    return meta


def _session_is_gone(error: MCPError) -> bool:
    """A dropped connection, or a streamable HTTP server that no longer knows our session (it restarted)."""
    return connection_lost(error) or (error.code == INVALID_REQUEST and error.message == "Session terminated")
