"""Routing by catalog name, or by (server, its own tool name): the call path of both the REST API and the MCP endpoint.

A call names its tenant (``call-tool``'s ``X-Tenant-Id``) or none: it is resolved in that tenant's catalog only
(``tenants.TenantServers.catalog``: the shared servers' tools and the tenant's own), so it can never reach another
tenant's server; a tool of the tenant's own server runs on the tenant's session of it, opened if needed.

The registry says where a tool is (``catalog.entry``; ``catalog.served`` for a caller that names
the server, ``call-tool``'s ``server`` and ``serverTool``), whether its server may be called now
(``call_refusal``: an open circuit, no session), its own call timeout (``call_timeout``), and is
told of every call that reached a server (``record_call``: latency, circuit breaker).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, NoReturn
from weakref import WeakKeyDictionary

from mcp.shared.dispatcher import ProgressFnT
from mcp_types import Tool
from opentelemetry import trace
from opentelemetry.trace import Tracer

from mcp_client_service.calls.call import CallRecord, RoutedTool, call_routed_tool
from mcp_client_service.calls.results import error_result
from mcp_client_service.calls.validation import SchemaValidators
from mcp_client_service.connection.elicitation import Asker
from mcp_client_service.connection.server_connection import ServerConnection
from mcp_client_service.failures import OutboundBlockedError
from mcp_client_service.registry.catalog import CatalogEntry, ToolCatalog
from mcp_client_service.registry.server_registry import ServerRegistry
from mcp_client_service.tenants.servers import ServerGone, TenantServers
from mcp_client_service.tenants.sessions import SessionLimitReached
from suite_common.deadline import Deadline
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.wire import CallToolResponse

__all__ = ["ToolNotFoundError", "ToolRouter", "ToolServerMismatchError", "ToolUnavailableError"]

_log = get_logger("mcp_client_service.calls.router")

_NO_DEADLINE = Deadline.never()


class ToolNotFoundError(LookupError):
    """No server offers the tool, nor did a server that is away now."""

    def __init__(self, name: str) -> None:
        super().__init__(f'No MCP server offers a tool named "{clip(name)}".')
        self.name = name


class ToolUnavailableError(LookupError):
    """The tool is configured, but its server cannot take calls now (reconnecting, circuit open)."""

    def __init__(self, name: str, server: str, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.name = name
        self.server = server
        self.message = message
        self.retry_after = retry_after
        """Seconds until its server is tried again, ``None`` while it is being tried now."""


class ToolServerMismatchError(LookupError):
    """The server a caller names does not have the tool it names (now): nothing was called.

    A caller that checked its rules against one server's tool holds its call to that tool: it runs
    there or nowhere, never on another server that offers the same name.
    """

    def __init__(self, name: str, server: str, why: str) -> None:
        super().__init__(f'The tool "{clip(name)}" was not called: {why}.')
        self.name = name
        self.server = server


@dataclass
class _Index:
    """The catalog's tools by name, built once per catalog version."""

    version: object = None
    routes: dict[str, RoutedTool] = field(default_factory=dict)
    tools: list[Tool] = field(default_factory=list)


