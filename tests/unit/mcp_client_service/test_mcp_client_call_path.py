"""The call path's decisions: what is checked before a call, and what each way of failing tells the caller.

The session is a stand-in that answers or fails as the SDK's client does; the real sessions,
over stdio and streamable HTTP, are in tests/integration/mcp_client_service.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    CallToolResult,
    TextContent,
)

from mcp_client_service.calls.call import CallRecord, RoutedTool, call_routed_tool
from mcp_client_service.calls.validation import SchemaValidators
from mcp_client_service.connection.elicitation import Asker
from mcp_client_service.failures import OutboundBlockedError, ServerUnavailableError
from suite_common.ssrf import EgressBlocked

pytestmark = pytest.mark.anyio

COUNT_SCHEMA = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}

TOOL = RoutedTool(
    name="count_words",
    server="words",
    server_tool_name="count",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    output_schema=COUNT_SCHEMA,
)


@dataclass
class ScriptedSession:
    """Answers every ``tools/call`` with ``outcome``: a result, or an exception to raise."""

    outcome: CallToolResult | Exception
    name: str = "words"
    calls: list[tuple[str, dict[str, Any], float]] = field(default_factory=list)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        time_limit: float,
        on_progress: ProgressFnT | None = None,
        caller: Mapping[str, Any] | None = None,
        *,
        elicit: Asker | None = None,
    ) -> CallToolResult:
        self.calls.append((name, arguments, time_limit))
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    def redact(self, text: str) -> str:
        return text.replace("s3cret", "***")


async def _call(session: ScriptedSession, arguments: dict[str, Any], **options: Any) -> tuple[dict[str, Any], str]:
    response = await call_routed_tool(
        session,
        TOOL,
        arguments,
        time_limit=options.pop("time_limit", 5.0),
        max_chars=1000,
        validators=options.pop("validators", SchemaValidators()),
        **options,
    )
    body = response.model_dump(by_alias=True, exclude_none=True)
    return body, body["content"][0]["text"] if body["content"] else ""


def _counted(count: Any) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=f"{count} words")], structured_content={"count": count})


async def test_a_valid_call_goes_to_the_server_under_its_own_tool_name() -> None:
    session = ScriptedSession(_counted(2))

    body, text = await _call(session, {"text": "two words"}, time_limit=1.5)

    assert session.calls == [("count", {"text": "two words"}, 1.5)]
    assert body["isError"] is False
    assert body["structuredContent"] == {"count": 2}
    assert text == "2 words"


async def test_invalid_arguments_are_not_sent_and_the_error_names_the_field() -> None:
    session = ScriptedSession(_counted(2))

    body, text = await _call(session, {"text": 42})

    assert session.calls == []
    assert body["isError"] is True
    assert text == (
        'The arguments do not match the inputSchema of the tool "count_words", so it was not called: '
        "$.text: expected string, got integer 42. Correct the arguments and call it again."
    )


async def test_a_result_that_breaks_the_output_schema_is_an_error_with_the_unchecked_content() -> None:
    body, text = await _call(ScriptedSession(_counted("many")), {"text": "a b"})

    assert body["isError"] is True
    assert text.startswith('The tool "count_words" broke its own contract: its structuredContent does not match')
    assert '$.count: expected integer, got string "many"' in text
    assert body["content"][1] == {"type": "text", "text": "many words"}
    assert "structuredContent" not in body


async def test_a_result_without_the_declared_structured_content_breaks_the_contract() -> None:
    result = CallToolResult(content=[TextContent(text="3 words")])

    body, text = await _call(ScriptedSession(result), {"text": "a b c"})

    assert body["isError"] is True
    assert text.startswith(
        'The tool "count_words" broke its own contract: it declares an outputSchema but sent no structuredContent.'
    )


async def test_a_tools_own_error_result_is_not_checked_against_the_output_schema() -> None:
    result = CallToolResult(content=[TextContent(text="text too long")], is_error=True)

    body, text = await _call(ScriptedSession(result), {"text": "a"})

    assert (body["isError"], text) == (True, "text too long")


async def test_the_sdk_clients_own_output_check_is_reported_as_a_broken_contract_naming_the_field() -> None:
    # mcp's client checks structuredContent itself and raises before the result reaches the gateway.
    violation = next(Draft202012Validator(COUNT_SCHEMA).iter_errors({"count": "many"}))
    sdk_error = RuntimeError(f"Invalid structured content returned by tool count: {violation}")
    sdk_error.__cause__ = violation

    body, text = await _call(ScriptedSession(sdk_error), {"text": "a b"})

    assert body["isError"] is True
    assert text.startswith('The tool "count_words" broke its own contract')
    assert '$.count: expected integer, got string "many"' in text


@pytest.mark.parametrize(
    "error",
    [MCPError(CONNECTION_CLOSED, "Connection closed"), OSError("broken pipe"), RuntimeError("stream reset")],
    ids=["connection-closed", "os-error", "unexpected"],
)
async def test_a_call_whose_outcome_is_unknown_says_so_and_is_made_once(error: Exception) -> None:
    session = ScriptedSession(error)

    body, text = await _call(session, {"text": "a"})

    assert len(session.calls) == 1
    assert body["isError"] is True
    assert "its outcome is unknown: the tool may or may not have run. The call was not retried" in text


async def test_a_timeout_says_the_call_was_cancelled_and_not_retried() -> None:
    session = ScriptedSession(MCPError(REQUEST_TIMEOUT, "Request 'tools/call' timed out"))

    _, text = await _call(session, {"text": "a"}, time_limit=2.5)

    assert len(session.calls) == 1
    assert text == (
        'The tool "count_words" did not finish within 2.5 s, so the gateway gave up on it and told the MCP server '
        '"words" to cancel it. It may have partly run; it was not retried.'
    )


async def test_a_protocol_error_from_the_server_is_quoted_redacted() -> None:
    session = ScriptedSession(MCPError(INVALID_PARAMS, "bad token s3cret"))

    _, text = await _call(session, {"text": "a"})

    assert text == 'The MCP server "words" refused the call to "count_words": error -32602: bad token ***'


async def test_a_server_without_a_session_is_reported_as_unavailable() -> None:
    session = ScriptedSession(ServerUnavailableError('its MCP server "words" is not ready (connecting)'))

    _, text = await _call(session, {"text": "a"})

    assert text == 'The tool "count_words" cannot be called now: its MCP server "words" is not ready (connecting).'


async def test_a_passed_deadline_calls_nothing_and_validates_nothing() -> None:
    session = ScriptedSession(_counted(1))

    body, text = await _call(session, {"text": 1}, time_limit=0)

    assert session.calls == []
    assert "deadline had passed" in text
    assert body["durationMs"] == 0


async def test_every_outcome_is_reported_to_the_hook() -> None:
    records: list[CallRecord] = []
    validators = SchemaValidators()

    for session, arguments in [
        (ScriptedSession(_counted(1)), {"text": "a"}),
        (ScriptedSession(_counted(1)), {}),
        (ScriptedSession(MCPError(CONNECTION_CLOSED, "Connection closed")), {"text": "a"}),
        (ScriptedSession(_counted("x")), {"text": "a"}),
    ]:
        await _call(session, arguments, validators=validators, on_finished=records.append)

    assert [record.outcome for record in records] == [
        "ok",
        "invalid_arguments",
        "outcome_unknown",
        "contract_violation",
    ]
    assert {(record.server, record.tool) for record in records} == {("words", "count_words")}
    assert validators.compilations == 2  # the input and the output schema, once each


async def test_running_past_the_callers_shorter_deadline_says_nothing_against_the_server() -> None:
    records: list[CallRecord] = []
    timeout = MCPError(REQUEST_TIMEOUT, "Request 'tools/call' timed out")

    _, callers = await _call(
        ScriptedSession(timeout), {"text": "a"}, time_limit=0.1, callers_deadline=True, on_finished=records.append
    )
    _, servers = await _call(ScriptedSession(timeout), {"text": "a"}, time_limit=2.0, on_finished=records.append)

    assert "did not finish within 0.1 s" in callers
    assert "did not finish within 2 s" in servers
    assert [(record.outcome, record.server_health) for record in records] == [
        ("deadline_exceeded", None),
        ("timeout", False),
    ]


@pytest.mark.parametrize(
    ("error", "outcome", "health"),
    [
        (MCPError(INTERNAL_ERROR, "the database is down"), "refused", True),
        (MCPError(INVALID_PARAMS, "no such city"), "refused", True),
        (MCPError(INVALID_REQUEST, "Session terminated"), "session_expired", False),
        (MCPError(CONNECTION_CLOSED, "Connection closed"), "outcome_unknown", False),
        (MCPError(CONNECTION_CLOSED, "SSE stream ended without a response"), "outcome_unknown", False),
        # The same codes in a server's own answer (-32000..-32099 is the servers' range): a refusal.
        (MCPError(CONNECTION_CLOSED, "the database is down"), "refused", True),
        (MCPError(REQUEST_TIMEOUT, "the upstream API timed out"), "refused", True),
        (MCPError(REQUEST_TIMEOUT, "Request 'tools/call' timed out", {"retry": True}), "refused", True),
    ],
    ids=[
        "internal-error",
        "invalid-params",
        "session-terminated",
        "connection-closed",
        "response-stream-ended",
        "answered-32000",
        "answered-32001",
        "answered-32001-with-data",
    ],
)
async def test_an_error_answer_is_the_server_answering_not_failing(error: MCPError, outcome: str, health: bool) -> None:
    records: list[CallRecord] = []

    await _call(ScriptedSession(error), {"text": "a"}, on_finished=records.append)

    assert [(record.outcome, record.server_health) for record in records] == [(outcome, health)]


@pytest.mark.parametrize(
    "error",
    [
        MCPError(
            PARSE_ERROR,
            "Failed to parse JSON response: the server's answer is larger than the gateway accepts: more than "
            "65536 bytes (MCP_CLIENT_HTTP_MAX_RESPONSE_BYTES)",
        ),
        MCPError(CONNECTION_CLOSED, "SSE stream failed: Server-sent event exceeded the 65536 byte limit."),
    ],
    ids=["json-body", "sse-event"],
)
async def test_an_answer_too_large_fails_the_call_with_a_clear_error_and_says_nothing_against_the_server(
    error: MCPError,
) -> None:
    records: list[CallRecord] = []

    body, text = await _call(ScriptedSession(error), {"text": "a"}, on_finished=records.append)

    assert body["isError"] is True
    assert text.startswith('The answer of the MCP server "words" to the call of "count_words" was too large')
    assert "65536 by" in text
    assert "Failed to parse" not in text
    assert [(record.outcome, record.server_health) for record in records] == [("response_too_large", None)]


async def test_a_connection_the_outbound_policy_refuses_is_a_refusal_not_a_tool_result() -> None:
    try:
        raise EgressBlocked("notes.example", "a loopback address (127.0.0.0/8)", address="127.0.0.1")
    except EgressBlocked as blocked:
        dropped = ConnectionError("all connection attempts failed")
        dropped.__cause__ = blocked
    records: list[CallRecord] = []

    with pytest.raises(OutboundBlockedError, match="loopback"):
        await _call(ScriptedSession(dropped), {"text": "x"}, on_finished=records.append)

    assert [record.outcome for record in records] == ["outbound_blocked"]
    assert not records[0].reached_server
