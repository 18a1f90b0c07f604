"""One call of a routed tool: arguments checked, one ``tools/call``, its outcome as an answer.

This (through ``router.ToolRouter``) is the one path that ``POST /mcp/v1/tools/call-tool`` and
the gateway's own MCP endpoint share, so both validate, time out and fail the same way:

- arguments are checked against the tool's ``inputSchema`` first; a violation names the field
  (``$.legs[0].date``) and what was wrong, and the server is not called;
- the time limit is the server's call timeout, shortened by the caller's deadline; past it the
  SDK sends the server ``notifications/cancelled`` (over streamable HTTP at protocol 2026 it
  aborts the request's POST, which is how that protocol cancels);
- a result that breaks the tool's own ``outputSchema`` becomes an error result saying so;
- text and data beyond ``max_chars`` are cut, with a marker saying what was left out.

Whatever happens to a call (a timeout, a dropped connection, a protocol error), the caller gets a
result with ``isError: true`` and a text saying what happened, never an HTTP error: a model can
read it and carry on. A call is never retried: a tool that may have run must not run twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio
from jsonschema import ValidationError as SchemaViolation
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST, CallToolResult
from pydantic import ValidationError

from mcp_client_service.calls.results import dump_content, error_result, to_response
from mcp_client_service.calls.validation import SchemaValidators, Violation, describe_violations, violation_from_error
from mcp_client_service.failures import (
    OutboundBlockedError,
    ServerUnavailableError,
    cause_of,
    connection_lost,
    describe_error,
    request_timed_out,
)
from mcp_client_service.oauth import AuthorizationRequired
from mcp_client_service.transport.response_limits import is_oversized_answer
from suite_common.logging import get_logger
from suite_common.ssrf import EgressBlocked
from suite_common.wire import CallToolResponse

__all__ = [
    "CallOutcome",
    "CallRecord",
    "RoutedTool",
    "ToolSession",
    "call_routed_tool",
]

_log = get_logger("mcp_client_service.calls.call")

CallOutcome = Literal[
    "ok",
    "tool_error",
    "invalid_arguments",
    "deadline_passed",
    "timeout",
    "deadline_exceeded",
    "outcome_unknown",
    "unavailable",
    "refused",
    "session_expired",
    "malformed_result",
    "response_too_large",
    "contract_violation",
    "cancelled",
    "outbound_blocked",
    "authorization_required",
]
"""How a call ended. ``outbound_blocked``: the outbound policy refused the connection, the tool was not called.
``authorization_required``: the server's OAuth wants a consent first; the tool was not run.
``cancelled``: the caller hung up while the server worked on it. ``timeout`` is
the server's own limit, ``deadline_exceeded`` the caller's
shorter deadline; those two, ``outcome_unknown`` and ``response_too_large`` leave it open whether
the tool ran. ``refused`` is a JSON-RPC error answer, ``session_expired`` a server that no longer
knows the session."""

_HEALTHY: frozenset[CallOutcome] = frozenset({"ok", "tool_error", "refused", "contract_violation"})
"""The server answered: it is alive, whatever the answer says."""
_UNWELL: frozenset[CallOutcome] = frozenset({"timeout", "outcome_unknown", "session_expired", "malformed_result"})
"""The server did not answer within its own limit, the connection dropped, or it answered garbage."""

_OUTPUT_MISSING = Violation("$", "no structuredContent, although the tool declares an outputSchema")

_SDK_OUTPUT_CHECK = ("Invalid structured content returned by tool", "has an output schema but did not return")
"""How mcp 2.3's client words its own outputSchema check, which runs before the result reaches us."""


class ToolSession(Protocol):
    """What a call needs of a server's session; ``connections.ServerConnection`` is one."""

    name: str

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        time_limit: float,
        on_progress: ProgressFnT | None = None,
        caller: Mapping[str, Any] | None = None,
    ) -> CallToolResult: ...

    def redact(self, text: str) -> str: ...


@dataclass(frozen=True)
class RoutedTool:
    """A catalog entry with what routing and validation need."""

    name: str
    """As the gateway lists it."""
    server: str
    server_tool_name: str
    """As its server knows it (the same unless the catalog renamed it)."""
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None = None
    tenant: str | None = None
    """Set on a tool of a tenant's own server (``tenants``): the call runs on that tenant's session of it."""


