"""The strict schema check of a server's tools, and the filter that drops the bad ones from a listing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest, JSONRPCResponse

from mcp_client_service.config.schemas import ToolListingFilter, input_schema_problem
from mcp_client_service.transport.session_transport import WatchedTransport

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


@pytest.mark.parametrize("runs_tasks", [True, False], ids=["server offers tasks", "server offers none"])
def test_a_task_only_tool_is_kept_when_the_gateway_can_run_it_as_a_task(runs_tasks: bool) -> None:
    listing = ToolListingFilter()
    listing.protocol_version = "2025-11-25"
    listing.runs_tasks = runs_tasks
    listing.note_sent(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=1, method="tools/list")))
    tools = [
        {"name": "direct", "inputSchema": OBJECT},
        {"name": "task_only", "inputSchema": OBJECT, "execution": {"taskSupport": "required"}},
    ]

    filtered = listing.filter_received(_response(1, tools))

    assert isinstance(filtered.message, JSONRPCResponse)
    kept = [tool["name"] for tool in filtered.message.result["tools"]]
    dropped = [(tool.name, tool.kind) for tool in listing.take_dropped()]
    if runs_tasks:
        assert (kept, dropped) == (["direct", "task_only"], [])
    else:
        assert (kept, dropped) == (["direct"], [("task_only", "task_required")])


def _nested(levels: int) -> dict[str, Any]:
    """An object schema with ``levels`` levels of properties (twice as deep as JSON)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


@pytest.mark.parametrize("levels", [60, 150])
def test_a_schema_nested_deeper_than_the_limit_is_dropped_naming_its_depth(levels: int) -> None:
    problem = input_schema_problem({"name": "t", "inputSchema": _nested(levels)})

    assert problem == (f"its inputSchema is nested {2 * levels + 1} levels deep, more than the 100 the gateway accepts")


def test_an_output_schema_nested_too_deeply_drops_the_tool_too() -> None:
    problem = input_schema_problem({"name": "t", "inputSchema": OBJECT, "outputSchema": _nested(60)})

    assert problem is not None
    assert problem.startswith("its outputSchema is nested 121 levels deep")


def _listing_page(
    listing: ToolListingFilter, request_id: int, tools: list[Any], cursor: str | None, **extra: Any
) -> Any:
    params = {"cursor": cursor} if cursor else None
    listing.note_sent(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=request_id, method="tools/list", params=params)))
    filtered = listing.filter_received(_response(request_id, tools, **extra))
    assert isinstance(filtered.message, JSONRPCResponse)
    return filtered.message.result


def test_tools_beyond_the_cap_are_left_out_and_no_further_page_is_asked_for() -> None:
    listing = ToolListingFilter(max_tools=5)
    listing.protocol_version = "2025-06-18"
    page = [{"name": f"t{n}", "inputSchema": OBJECT} for n in range(3)]

    first = _listing_page(listing, 1, page, None, nextCursor="p2")
    second = _listing_page(
        listing, 2, [{"name": f"u{n}", "inputSchema": OBJECT} for n in range(4)], "p2", nextCursor="p3"
    )

    assert [tool["name"] for tool in first["tools"]] == ["t0", "t1", "t2"]
    assert first["nextCursor"] == "p2"
    assert [tool["name"] for tool in second["tools"]] == ["u0", "u1"]
    assert "nextCursor" not in second  # the listing ends here
    assert listing.take_left_out() == 2
    assert listing.take_left_out() == 0

    again = _listing_page(listing, 3, page, None)  # a new listing starts from the cap again
    assert len(again["tools"]) == 3


def test_a_listing_that_fills_the_cap_exactly_asks_for_no_further_page() -> None:
    listing = ToolListingFilter(max_tools=3)
    page = [{"name": f"t{n}", "inputSchema": OBJECT} for n in range(3)]

    result = _listing_page(listing, 1, page, None, nextCursor="p2")

    assert len(result["tools"]) == 3
    assert "nextCursor" not in result


def test_the_verdict_on_a_tool_is_remembered_across_listings_and_sessions() -> None:
    verdicts: dict[tuple[str | None, str], str | None] = {}
    tools = [{"name": "good", "inputSchema": OBJECT}, {"name": "bad", "inputSchema": {"type": "objekt"}}]
    first = ToolListingFilter(verdicts=verdicts)
    _listing_page(first, 1, tools, None)
    dropped_first = first.take_dropped()

    # A second session's filter with the same verdicts re-checks nothing: not even a bad schema's
    # metaschema check runs again (the verdicts are what it answers from).
    for key in verdicts:
        verdicts[key] = "remembered" if verdicts[key] else None
    second = ToolListingFilter(verdicts=verdicts)
    result = _listing_page(second, 1, tools, None)

    assert [tool.name for tool in dropped_first] == ["bad"]
    assert [tool["name"] for tool in result["tools"]] == ["good"]
    assert [(tool.name, tool.reason) for tool in second.take_dropped()] == [("bad", "remembered")]


@pytest.mark.anyio
async def test_a_large_listing_is_checked_off_the_event_loop() -> None:
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](1)
    to_server, _sent = anyio.create_memory_object_stream[SessionMessage](1)

    @asynccontextmanager
    async def transport() -> AsyncIterator[tuple[Any, Any]]:
        yield from_server, to_server

    # Distinct tools (each one checked), with schemas that take the metaschema check a while.
    properties = {f"p{n}": {"type": "string", "enum": ["a", "b"], "description": "d"} for n in range(8)}
    tools = [{"name": f"t{n}", "inputSchema": {"type": "object", "properties": properties}} for n in range(300)]
    listing = ToolListingFilter()
    loop_turns = 0
    checked = anyio.Event()

    async def count_loop_turns() -> None:
        nonlocal loop_turns
        while not checked.is_set():
            loop_turns += 1
            await anyio.lowlevel.checkpoint()

    async with WatchedTransport(transport(), lambda: None, listing) as (read_stream, write_stream):
        await write_stream.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=1, method="tools/list")))
        await to_session.send(_response(1, tools))
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(count_loop_turns)
                received = await read_stream.receive()
                checked.set()

    assert isinstance(received, SessionMessage)
    assert isinstance(received.message, JSONRPCResponse)
    assert len(received.message.result["tools"]) == 300
    # Checked synchronously, the loop would not have turned while the 300 tools were checked.
    assert loop_turns > 20
