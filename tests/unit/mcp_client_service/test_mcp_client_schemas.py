"""The strict schema check of a server's tools, and the filter that drops the bad ones from a listing."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest, JSONRPCResponse

from mcp_client_service.schemas import ToolListingFilter, input_schema_problem

OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


@pytest.mark.parametrize(
    "schema",
    [
        OBJECT,
        {"type": "object"},
        {"type": "object", "$defs": {"p": {"type": "string"}}, "properties": {"p": {"$ref": "#/$defs/p"}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "definitions": {}},
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "dependentRequired": {"a": ["b"]},
        },
    ],
)
def test_valid_object_schemas_of_known_dialects_pass(schema: dict[str, Any]) -> None:
    assert input_schema_problem({"name": "t", "inputSchema": schema}) is None


@pytest.mark.parametrize(
    ("tool", "reason"),
    [
        ({"name": "t"}, "it has no inputSchema"),
        ({"name": "t", "inputSchema": "object"}, "its inputSchema is a JSON string, not an object"),
        ({"name": "t", "inputSchema": None}, "its inputSchema is a JSON null, not an object"),
        ({"name": "t", "inputSchema": [OBJECT]}, "its inputSchema is a JSON array, not an object"),
        (
            {"name": "t", "inputSchema": {"type": "objekt"}},
            "its inputSchema is not a valid JSON Schema (draft2020-12) at type: 'objekt' is not valid",
        ),
        (
            {"name": "t", "inputSchema": {"type": "object", "properties": {"n": {"minimum": "zero"}}}},
            "its inputSchema is not a valid JSON Schema (draft2020-12) at properties/n/minimum: 'zero' is not of type",
        ),
        (
            {
                "name": "t",
                "inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": 3},
            },
            "its inputSchema is not a valid JSON Schema (draft-07) at required: 3 is not of type 'array'",
        ),
        (
            {"name": "t", "inputSchema": {"$schema": "https://example.com/mine", "type": "object"}},
            "its inputSchema declares an unknown JSON Schema dialect (https://example.com/mine)",
        ),
        (
            {"name": "t", "inputSchema": {"type": "array"}},
            'its inputSchema is not an object schema (MCP requires "type"',
        ),
        ({"name": "t", "inputSchema": {"properties": {}}}, "its inputSchema is not an object schema"),
    ],
)
def test_unusable_schemas_are_named_with_the_reason(tool: dict[str, Any], reason: str) -> None:
    problem = input_schema_problem(tool)

    assert problem is not None
    assert problem.startswith(reason)


def _response(request_id: int, tools: list[Any], **extra: Any) -> SessionMessage:
    return SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"tools": tools, **extra}))


def test_the_filter_drops_bad_tools_from_tools_list_responses_only() -> None:
    listing = ToolListingFilter()
    listing.protocol_version = "2025-06-18"
    listing.note_sent(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=7, method="tools/list")))
    listing.note_sent(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=8, method="tools/call")))
    tools = [
        {"name": "good", "inputSchema": OBJECT},
        {"name": "missing"},
        {"name": "bad", "inputSchema": {"type": 5}},
        "not a tool",
        {"name": "bad_icons", "inputSchema": OBJECT, "icons": "none"},
        {"name": "also_good", "inputSchema": {"type": "object"}},
    ]

    filtered = listing.filter_received(_response(7, tools, nextCursor="2"))
    untouched = listing.filter_received(_response(8, tools))

    assert isinstance(filtered.message, JSONRPCResponse)
    assert [tool["name"] for tool in filtered.message.result["tools"]] == ["good", "also_good"]
    assert filtered.message.result["nextCursor"] == "2"
    assert isinstance(untouched.message, JSONRPCResponse)
    assert untouched.message.result["tools"] == tools  # a tools/call result is not a listing
    dropped = {tool.name: tool.reason for tool in listing.take_dropped()}
    assert dropped.keys() == {"missing", "bad", "(unnamed)", "bad_icons"}
    assert dropped["bad_icons"].startswith("it is not a valid MCP tool: icons: ")
    assert listing.take_dropped() == []


def test_a_listing_with_only_good_tools_passes_as_it_is() -> None:
    listing = ToolListingFilter()
    listing.note_sent(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id="a", method="tools/list")))
    response = SessionMessage(
        JSONRPCResponse(jsonrpc="2.0", id="a", result={"tools": [{"name": "x", "inputSchema": OBJECT}]})
    )

    assert listing.filter_received(response) is response
