"""The session loop of one server: connect, list its tools, keep the session, reconnect.

``SessionLoop.run()`` resolves the server's secret references, connects (``transport.session_transport``: a
stdio child with its allowed environment, or an HTTP session through the SSRF guard), lists the
server's tools to the last page (at most ``max_tools``), drops the ones whose schema is unusable,
publishes the rest, and keeps the session until it ends. While open, the session is probed every
``probe_interval`` seconds, and its tools are listed again when the server says they changed
(``notifications/tools/list_changed``, or a ``subscriptions/listen`` event at protocol 2026; at most
once per ``list_changed_debounce`` seconds) or when the catalog TTL passes. A probe that goes
unanswered ends the session only when the server is silent: not while calls are in flight on it (a
server busy with a long call may not answer a ping before it is done, and each call has its own
time limit) nor while its messages keep arriving. Whenever connecting fails or the session ends it
records why and reconnects after a bounded exponential backoff; the connection's
``CircuitBreaker`` stops the retries (and fails calls fast) after repeated failures in a short
window, and tries again later.

``mcp.Client`` must be entered and exited in one task, so the loop owns it and hands it to its
connection (``ConnectionState.client``, which ``ServerConnection`` reads) while the session serves.
"""

from __future__ import annotations

import math
import time
from contextlib import AsyncExitStack

import anyio
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import Implementation, ProgressNotification, Tool, ToolListChangedNotification
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_client_service.config.schemas import ToolListingFilter
from mcp_client_service.config.servers_file import HttpServerConfig
from mcp_client_service.connection.state import ConnectionState
from mcp_client_service.connection.tasks import runs_tools_as_tasks
from mcp_client_service.connection.tool_listing import list_all_tools
from mcp_client_service.failures import cause_of, connection_lost, describe_error, request_timed_out
from mcp_client_service.oauth import AuthorizationRequired
from mcp_client_service.transport.legacy_sse import OversizedEventError
from mcp_client_service.transport.session_transport import (
    StdioCallbacks,
    WatchedTransport,
    open_transport,
    resolve_config,
)
from mcp_client_service.transport.stdio import describe_exit
from suite_common.logging import get_logger
from suite_common.ssrf import EgressBlocked

__all__ = ["SessionLoop"]

_log = get_logger("mcp_client_service.connection.supervisor")

_CLIENT_INFO = Implementation(name="mcp-client-service", version="0.1.0")

_CONSENT_CHECK_SECONDS = 5.0
"""While a server waits for a consent: how often the store is read for a token another replica got."""

_CONSENT_EXPIRY_MARGIN_SECONDS = 30.0
"""A pending consent is asked afresh this long before its authorization URL expires (at most a tenth of its life)."""

_LISTEN_RETRY_SECONDS = (1.0, 60.0)
"""First and longest pause before a dropped ``subscriptions/listen`` stream is opened again."""


async def _probe(client: Client) -> None:
    """The cheapest request the server must answer: ``server/discover`` at 2026, ``ping`` before."""
    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
        await client.session.send_discover(client.protocol_version)
    else:
        await client.session.send_ping()


