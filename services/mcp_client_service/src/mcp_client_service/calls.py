"""``call-tool``: one ``tools/call`` on the right session, and its outcome as a ``CallToolResponse``.

Whatever happens to a call that reached a server (a timeout, a dropped connection, a protocol
error), the caller gets a result with ``isError: true`` and a text saying what happened, never
an HTTP error: the model can read it and carry on. Calls are never retried, since the tool may
already have run.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, CallToolResult, TextContent
from pydantic import ValidationError

from mcp_client_service.connections import ServerConnection, ServerUnavailableError, describe_error
from suite_common.logging import get_logger
from suite_common.wire import CallToolResponse

__all__ = ["call_tool", "dump_content", "error_result", "to_response"]

_log = get_logger("mcp_client_service.calls")


def dump_content(result: CallToolResult, max_chars: int) -> list[dict[str, Any]]:
    """The content blocks as JSON; text beyond ``max_chars`` in total is cut, with a marker saying so."""
    blocks: list[dict[str, Any]] = []
    budget = max_chars
    for block in result.content:
        dumped = block.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(block, TextContent):
            text = block.text
            if len(text) > budget:
                dumped["text"] = (
                    text[:budget] + f"\n[... cut here: {len(text) - budget} more characters of this tool result "
                    f"were left out (limit {max_chars})]"
                )
            budget = max(0, budget - len(text))
        blocks.append(dumped)
    return blocks


def to_response(result: CallToolResult, *, server: str, duration_ms: float, max_chars: int) -> CallToolResponse:
    structured = result.structured_content
    if structured is not None and not isinstance(structured, dict):
        # 2026-07-28 allows any JSON value; the wire carries an object, as MCPServer wraps one.
        structured = {"result": structured}
    if structured is not None and len(json.dumps(structured, default=str)) > max_chars:
        # Servers also send structured results as text (the spec asks them to), and that text is
        # cut with a marker; a cut JSON object would be invalid, so it is left out.
        structured = None
    return CallToolResponse(
        content=dump_content(result, max_chars),
        structured_content=structured,
        is_error=result.is_error,
        server=server,
        duration_ms=duration_ms,
    )


def error_result(text: str, *, server: str, duration_ms: float) -> CallToolResponse:
    return CallToolResponse(
        content=[{"type": "text", "text": text}], is_error=True, server=server, duration_ms=duration_ms
    )


def _describe_failure(error: Exception, *, tool: str, server: str, time_limit: float) -> str:
    if isinstance(error, TimeoutError) or (isinstance(error, MCPError) and error.code == REQUEST_TIMEOUT):
        return (
            f'The tool "{tool}" did not finish within {time_limit:g} s, so the call was abandoned. '
            f'It may still have run on the MCP server "{server}".'
        )
    if isinstance(error, ServerUnavailableError):
        return f'The tool "{tool}" cannot be called now: {error}.'
    if isinstance(error, MCPError) and error.code == CONNECTION_CLOSED:
        return (
            f'The connection to the MCP server "{server}" dropped during the call to "{tool}"; '
            "the tool may have run. The gateway reconnects by itself."
        )
    if isinstance(error, MCPError):
        return f'The MCP server "{server}" refused the call to "{tool}": error {error.code}: {error.message}'
    if isinstance(error, ValidationError):
        return f'The MCP server "{server}" sent a malformed result for "{tool}".'
    return f'The call to "{tool}" on the MCP server "{server}" failed: {describe_error(error)}'


async def call_tool(
    connection: ServerConnection, tool: str, arguments: dict[str, Any], *, time_limit: float, max_chars: int
) -> CallToolResponse:
    started = time.perf_counter()

    def elapsed_ms() -> float:
        return round((time.perf_counter() - started) * 1000, 3)

    if time_limit <= 0:
        text = f'The caller\'s deadline had passed before the tool "{tool}" could be called; it was not called.'
        return error_result(text, server=connection.name, duration_ms=0.0)
    try:
        result = await connection.call_tool(tool, arguments, time_limit)
    except Exception as error:
        text = connection.redact(_describe_failure(error, tool=tool, server=connection.name, time_limit=time_limit))
        reason = connection.redact(describe_error(error))
        _log.warning("mcp_tool_call_failed", tool=tool, server=connection.name, error=reason)
        return error_result(text, server=connection.name, duration_ms=elapsed_ms())
    duration_ms = elapsed_ms()
    _log.info("mcp_tool_call", tool=tool, server=connection.name, is_error=result.is_error, duration_ms=duration_ms)
    return to_response(result, server=connection.name, duration_ms=duration_ms, max_chars=max_chars)
