"""Routing by catalog name, or by (server, its own tool name): the call path of both the REST API and the MCP endpoint.

The registry says where a tool is (``catalog.entry``; ``catalog.served`` for a caller that names
the server, ``call-tool``'s ``server`` and ``serverTool``), whether its server may be called now
(``call_refusal``: an open circuit, no session), its own call timeout (``call_timeout``), and is
told of every call that reached a server (``record_call``: latency, circuit breaker).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from mcp.shared.dispatcher import ProgressFnT
from mcp_types import Tool
from opentelemetry import trace
from opentelemetry.trace import Tracer

from mcp_client_service.calls.call import CallRecord, RoutedTool, call_routed_tool
from mcp_client_service.calls.results import error_result
from mcp_client_service.calls.validation import SchemaValidators
from mcp_client_service.registry.catalog import CatalogEntry
from mcp_client_service.registry.server_registry import ServerRegistry
from suite_common.deadline import Deadline
from suite_common.echo import clip
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
    ) -> None:
        self._registry = registry
        self._on_call = on_call
        self._tracer = tracer or trace.NoOpTracer()
        self.call_timeout = call_timeout
        self.max_chars = max_chars
        self.validators = SchemaValidators()
        self._index = _Index()

    def _current(self) -> _Index:
        # The catalog's listing is a new object after every rebuild: its identity is the version.
        catalog = self._registry.catalog
        version = catalog.listing()
        if self._index.version is not version:
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
                )
            self._index = index
        return self._index

    def tools(self) -> list[Tool]:
        """Every listed tool as an MCP ``Tool`` (output schema and annotations included), by catalog name."""
        return self._current().tools

    def find(self, name: str) -> RoutedTool | None:
        return self._current().routes.get(name)

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
    ) -> CallToolResponse:
        """Call the tool listed as ``name``; ``ToolNotFoundError`` if no server offers it.

        ``server`` (and ``server_tool``, its own name there): the call runs on that server's tool or nowhere,
        whatever ``name`` resolves to now (another server's tool under ``first_wins``, a renamed one under
        ``prefix``); ``name`` must be a name that tool is (or would be) listed under. ``ToolServerMismatchError``
        if that server does not have such a tool now: nothing is called.

        ``deadline`` is the caller's (its ``X-Deadline-Ms``). A tool whose
        server cannot take calls now gets an error result saying why, or with ``raise_unavailable``
        raises ``ToolUnavailableError`` (the REST API answers 503 with ``Retry-After``).
        ``on_progress`` gets the server's progress notifications for the call.
        """
        with self._tracer.start_as_current_span("mcp_tool_call", attributes={"tool.name": name}) as span:
            tool = self._by_name(name) if server is None else self._held(name, server, server_tool)
            response = await self._call(tool, arguments, deadline, raise_unavailable, on_progress)
            span.set_attribute("tool.server", response.server)
            span.set_attribute("tool.is_error", response.is_error)
            return response

    def _by_name(self, name: str) -> RoutedTool:
        """The tool ``name`` resolves to now: a callable one, else one of a server that is away."""
        tool = self.find(name)
        if tool is not None:
            return tool
        # A tool of a server that is away (reconnecting, its circuit open) is listed as
        # unavailable: calling it says why, not "no such tool" as if it never existed.
        listed = self._registry.catalog.unavailable(name)
        if listed is None:
            raise ToolNotFoundError(name)
        return _routed(name, listed)

    def _held(self, name: str, server: str, server_tool: str | None) -> RoutedTool:
        """``server``'s tool ``server_tool`` (else: listed as ``name``), shadowed by another server's or not,
        serving or away; refused if ``server`` does not have it now, or ``name`` is not one of its names."""
        catalog = self._registry.catalog
        served = catalog.served(server, server_tool=server_tool, name=name)
        if served is None:
            if catalog.entry(name) is None and catalog.unavailable(name) is None:
                raise ToolNotFoundError(name)  # no server has it: as without ``server``
            if server not in self._registry.connections:
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
    ) -> CallToolResponse:
        name = tool.name
        session = self._registry.connections.get(tool.server)
        refusal = self._registry.call_refusal(tool.server)
        if session is None or refusal is not None:
            # Fails fast, without a word to the server: none of its time, nor the caller's, is spent.
            text = f'The tool "{name}" cannot be called now: {refusal or "its server is gone"}.'
            _log.warning("mcp_tool_call", tool=name, server=tool.server, outcome="unavailable", duration_ms=0.0)
            self._record(CallRecord(server=tool.server, tool=name, outcome="unavailable", duration_ms=0.0))
            if raise_unavailable:
                raise ToolUnavailableError(name, tool.server, text, self._registry.retry_after(tool.server))
            return error_result(text, server=tool.server, duration_ms=0.0)
        return await call_routed_tool(
            session,
            tool,
            arguments,
            time_limit=self.time_limit(tool.server, deadline),
            callers_deadline=deadline.seconds < self._server_limit(tool.server),
            max_chars=self.max_chars,
            validators=self.validators,
            on_finished=self._record,
            on_progress=on_progress,
        )


def _routed(name: str, entry: CatalogEntry) -> RoutedTool:
    """``entry``'s tool, called as ``name``: validated against its own schemas, called by its own name."""
    return RoutedTool(
        name=name,
        server=entry.server,
        server_tool_name=entry.server_tool_name,
        input_schema=entry.tool.input_schema,
        output_schema=entry.tool.output_schema,
    )
