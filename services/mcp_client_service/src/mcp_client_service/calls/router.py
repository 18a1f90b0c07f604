"""Routing by catalog name: the call path of both the REST API and the MCP endpoint.

The registry says where a tool is (``catalog.entry``), whether its server may be called now
(``call_refusal``: an open circuit, no session), its own call timeout (``call_timeout``), and is
told of every call that reached a server (``record_call``: latency, circuit breaker).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.shared.dispatcher import ProgressFnT
from mcp_types import Tool
from opentelemetry import trace
from opentelemetry.trace import Tracer

from mcp_client_service.calls.call import CallRecord, RoutedTool, call_routed_tool
from mcp_client_service.calls.results import error_result
from mcp_client_service.calls.validation import SchemaValidators
from mcp_client_service.servers.registry import ServerRegistry
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
    """The name resolves to another server (or another of its tools) than the caller expects: nothing was called.

    A caller that checked its rules against one server's tool must not have the call run by another,
    which is what a name does under ``first_wins`` when its first server comes back (or goes away).
    """

    def __init__(self, name: str, expected: tuple[str, str | None], actual: tuple[str, str]) -> None:
        (expected_server, expected_tool), (server, server_tool) = expected, actual
        if expected_server != server:
            now = f'runs on the MCP server "{server}" now, not on "{clip(expected_server)}"'
        else:
            now = f'is the tool "{server_tool}" of "{server}" now, not "{clip(expected_tool or name)}"'
        super().__init__(f'The tool "{clip(name)}" {now} as the caller expected, so it was not called.')
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

        ``server`` (and ``server_tool``, its own name there): where the caller expects the call to run;
        ``ToolServerMismatchError`` if ``name`` resolves elsewhere now, and nothing is called.

        ``deadline`` is the caller's (its ``X-Deadline-Ms``). A tool whose
        server cannot take calls now gets an error result saying why, or with ``raise_unavailable``
        raises ``ToolUnavailableError`` (the REST API answers 503 with ``Retry-After``).
        ``on_progress`` gets the server's progress notifications for the call.
        """
        with self._tracer.start_as_current_span("mcp_tool_call", attributes={"tool.name": name}) as span:
            expected = None if server is None else (server, server_tool)
            response = await self._call(name, arguments, deadline, raise_unavailable, on_progress, expected)
            span.set_attribute("tool.server", response.server)
            span.set_attribute("tool.is_error", response.is_error)
            return response

    async def _call(
        self,
        name: str,
        arguments: dict[str, Any],
        deadline: Deadline,
        raise_unavailable: bool,
        on_progress: ProgressFnT | None,
        expected: tuple[str, str | None] | None = None,
    ) -> CallToolResponse:
        tool = self.find(name)
        if tool is None:
            # A tool of a server that is away (reconnecting, its circuit open) is listed as
            # unavailable: calling it says why, not "no such tool" as if it never existed.
            listed = self._registry.catalog.unavailable(name)
            if listed is None:
                raise ToolNotFoundError(name)
            tool = RoutedTool(
                name=name,
                server=listed.server,
                server_tool_name=listed.server_tool_name,
                input_schema=listed.tool.input_schema,
                output_schema=listed.tool.output_schema,
            )
        if expected is not None and not _routes_to(tool, *expected):
            _log.warning(
                "mcp_tool_call_refused",
                tool=name,
                server=tool.server,
                expected_server=expected[0],
                expected_tool=expected[1],
                reason="server_mismatch",
            )
            raise ToolServerMismatchError(name, expected, (tool.server, tool.server_tool_name))
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


def _routes_to(tool: RoutedTool, server: str, server_tool: str | None) -> bool:
    """Whether ``tool`` is the caller's: on ``server``, and there named ``server_tool`` (when it says)."""
    return tool.server == server and server_tool in (None, tool.server_tool_name)