class SessionLoop:
    """The supervisor of one server's connection: it runs its sessions one after another, and keeps
    the session fields of the connection's ``ConnectionState`` up to date."""

    def __init__(self, state: ConnectionState) -> None:
        self._state = state
        self._wake = anyio.Event()
        self._session_ended = False
        self._refresh_wanted = False
        self._end_reason: str | None = None
        self._exit_status: int | None = None
        self._last_message_at = -math.inf

    def wake(self) -> None:
        """Have the loop look at the connection again (a circuit opened by calls, a flag set)."""
        self._wake.set()

    def end_session(self, reason: str) -> None:
        """Have the loop drop the current session and reconnect."""
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
            _log.info(why, server=self._state.name)  # once per refresh: a change may be announced twice
        self._refresh_wanted = True
        self._wake.set()

    def _on_transport_message(self) -> None:
        self._last_message_at = anyio.current_time()

    async def _on_message(self, message: IncomingMessage) -> None:
        """The SDK session's handler for what the server sends unasked (protocols before 2026)."""
        if isinstance(message, ToolListChangedNotification):
            self._request_refresh("mcp_server_tools_list_changed")
        elif isinstance(message, ProgressNotification):
            await self._state.tasks.on_progress(message.params)  # a task's, after its call was answered
        elif isinstance(message, Exception):
            _log.warning(
                "mcp_server_transport_error",
                server=self._state.name,
                error=self._state.redact(describe_error(message)),
            )

    async def run(self) -> None:
        """Connect, serve, reconnect: until cancelled (which closes the session and any stdio child)."""
        oauth = self._state.oauth
        if oauth is None:
            await self._run()
            return
        oauth.context.session_opened(oauth.principal)
        try:
            await self._run()
        finally:
            oauth.context.session_closed(oauth.principal)

    async def _run(self) -> None:
        state = self._state
        breaker, options = state.breaker, state.options
        delay = options.backoff.initial
        while True:
            wait = breaker.seconds_until_half_open()
            if wait > 0:
                state.connecting = False
                state.changed()
                _log.warning("mcp_server_circuit_open", server=state.name, retry_in_seconds=round(wait, 1))
                await anyio.sleep(wait)
            state.attempts += 1
            state.connecting = True
            state.changed()
            _log.info(
                "mcp_server_connecting",
                server=state.name,
                transport=state.config.transport,
                attempt=state.attempts,
            )
            started = anyio.current_time()
            self._exit_status = None
            generation = state.oauth.context.generation(state.oauth.principal) if state.oauth else 0
            failure: Exception | None = None
            try:
                await self._serve_one_session()
                error = self._end_reason or self._exit_reason() or "the server ended the session"
            except Exception as raised:
                failure = raised
                # A session that saw its transport close: for a stdio child, how the process ended says more.
                closed = self._exit_reason() if _connection_closed(raised) else None
                error = self._end_reason or closed or describe_error(raised)
            consent = state.auth.pending if failure is not None and state.auth is not None else None
            if consent is not None:
                await self._wait_for_consent(consent, generation)
                delay = options.backoff.initial
                continue
            if failure is not None and state.auth is not None and state.auth.failure is not None:
                error = state.auth.failure  # what OAuth said, rather than the transport's "error response"
            error = state.redact(error)
            state.connecting = False
            state.first_attempt_done = True
            if anyio.current_time() - started >= options.backoff.maximum:
                delay = options.backoff.initial
            # An answer too large for the gateway ends an SSE session, but says nothing of the
            # server's health: it is not counted against its circuit.
            oversized = failure is not None and cause_of(failure, OversizedEventError) is not None
            # Refused by the outbound policy: its calls are refused with 403, not "unavailable" (calls.router).
            blocked = cause_of(failure, EgressBlocked) if failure is not None else None
            state.egress_refusal = state.redact(blocked.message) if blocked is not None else None
            opened = False if oversized else breaker.record_failure(error)
            state.last_error = error
            state.retry_at = None if opened else time.monotonic() + delay
            state.changed()
            _log.warning(
                "mcp_server_failed", server=state.name, error=error, retry_in_seconds=delay, circuit=breaker.state
            )
            if not opened:
                await anyio.sleep(delay)
                delay = options.backoff.next(delay)

    async def _wait_for_consent(self, consent: AuthorizationRequired, generation: int) -> None:
        """No session without a person's consent: wait (no reconnecting, nothing counted against the circuit) until
        a consent completes, the connection is woken, or the consent's URL expires (then connect again, which asks
        a fresh one: the status and the calls' 401 never hand out a URL the callback would refuse)."""
        state = self._state
        assert state.oauth is not None
        context, principal = state.oauth.context, state.oauth.principal
        if context.generation(principal) != generation:
            return  # a consent completed while this session was failing: its token is there to use
        lifetime = context.vault.consent_seconds
        # Asked a little before its expiry (the consent was stored while connecting, before this wait began); at
        # most one fresh consent per lifetime, so no storm however long nobody answers.
        expires_at = anyio.current_time() + max(lifetime * 0.9, lifetime - _CONSENT_EXPIRY_MARGIN_SECONDS)
        state.consent = consent
        state.connecting = False
        state.first_attempt_done = True
        state.retry_at = None
        state.last_error = "waiting for an OAuth consent: open the authorization URL (authorization.authorizationUrl)"
        state.changed()
        _log.warning("mcp_server_authorization_required", server=state.name)
        self._wake = anyio.Event()
        seen = await self._token_stamp()
        try:
            while not self._wake.is_set():
                left = expires_at - anyio.current_time()
                if left <= 0:
                    _log.info("mcp_server_consent_expired", server=state.name)
                    context.consent_expired(principal)
                    break
                # A consent completed here wakes the loop; one completed on another replica is seen in the store.
                with anyio.move_on_after(min(_CONSENT_CHECK_SECONDS, left)):
                    await self._wake.wait()
                if not self._wake.is_set() and anyio.current_time() < expires_at and await self._token_stamp() != seen:
                    break
        finally:
            state.consent = None

    async def _token_stamp(self) -> object:
        """When the principal's token last changed (``None``: none is held, or the store cannot say now)."""
        oauth = self._state.oauth
        assert oauth is not None
        try:
            return await oauth.context.vault.token_stamp(oauth.principal)
        except Exception as error:  # the store away: the next check sees it; the consent's own wake still works
            _log.warning("mcp_server_consent_check_failed", server=self._state.name, error=describe_error(error))
            return None

    async def _serve_one_session(self) -> None:
        """One session from connect to its end; returns when it ends, raises if it cannot start."""
        state = self._state
        options = state.options
        self._session_ended = False
        self._refresh_wanted = False
        self._end_reason = None
        state.output.new_session()
        state.calls.new_session()
        state.elicitations.new_session()
        self._wake = anyio.Event()
        listing = state.listing.new_filter(options.max_tools)
        transport = self._watched_transport(listing)
        phase = f"connecting timed out after {options.connect_timeout:g} s"
        started = anyio.current_time()
        # One scope whose deadline moves: a cancel scope may not be left while the task groups
        # the client opened inside it are still open, so connect and list share it.
        try:
            with anyio.CancelScope(deadline=started + options.connect_timeout) as deadline:
                async with Client(
                    transport,
                    cache=None,
                    client_info=_CLIENT_INFO,
                    message_handler=self._on_message,
                    # Declares the elicitation capability: a server may ask the person behind a call a question.
                    elicitation_callback=state.elicitations.callback,
                ) as client:
                    listing.protocol_version = client.protocol_version
                    listing.runs_tasks = runs_tools_as_tasks(client)
                    phase = f"listing tools timed out after {options.list_timeout:g} s"
                    deadline.deadline = anyio.current_time() + options.list_timeout
                    tools = await list_all_tools(client)
                    deadline.deadline = math.inf
                    await self._serve(client, tools, listing, started)
        finally:
            state.output.report_suppressed()  # the child's stderr was read to its end on the way out
        if deadline.cancelled_caught:
            raise TimeoutError(phase)

    def _watched_transport(self, listing: ToolListingFilter) -> WatchedTransport:
        """The transport of the next session, its config resolved (its secrets remembered for redaction)."""
        state = self._state
        resolved, resolved_values = resolve_config(state.config, state.options, state.base_dir)
        state.remember_secrets(resolved_values)
        callbacks = StdioCallbacks(
            on_noise=state.output.on_stdout_noise,
            on_fatal=self.end_session,
            on_exit=self._on_exit,
            on_stderr=state.output.on_stderr,
        )
        state.auth = None
        if state.oauth is not None and isinstance(resolved, HttpServerConfig) and resolved.auth is not None:
            state.auth = state.oauth.provider(resolved.url, resolved.auth)
            # Revoked (maybe on another replica): the session opened with that token ends.
            state.auth.on_token_gone = lambda: self.end_session("its OAuth token was revoked")
            if resolved.auth.client_secret:
                state.remember_secrets([resolved.auth.client_secret])
        return WatchedTransport(
            open_transport(resolved, state.options, callbacks, state.auth),
            self._transport_ended,
            listing,
            on_message=self._on_transport_message,
        )

    async def _serve(self, client: Client, tools: list[Tool], listing: ToolListingFilter, started: float) -> None:
        """The session open and its tools listed: publish them and keep the session until it ends."""
        state = self._state
        state.client = client
        state.first_attempt_done = True
        # Serving again: why an earlier session ended is history (the log keeps it).
        state.last_error = None
        state.egress_refusal = None
        try:
            self._publish(tools, listing)
            if state.oauth is not None:
                state.oauth.context.served(state.oauth.principal)
            if state.breaker.state == "half_open":
                state.breaker.record_success()
            _log.info(
                "mcp_server_ready",
                server=state.name,
                tool_count=len(state.listing.tools),
                protocol_version=client.protocol_version,
                seconds=round(anyio.current_time() - started, 3),
            )
            async with anyio.create_task_group() as tg:
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS and _announces_changes(client):
                    tg.start_soon(self._listen_for_changes, client)
                await self._keep_alive(client, listing)
                tg.cancel_scope.cancel()
        finally:
            state.client = None
            state.listing.withdraw()

    def _publish(self, tools: list[Tool], listing: ToolListingFilter) -> None:
        self._state.listing.publish(tools, listing)
        self._state.changed()

    async def _keep_alive(self, client: Client, listing: ToolListingFilter) -> None:
        """Serve until the session ends: probe it, and list the tools again when they may have changed."""
        state = self._state
        breaker, options, tool_listing = state.breaker, state.options, state.listing
        now = anyio.current_time()
        next_probe, next_refresh = now + options.probe_interval, now + options.catalog_ttl
        while True:
            # A circuit opened by failing calls half-opens with time alone: wake up to announce it.
            half_open_in = breaker.seconds_until_half_open() if breaker.state == "open" else math.inf
            # Changes announced in quick succession are answered by one listing, debounced.
            relist_at = tool_listing.listed_at + options.list_changed_debounce if self._refresh_wanted else math.inf
            next_wake = min(next_probe, next_refresh, relist_at, anyio.current_time() + half_open_in)
            with anyio.move_on_after(max(0.0, next_wake - anyio.current_time())):
                await self._wake.wait()
            self._wake = anyio.Event()  # flags set from here on wake the next wait
            if self._session_ended:
                return
            if half_open_in < math.inf and breaker.state != "open":
                state.changed()
            now = anyio.current_time()
            announced = self._refresh_wanted and now >= tool_listing.listed_at + options.list_changed_debounce
            refresh = announced or now >= next_refresh
            if not refresh and now < next_probe:
                continue
            if refresh:
                self._refresh_wanted = False
            asked_at = anyio.current_time()
            try:
                with anyio.fail_after(options.list_timeout):
                    if refresh:
                        self._publish(await list_all_tools(client), listing)
                    else:
                        await _probe(client)
            except Exception as failure:
                if not request_timed_out(failure) or not self._busy_since(asked_at):
                    self._end_reason = f"the server stopped answering: {describe_error(failure)}"
                    return
                # Unanswered, but not silent: calls are in flight (each bounded by its own time
                # limit) or messages keep arriving. The next probe decides.
                _log.info(
                    "mcp_server_busy",
                    server=state.name,
                    calls_in_flight=state.calls.in_flight,
                    detail=f"a {'listing' if refresh else 'probe'} went unanswered for {options.list_timeout:g} s "
                    "while the server is busy; the session is kept",
                )
                now = anyio.current_time()
                next_probe = now + options.probe_interval
                if refresh:  # tried again later: a listing asked for by the server, or the TTL's
                    self._refresh_wanted = self._refresh_wanted or announced
                    tool_listing.listed_at = now
                    next_refresh = max(next_refresh, next_probe)
                continue
            now = anyio.current_time()
            next_probe = now + options.probe_interval
            if refresh:
                next_refresh = now + options.catalog_ttl

    def _busy_since(self, moment: float) -> bool:
        """Whether calls are in flight, or a message arrived since ``moment``: the server is not silent."""
        return self._state.calls.in_flight > 0 or self._last_message_at >= moment

    async def _listen_for_changes(self, client: Client) -> None:
        """At protocol 2026 a server tells of changed tools only on a ``subscriptions/listen`` stream."""
        pause, longest = _LISTEN_RETRY_SECONDS
        while True:
            try:
                async with AsyncExitStack() as stack:
                    with anyio.fail_after(self._state.options.list_timeout):
                        subscription = await stack.enter_async_context(client.listen(tools_list_changed=True))
                    if not subscription.honored.tools_list_changed:
                        return
                    pause = _LISTEN_RETRY_SECONDS[0]
                    async for _ in subscription:
                        self._request_refresh("mcp_server_tools_list_changed")
            except ListenNotSupportedError:
                return
            except (SubscriptionLost, MCPError, TimeoutError) as lost:
                _log.info(
                    "mcp_server_listen_lost",
                    server=self._state.name,
                    error=self._state.redact(describe_error(lost)),
                )
            self._request_refresh()  # events may have been missed while no stream was open
            await anyio.sleep(pause)
            pause = min(pause * 2, longest)


def _connection_closed(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return any(_connection_closed(inner) for inner in error.exceptions)
    return connection_lost(error)


def _announces_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return tools is not None and bool(tools.list_changed)