class ToolRouter:
    """Calls tools by catalog name; ``ToolNotFoundError`` for a name no server offers."""

    def __init__(
        self,
        registry: ServerRegistry,
        *,
        call_timeout: float,
        max_chars: int,
        on_call: Callable[[CallRecord], None] | None = None,
        tracer: Tracer | None = None,
        tenants: TenantServers | None = None,
    ) -> None:
        self._registry = registry
        self._tenants = tenants
        self._indexes: WeakKeyDictionary[ToolCatalog, _Index] = WeakKeyDictionary()
        self._on_call = on_call
        self._tracer = tracer or trace.NoOpTracer()
        self.call_timeout = call_timeout
        self.max_chars = max_chars
        self.validators = SchemaValidators()

    def catalog(self, tenant: str | None = None) -> ToolCatalog:
        """The catalog a call of ``tenant`` is resolved in (no tenant: the shared servers' only)."""
        if tenant is None or self._tenants is None:
            return self._registry.catalog
        return self._tenants.catalog(tenant)

    def _current(self, catalog: ToolCatalog | None = None) -> _Index:
        # The catalog's listing is a new object after every rebuild: its identity is the version.
        catalog = catalog or self._registry.catalog
        version = catalog.listing()
        index = self._indexes.get(catalog)
        if index is None or index.version is not version:
            index = _Index(version=version)
            for entry in catalog.entries():
                tool = (
                    entry.tool if entry.tool.name == entry.name else entry.tool.model_copy(update={"name": entry.name})
                )
                index.tools.append(tool)
                index.routes[entry.name] = RoutedTool(
                    name=entry.name,
                    server=entry.server,
                    server_tool_name=entry.server_tool_name,
                    input_schema=entry.tool.input_schema,
                    output_schema=entry.tool.output_schema,
                    tenant=entry.tenant,
                )
            self._indexes[catalog] = index
        return index

    def tools(self) -> list[Tool]:
        """Every listed tool as an MCP ``Tool`` (output schema and annotations included), by catalog name."""
        return self._current().tools

    def find(self, name: str, catalog: ToolCatalog | None = None) -> RoutedTool | None:
        return self._current(catalog).routes.get(name)

    def time_limit(self, server: str, deadline: Deadline) -> float:
        """The server's call timeout (or the service's), never beyond the caller's deadline.

        The caller's as it stated it (``deadline.seconds``, read on arrival): the call starts at once,
        and a timeout then names the figure the caller sent ("within 0.3 s"), not what was left of it.
        """
        return min(self._server_limit(server), deadline.seconds)

    def _server_limit(self, server: str) -> float:
        return self._registry.call_timeout(server) or self.call_timeout

    def _record(self, record: CallRecord) -> None:
        if self._on_call is not None:
            self._on_call(record)
        if record.reached_server:
            self._registry.record_call(record.server, record.duration_ms / 1000, record.server_health)

    def _recorder(self, connection: ServerConnection) -> Callable[[CallRecord], None]:
        """How a call on a tenant's session is recorded: on that session's own breaker and latency."""

        def record(record: CallRecord) -> None:
            if self._on_call is not None:
                self._on_call(record)
            if record.reached_server:
                connection.calls.record(record.duration_ms / 1000, ok=record.server_health)

        return record

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        deadline: Deadline = _NO_DEADLINE,
        raise_unavailable: bool = False,
        on_progress: ProgressFnT | None = None,
        server: str | None = None,
        server_tool: str | None = None,
        tenant: str | None = None,
        caller: Mapping[str, Any] | None = None,
        elicit: Asker | None = None,
    ) -> CallToolResponse:
        """Call the tool listed as ``name``; ``ToolNotFoundError`` if no server offers it.

        ``tenant``: resolved in that tenant's catalog (the shared tools and its own), never another's. ``caller`` (a
        ``CallerContext`` as JSON) goes to the server as ``_meta["io.loopsuite/caller"]``. ``OutboundBlockedError``
        when the outbound policy refused the connection the call needs: nothing was called.

        ``server`` (and ``server_tool``, its own name there): the call runs on that server's tool or nowhere,
        whatever ``name`` resolves to now (another server's tool under ``first_wins``, a renamed one under
        ``prefix``); ``name`` must be a name that tool is (or would be) listed under. ``ToolServerMismatchError``
        if that server does not have such a tool now: nothing is called.

        ``deadline`` is the caller's (its ``X-Deadline-Ms``). A tool whose
        server cannot take calls now gets an error result saying why, or with ``raise_unavailable``
        raises ``ToolUnavailableError`` (the REST API answers 503 with ``Retry-After``).
        ``on_progress`` gets the server's progress notifications for the call; ``elicit`` its questions
        (``elicitation/create``) for a person, which are declined without it.
        """
        with self._tracer.start_as_current_span("mcp_tool_call", attributes={"tool.name": name}) as span:
            catalog = self.catalog(tenant)
            if tenant is not None:
                span.set_attribute("tool.tenant", tenant)
            tool = self._by_name(name, catalog) if server is None else self._held(name, server, server_tool, catalog)
            if tool.tenant is None and self._registry.is_per_user(tool.server):
                response = await self._call_users_own(
                    tool, tenant or "", arguments, deadline, raise_unavailable, on_progress, caller, elicit
                )
            elif tool.tenant is None:
                response = await self._call(tool, arguments, deadline, raise_unavailable, on_progress, caller, elicit)
            else:
                response = await self._call_own(
                    tool, arguments, deadline, raise_unavailable, on_progress, caller, elicit
                )
            span.set_attribute("tool.server", response.server)
            span.set_attribute("tool.is_error", response.is_error)
            return response

    def _by_name(self, name: str, catalog: ToolCatalog) -> RoutedTool:
        """The tool ``name`` resolves to now: a callable one, else one of a server that is away."""
        tool = self.find(name, catalog)
        if tool is not None:
            return tool
        # A tool of a server that is away (reconnecting, its circuit open) is listed as
        # unavailable: calling it says why, not "no such tool" as if it never existed.
        listed = catalog.unavailable(name)
        if listed is None:
            raise ToolNotFoundError(name)
        return _routed(name, listed)

    def _held(self, name: str, server: str, server_tool: str | None, catalog: ToolCatalog) -> RoutedTool:
        """``server``'s tool ``server_tool`` (else: listed as ``name``), shadowed by another server's or not,
        serving or away; refused if ``server`` does not have it now, or ``name`` is not one of its names."""
        served = catalog.served(server, server_tool=server_tool, name=name)
        if served is None:
            if catalog.entry(name) is None and catalog.unavailable(name) is None:
                raise ToolNotFoundError(name)  # no server has it: as without ``server``
            if not catalog.has_server(server):
                why = f'the MCP server "{clip(server)}" is not one of the gateway\'s servers now'
            else:
                why = f'the MCP server "{clip(server)}" has no tool "{clip(server_tool or name)}" now'
            self._refuse(name, server, server_tool, "no_such_tool", why)
        elif server_tool is not None and catalog.served(server, name=name) is not served:
            # A label of another tool would put a false name in every log and audit line of the call.
            why = f'the tool "{clip(server_tool)}" of the MCP server "{clip(server)}" is not listed as "{clip(name)}"'
            self._refuse(name, server, server_tool, "name_mismatch", why)
        return _routed(name, served)

    def _refuse(self, name: str, server: str, server_tool: str | None, reason: str, why: str) -> NoReturn:
        _log.warning("mcp_tool_call_refused", tool=name, server=server, server_tool=server_tool, reason=reason)
        raise ToolServerMismatchError(name, server, why)

    async def _call(
        self,
        tool: RoutedTool,
        arguments: dict[str, Any],
        deadline: Deadline,
        raise_unavailable: bool,
        on_progress: ProgressFnT | None,
        caller: Mapping[str, Any] | None,
        elicit: Asker | None,
    ) -> CallToolResponse:
        """A call of a shared server's tool."""
        session = self._registry.connections.get(tool.server)
        if session is not None and session.consent is not None:
            raise session.consent  # nothing is called before a person consents
        refusal = self._registry.call_refusal(tool.server)
        if session is not None and session.egress_refusal is not None and session.client is None:
            self._blocked(tool, session, self._record)
        if session is None or refusal is not None:
            text = refusal or "its server is gone"
            retry_after = self._registry.retry_after(tool.server) if raise_unavailable else None
            return self._unavailable(tool, text, retry_after, raise_unavailable, self._record)
        limit = self._server_limit(tool.server)
        return await self._run(session, tool, arguments, limit, deadline, on_progress, caller, elicit, self._record)

    async def _call_own(
        self,
        tool: RoutedTool,
        arguments: dict[str, Any],
        deadline: Deadline,
        raise_unavailable: bool,
        on_progress: ProgressFnT | None,
        caller: Mapping[str, Any] | None,
        elicit: Asker | None,
    ) -> CallToolResponse:
        """A call of a tenant's own server's tool, on the tenant's session of it (opened now if need be)."""
        assert self._tenants is not None
        assert tool.tenant is not None
        user = ""
        if self._tenants.is_per_user(tool.tenant, tool.server):
            user = _user_of(tool, caller)  # each user's calls go on their own session, with their own token
        opening = self._tenants.session(tool.tenant, tool.server, user)
        limit = self.call_timeout
        return await self._call_on(
            opening, tool, arguments, limit, deadline, raise_unavailable, on_progress, caller, elicit
        )

    async def _call_users_own(
        self,
        tool: RoutedTool,
        tenant: str,
        arguments: dict[str, Any],
        deadline: Deadline,
        raise_unavailable: bool,
        on_progress: ProgressFnT | None,
        caller: Mapping[str, Any] | None,
        elicit: Asker | None,
    ) -> CallToolResponse:
        """A call of a servers-file per-user server's tool: on the end user's own session, opened with their own
        token, whose principal is (the CALLER's ``tenant``, the server, ``caller.user``) — never the user's name
        alone, so that "alice" of two tenants never share a token. 403 ``user_required`` without a user."""
        user = _user_of(tool, caller)
        if self._tenants is None:
            why = "its server holds each end user's own token, and the gateway has no sessions for users"
            return self._unavailable(tool, why, None, raise_unavailable, self._record)
        opening = self._tenants.user_session(tenant, tool.server, user)
        limit = self._server_limit(tool.server)
        return await self._call_on(
            opening, tool, arguments, limit, deadline, raise_unavailable, on_progress, caller, elicit
        )

    async def _call_on(
        self,
        opening: AbstractAsyncContextManager[ServerConnection],
        tool: RoutedTool,
        arguments: dict[str, Any],
        limit: float,
        deadline: Deadline,
        raise_unavailable: bool,
        on_progress: ProgressFnT | None,
        caller: Mapping[str, Any] | None,
        elicit: Asker | None,
    ) -> CallToolResponse:
        """A call on a session of the pool (``opening``: a tenant's, or a user's), recorded on that session."""
        try:
            async with opening as session:
                if session.consent is not None:
                    raise session.consent  # nothing is called before this principal consents (401)
                record = self._recorder(session)
                if session.egress_refusal is not None and session.client is None:
                    self._blocked(tool, session, record)
                refusal = session.refuse_reason()
                if refusal is not None:
                    away = session.away()
                    retry_after = _seconds_until(away[1]) if away is not None else None
                    return self._unavailable(tool, refusal, retry_after, raise_unavailable, record)
                return await self._run(session, tool, arguments, limit, deadline, on_progress, caller, elicit, record)
        except ServerGone:
            # Switched off or deleted since the caller listed it: refused, never run.
            raise ToolNotFoundError(tool.name) from None
        except SessionLimitReached as full:
            return self._unavailable(tool, str(full), None, raise_unavailable, self._record)

    async def _run(
        self,
        session: ServerConnection,
        tool: RoutedTool,
        arguments: dict[str, Any],
        limit: float,
        deadline: Deadline,
        on_progress: ProgressFnT | None,
        caller: Mapping[str, Any] | None,
        elicit: Asker | None,
        record: Callable[[CallRecord], None],
    ) -> CallToolResponse:
        """The call on ``session``, within the server's ``limit`` shortened by the caller's deadline."""
        return await call_routed_tool(
            session,
            tool,
            arguments,
            time_limit=min(limit, deadline.seconds),
            callers_deadline=deadline.seconds < limit,
            max_chars=self.max_chars,
            validators=self.validators,
            on_finished=record,
            on_progress=on_progress,
            caller=caller,
            elicit=elicit,
        )

    def _unavailable(
        self,
        tool: RoutedTool,
        why: str,
        retry_after: float | None,
        raise_unavailable: bool,
        record: Callable[[CallRecord], None],
    ) -> CallToolResponse:
        """Fails fast, without a word to the server: none of its time, nor the caller's, is spent."""
        name = tool.name
        text = f'The tool "{name}" cannot be called now: {why}.'
        _log.warning("mcp_tool_call", tool=name, server=tool.server, outcome="unavailable", duration_ms=0.0)
        record(CallRecord(server=tool.server, tool=name, outcome="unavailable", duration_ms=0.0, tenant=tool.tenant))
        if raise_unavailable:
            raise ToolUnavailableError(name, tool.server, text, retry_after)
        return error_result(text, server=tool.server, duration_ms=0.0)

    def _blocked(self, tool: RoutedTool, session: ServerConnection, record: Callable[[CallRecord], None]) -> NoReturn:
        """The outbound policy refused the server's connection: not a tool error, the call is refused (403)."""
        why = session.egress_refusal or "refused by the outbound policy"
        _log.warning("mcp_tool_call", tool=tool.name, server=tool.server, outcome="outbound_blocked", duration_ms=0.0)
        record(
            CallRecord(
                server=tool.server, tool=tool.name, outcome="outbound_blocked", duration_ms=0.0, tenant=tool.tenant
            )
        )
        raise OutboundBlockedError(tool.server, f'The tool "{tool.name}" was not called: {why}')


def _user_of(tool: RoutedTool, caller: Mapping[str, Any] | None) -> str:
    """The end user a call of a per-user server acts for (``caller.user``); 403 ``user_required`` without one:
    whose token would it use?"""
    user = caller.get("user") if caller is not None else None
    if not isinstance(user, str) or not user:
        _log.warning("mcp_tool_call_refused", tool=tool.name, server=tool.server, reason="user_required")
        raise ApiError(
            403,
            "user_required",
            f'The tool "{tool.name}" was not called: its MCP server "{tool.server}" uses each end user\'s own '
            "OAuth token, and the call names no user (caller.user).",
        )
    return user


def _routed(name: str, entry: CatalogEntry) -> RoutedTool:
    """``entry``'s tool, called as ``name``: validated against its own schemas, called by its own name."""
    return RoutedTool(
        name=name,
        server=entry.server,
        server_tool_name=entry.server_tool_name,
        input_schema=entry.tool.input_schema,
        output_schema=entry.tool.output_schema,
        tenant=entry.tenant,
    )


def _seconds_until(moment: float | None) -> float | None:
    """Seconds from now until ``moment`` (``time.monotonic``), never negative; ``None`` if unknown."""
    return None if moment is None else max(0.0, moment - time.monotonic())
