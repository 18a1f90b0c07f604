"""The MCP endpoint's translations: a ``call-tool`` answer as an MCP result, Host checks from settings."""

from __future__ import annotations

from typing import Any

import pytest
from mcp_types import TextContent

from mcp_client_service.calls.call import RoutedTool
from mcp_client_service.mcp_face.endpoint import to_call_tool_result, transport_security
from suite_common.wire import CallToolResponse


def _tool(output_schema: dict[str, Any] | None) -> RoutedTool:
    return RoutedTool(name="t", server="s", server_tool_name="t", input_schema={}, output_schema=output_schema)


def test_an_answer_becomes_an_mcp_result_with_its_server_and_duration_in_meta() -> None:
    response = CallToolResponse(
        content=[{"type": "text", "text": "42"}],
        structured_content={"result": 42},
        server="calc",
        duration_ms=3.5,
    )

    result = to_call_tool_result(response, _tool({"type": "object", "properties": {"result": {"type": "integer"}}}))

    assert result.content == [TextContent(text="42")]
    assert result.structured_content == {"result": 42}
    assert result.is_error is False
    assert result.meta == {"loopsuite/server": "calc", "loopsuite/durationMs": 3.5}


@pytest.mark.parametrize(
    ("output_schema", "expected"),
    [
        ({"type": "array", "items": {"type": "integer"}}, [1, 2]),  # the REST answer's wrapping is undone
        ({"type": "object", "properties": {"result": {}}}, {"result": [1, 2]}),  # a real "result" field stays
        (None, {"result": [1, 2]}),
    ],
    ids=["array-schema", "object-schema", "no-schema"],
)
def test_a_wrapped_non_object_result_is_unwrapped_only_for_a_non_object_output_schema(
    output_schema: dict[str, Any] | None, expected: Any
) -> None:
    response = CallToolResponse(content=[], structured_content={"result": [1, 2]}, server="s", duration_ms=1.0)

    assert to_call_tool_result(response, _tool(output_schema)).structured_content == expected


def test_an_error_answer_stays_an_error_result() -> None:
    response = CallToolResponse(content=[{"type": "text", "text": "no"}], is_error=True, server="s", duration_ms=1.0)

    assert to_call_tool_result(response, None).is_error is True


def test_without_allowed_hosts_no_host_is_checked() -> None:
    assert transport_security([]).enable_dns_rebinding_protection is False


def test_allowed_hosts_turn_on_host_and_origin_checks() -> None:
    security = transport_security(["gateway.internal:*", "127.0.0.1:8002"])

    assert security.enable_dns_rebinding_protection is True
    assert security.allowed_hosts == ["gateway.internal:*", "127.0.0.1:8002"]
    assert security.allowed_origins == [
        "http://gateway.internal:*",
        "https://gateway.internal:*",
        "http://127.0.0.1:8002",
        "https://127.0.0.1:8002",
    ]