@dataclass(frozen=True)
class CallRecord:
    server: str
    tool: str
    outcome: CallOutcome
    duration_ms: float
    tenant: str | None = None
    """Set for a call of a tenant's own server."""

    @property
    def reached_server(self) -> bool:
        return self.outcome not in (
            "invalid_arguments",
            "deadline_passed",
            "unavailable",
            "outbound_blocked",
            "authorization_required",
        )

    @property
    def server_health(self) -> bool | None:
        """What the call says of its server, for its circuit breaker: ``False`` a failure of the
        server (not of the tool, nor of the caller), ``True`` an answer, ``None`` nothing (the
        caller's own deadline ended it, its answer was too large for the gateway)."""
        if self.outcome in _UNWELL:
            return False
        return True if self.outcome in _HEALTHY else None


def _ignore(_: CallRecord) -> None:
    return None


# --- failures ----------------------------------------------------------------------------------


def _sdk_output_violations(error: Exception) -> list[Violation] | None:
    """The violations behind the SDK client's own outputSchema check, if ``error`` is one."""
    if not isinstance(error, RuntimeError) or not any(phrase in str(error) for phrase in _SDK_OUTPUT_CHECK):
        return None
    cause = error.__cause__
    if isinstance(cause, SchemaViolation):
        return violation_from_error(cause)
    return [_OUTPUT_MISSING]


def _contract_text(tool: str, server: str, violations: Sequence[Violation]) -> str:
    if list(violations) == [_OUTPUT_MISSING]:
        broken = "it declares an outputSchema but sent no structuredContent"
    else:
        broken = (
            f"its structuredContent does not match the outputSchema it declares ({describe_violations(violations)})"
        )
    return (
        f'The tool "{tool}" broke its own contract: {broken}. The tool ran on the MCP server "{server}"; '
        "the fault is the server's, not the arguments'."
    )


def _too_large_detail(message: str) -> str:
    """The SDK's wrapping of the size error ("Failed to parse JSON response: ...") left out."""
    for prefix in ("Failed to parse JSON response: ", "SSE stream failed: "):
        message = message.removeprefix(prefix)
    return message.rstrip(".")


def _describe_failure(
    error: Exception, *, tool: str, server: str, time_limit: float, callers_deadline: bool
) -> tuple[CallOutcome, str]:
    if request_timed_out(error):
        return "deadline_exceeded" if callers_deadline else "timeout", (
            f'The tool "{tool}" did not finish within {time_limit:g} s, so the gateway gave up on it and told '
            f'the MCP server "{server}" to cancel it. It may have partly run; it was not retried.'
        )
    if isinstance(error, ServerUnavailableError):
        return "unavailable", f'The tool "{tool}" cannot be called now: {error}.'
    violations = _sdk_output_violations(error)
    if violations is not None:
        return "contract_violation", _contract_text(tool, server, violations)
    if isinstance(error, MCPError) and is_oversized_answer(error.message):
        return "response_too_large", (
            f'The answer of the MCP server "{server}" to the call of "{tool}" was too large for the gateway '
            f"({_too_large_detail(error.message)}), so it was dropped. The tool ran; it was not retried. "
            "Ask it for less (a narrower query, fewer results)."
        )
    if isinstance(error, MCPError) and error.code == INVALID_REQUEST and error.message == "Session terminated":
        return "session_expired", (
            f'The MCP server "{server}" no longer knows the gateway\'s session (it restarted?), so it refused the '
            f'call to "{tool}"; the call was not retried. The gateway reconnects by itself.'
        )
    if isinstance(error, MCPError) and not connection_lost(error):
        # The server's error answer, whatever its code (-32000 and -32001 included): it refused.
        return "refused", f'The MCP server "{server}" refused the call to "{tool}": error {error.code}: {error.message}'
    if isinstance(error, ValidationError):
        return "malformed_result", f'The MCP server "{server}" sent a malformed result for "{tool}".'
    # The connection dropped (a crash, a network failure) after the request may have been sent.
    return "outcome_unknown", (
        f'The connection to the MCP server "{server}" dropped during the call to "{tool}", so its outcome is '
        "unknown: the tool may or may not have run. The call was not retried, so that it cannot run twice; check "
        "before calling it again. The gateway reconnects by itself."
    )


# --- the call ----------------------------------------------------------------------------------


