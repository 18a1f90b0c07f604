"""The bounded stdio transport, against real child processes written in a few lines of Python."""

from __future__ import annotations

import json
import sys
import textwrap

import anyio
import pytest
from mcp.shared.message import SessionMessage
from mcp_types import PARSE_ERROR, JSONRPCError, JSONRPCResponse

from mcp_client_service.transport.stdio import STDERR_LINE_BYTES, bounded_stdio_transport

pytestmark = pytest.mark.anyio


def _child(code: str) -> list[str]:
    return ["-c", textwrap.dedent(code)]


async def _messages(code: str, count: int, **callbacks: object) -> list[SessionMessage | Exception]:
    """The first ``count`` messages the child running ``code`` writes, read through the transport."""
    received: list[SessionMessage | Exception] = []
    with anyio.fail_after(20):
        async with bounded_stdio_transport(sys.executable, _child(code), env={}, **callbacks) as (read, _):  # type: ignore[arg-type]
            for _ in range(count):
                received.append(await read.receive())
    return received


async def test_the_childs_stderr_is_handed_on_line_by_line_and_never_reaches_the_gateways_own(
    capfd: pytest.CaptureFixture[str],
) -> None:
    lines: list[str] = []
    code = f"""
        import sys
        sys.stderr.write("starting up\\n")
        sys.stderr.write('{{"event": "forged", "log_level": "critical"}}\\n')
        sys.stderr.write("x" * {STDERR_LINE_BYTES * 3} + "\\n")
        sys.stderr.write("after the long one\\r\\n")
        sys.stderr.write("no newline at the end")
        sys.stderr.flush()
        print('{{"jsonrpc": "2.0", "method": "notifications/initialized"}}', flush=True)
    """

    await _messages(code, 1, on_stderr=lines.append)

    assert lines[:2] == ["starting up", '{"event": "forged", "log_level": "critical"}']
    assert lines[2] == "x" * STDERR_LINE_BYTES + " [...]"  # cut, and the rest of the line skipped
    assert lines[3:] == ["after the long one", "no newline at the end"]
    assert "starting up" not in capfd.readouterr().err


async def test_a_message_nested_beyond_the_sdks_parser_is_read_all_the_same() -> None:
    # pydantic's JSON parser stops at 200 levels; the standard library's parser reads this one.
    code = """
        import json
        schema = {"type": "string"}
        for _ in range(150):
            schema = {"type": "object", "properties": {"inner": schema}}
        tools = [{"name": "deep", "inputSchema": schema}, {"name": "flat", "inputSchema": {"type": "object"}}]
        print(json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"tools": tools}}), flush=True)
    """

    (message,) = await _messages(code, 1)

    assert isinstance(message, SessionMessage)
    assert isinstance(message.message, JSONRPCResponse)
    assert [tool["name"] for tool in message.message.result["tools"]] == ["deep", "flat"]


async def test_an_answer_that_cannot_be_parsed_fails_its_request_at_once() -> None:
    noise: list[str] = []
    nested = "[" * 5000 + "]" * 5000  # beyond any parser's depth
    code = f"""
        print('{{"jsonrpc": "2.0", "id": 3, "result": {{"tools": {nested}}}}}', flush=True)
        print('{{"jsonrpc": "2.0", "id": 4, "result": {{"truncated": ', flush=True)
        print('{{"hello": "not a message"}}', flush=True)
        print('{{"jsonrpc": "2.0", "method": "notifications/initialized"}}', flush=True)
    """

    first, second, third = await _messages(code, 3, on_noise=noise.append)

    for message, request_id in ((first, 3), (second, 4)):
        assert isinstance(message, SessionMessage)
        assert isinstance(message.message, JSONRPCError)
        assert (message.message.id, message.message.error.code) == (request_id, PARSE_ERROR)
        assert "could not be parsed as JSON-RPC" in message.message.error.message
    assert isinstance(third, SessionMessage)
    assert noise == [json.dumps({"hello": "not a message"})]
