"""The aggregated catalog: config order, first server wins a name clash, clashes are logged."""

from __future__ import annotations

import json

from mcp_types import Tool
from structlog.testing import capture_logs

from mcp_client_service.catalog import NameClash, ServerTools, ToolCatalog, aggregate_tools


def _tool(name: str, description: str = "") -> Tool:
    return Tool(name=name, description=description, input_schema={"type": "object", "properties": {}})


def test_tools_of_ready_servers_are_listed_in_config_order_with_their_server() -> None:
    tools, clashes = aggregate_tools(
        [
            ServerTools(server="rag", ready=True, tools=[_tool("search_documents", "Search the docs")]),
            ServerTools(server="down", ready=False, tools=[], known_tool_names=["fetch_url"]),
            ServerTools(server="web", ready=True, tools=[_tool("web_search"), _tool("fetch_url")]),
        ]
    )

    assert [(tool.name, tool.server) for tool in tools.values()] == [
        ("search_documents", "rag"),
        ("web_search", "web"),
        ("fetch_url", "web"),
    ]
    assert tools["search_documents"].description == "Search the docs"
    assert clashes == []


def test_on_a_name_clash_the_first_server_in_the_config_wins() -> None:
    tools, clashes = aggregate_tools(
        [
            ServerTools(server="primary", ready=True, tools=[_tool("search", "primary's")]),
            ServerTools(server="secondary", ready=True, tools=[_tool("search", "secondary's"), _tool("other")]),
        ]
    )

    assert (tools["search"].server, tools["search"].description) == ("primary", "primary's")
    assert tools["other"].server == "secondary"
    assert clashes == [NameClash(tool="search", winner="primary", ignored="secondary")]


def test_a_clash_is_logged_once_with_both_servers_and_the_listing_is_served_as_json() -> None:
    catalog = ToolCatalog()
    servers = [
        ServerTools(server="primary", ready=True, tools=[_tool("search")]),
        ServerTools(server="secondary", ready=True, tools=[_tool("search")]),
    ]

    with capture_logs() as logs:
        catalog.rebuild(servers)
        catalog.rebuild(servers)  # the same clash again is not news

    clash_logs = [entry for entry in logs if entry["event"] == "mcp_tool_name_clash"]
    assert len(clash_logs) == 1
    assert (clash_logs[0]["tool"], clash_logs[0]["server"], clash_logs[0]["ignored_server"]) == (
        "search",
        "primary",
        "secondary",
    )
    assert json.loads(catalog.listing_json()) == {
        "tools": [
            {
                "name": "search",
                "description": "",
                "inputSchema": {"type": "object", "properties": {}},
                "server": "primary",
            }
        ]
    }


def test_a_server_that_went_away_is_remembered_for_its_tools_until_it_returns() -> None:
    catalog = ToolCatalog()
    catalog.rebuild([ServerTools(server="web", ready=True, tools=[_tool("web_search")])])
    assert catalog.find("web_search") is not None

    catalog.rebuild([ServerTools(server="web", ready=False, tools=[], known_tool_names=["web_search"])])

    assert catalog.find("web_search") is None
    assert catalog.server_away_with("web_search") == "web"
    assert catalog.server_away_with("unknown") is None
    assert json.loads(catalog.listing_json()) == {"tools": []}