async def call_routed_tool(
    session: ToolSession,
    tool: RoutedTool,
    arguments: dict[str, Any],
    *,
    time_limit: float,
    max_chars: int,
    validators: SchemaValidators,
    on_finished: Callable[[CallRecord], None] = _ignore,
    callers_deadline: bool = False,
    on_progress: ProgressFnT | None = None,
    caller: Mapping[str, Any] | None = None,
) -> CallToolResponse:
    """One call of ``tool`` on ``session``: checked, bounded by ``time_limit`` seconds, never raising but for
    ``OutboundBlockedError`` (the outbound policy refused a connection the call needed: not a tool error).

    ``callers_deadline``: the limit is the caller's deadline, shorter than the server's own, so
    running past it says nothing of the server. ``on_progress`` gets the server's progress
    notifications for the call (the call then carries a progress token). ``caller`` (a ``CallerContext`` as
    JSON) is sent as ``_meta["io.loopsuite/caller"]``.
    """
    started = time.perf_counter()
    server = tool.server

    def finish(outcome: CallOutcome, response: CallToolResponse) -> CallToolResponse:
        on_finished(
            CallRecord(
                server=server, tool=tool.name, outcome=outcome, duration_ms=response.duration_ms, tenant=tool.tenant
            )
        )
        quiet = ("ok", "tool_error", "invalid_arguments", "deadline_exceeded", "cancelled")
        level = _log.info if outcome in quiet else _log.warning
        level(
            "mcp_tool_call",
            tool=tool.name,
            server=server,
            tenant=tool.tenant,
            outcome=outcome,
            duration_ms=response.duration_ms,
        )
        return response

    def elapsed_ms() -> float:
        return round((time.perf_counter() - started) * 1000, 3)

    if time_limit <= 0:
        text = f'The caller\'s deadline had passed before the tool "{tool.name}" could be called; it was not called.'
        return finish("deadline_passed", error_result(text, server=server, duration_ms=0.0))
    violations = validators.check((tool.name, "inputSchema"), tool.input_schema, arguments)
    if violations:
        text = (
            f'The arguments do not match the inputSchema of the tool "{tool.name}", so it was not called: '
            f"{describe_violations(violations)}. Correct the arguments and call it again."
        )
        return finish("invalid_arguments", error_result(text, server=server, duration_ms=elapsed_ms()))
    try:
        result = await session.call_tool(tool.server_tool_name, arguments, time_limit, on_progress, caller)
    except anyio.get_cancelled_exc_class():
        # The server did receive the call (it is told to stop): count it, or the hang-up leaves no trace.
        finish("cancelled", error_result("The caller cancelled the call.", server=server, duration_ms=elapsed_ms()))
        raise
    except AuthorizationRequired:
        text = f'The MCP server "{server}" needs an authorization first; the tool was not run.'
        finish("authorization_required", error_result(text, server=server, duration_ms=elapsed_ms()))
        raise
    except Exception as error:
        blocked = cause_of(error, EgressBlocked)
        if blocked is not None:
            text = session.redact(blocked.message)
            finish("outbound_blocked", error_result(text, server=server, duration_ms=elapsed_ms()))
            raise OutboundBlockedError(server, text) from None
        outcome, text = _describe_failure(
            error, tool=tool.name, server=server, time_limit=time_limit, callers_deadline=callers_deadline
        )
        _log.info("mcp_tool_call_failed", tool=tool.name, server=server, error=session.redact(describe_error(error)))
        return finish(outcome, error_result(session.redact(text), server=server, duration_ms=elapsed_ms()))
    duration_ms = elapsed_ms()
    breach = _output_breach(tool, result, validators, max_chars=max_chars, duration_ms=duration_ms)
    if breach is not None:
        return finish("contract_violation", breach)
    response = to_response(result, server=server, duration_ms=duration_ms, max_chars=max_chars)
    return finish("tool_error" if result.is_error else "ok", response)


def _output_breach(
    tool: RoutedTool, result: CallToolResult, validators: SchemaValidators, *, max_chars: int, duration_ms: float
) -> CallToolResponse | None:
    """The answer for a result that breaks the tool's ``outputSchema``; ``None`` when it keeps it (or has none)."""
    if result.is_error or tool.output_schema is None:
        return None
    if result.structured_content is None:
        violations = [_OUTPUT_MISSING]
    else:
        violations = validators.check((tool.name, "outputSchema"), tool.output_schema, result.structured_content)
    if not violations:
        return None
    unchecked = dump_content(result, max_chars)
    note = " Its unchecked content follows." if unchecked else ""
    content = [{"type": "text", "text": _contract_text(tool.name, tool.server, violations) + note}, *unchecked]
    return CallToolResponse(content=content, is_error=True, server=tool.server, duration_ms=duration_ms)
