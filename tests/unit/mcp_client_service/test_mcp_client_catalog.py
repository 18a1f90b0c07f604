"""The aggregated catalog: config order, allow/deny lists and prefixes, name clashes (first_wins, prefix)."""

from __future__ import annotations

import json

from mcp_types import Tool
from structlog.testing import capture_logs

from mcp_client_service.catalog import NameClash, ServerTools, ToolCatalog, aggregate_tools
from mcp_client_service.config import StdioServerConfig


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
    assert tools["search_documents"].tool.description == "Search the docs"
    assert clashes == []


def test_on_a_name_clash_the_first_server_in_the_config_wins() -> None:
    tools, clashes = aggregate_tools(
        [
            ServerTools(server="primary", ready=True, tools=[_tool("search", "primary's")]),
            ServerTools(server="secondary", ready=True, tools=[_tool("search", "secondary's"), _tool("other")]),
        ]
    )

    assert (tools["search"].server, tools["search"].tool.description) == ("primary", "primary's")
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


def test_allow_and_deny_lists_and_the_tool_prefix_shape_what_a_server_offers() -> None:
    config = StdioServerConfig(command="gh", allowedTools=("search_*", "get_issue"), deniedTools=("search_admin",))
    server = ServerTools(
        server="github",
        ready=True,
        tools=[_tool(name) for name in ("search_code", "search_admin", "get_issue", "delete_repo")],
        tool_prefix="gh_",
        offers=config.offers,
    )

    tools, _ = aggregate_tools([server])

    assert [(name, entry.server_tool_name) for name, entry in tools.items()] == [
        ("gh_search_code", "search_code"),
        ("gh_get_issue", "get_issue"),
    ]


def test_under_prefix_the_first_server_keeps_the_name_and_later_ones_get_theirs_prefixed() -> None:
    catalog = ToolCatalog(collision="prefix")
    servers = [
        ServerTools(server="primary", ready=True, tools=[_tool("search", "primary's")]),
        ServerTools(server="web search", ready=True, tools=[_tool("search", "secondary's"), _tool("other")]),
    ]

    with capture_logs() as logs:
        catalog.rebuild(servers)

    listed = {tool.name: tool.server for tool in catalog.listing().tools}
    assert listed == {"search": "primary", "web_search__search": "web search", "other": "web search"}
    entry = catalog.entry("web_search__search")
    assert entry is not None
    assert (entry.server_tool_name, entry.tool.description) == ("search", "secondary's")
    clash = next(log for log in logs if log["event"] == "mcp_tool_name_clash")
    assert (clash["server"], clash["ignored_server"], clash["renamed_to"]) == (
        "primary",
        "web search",
        "web_search__search",
    )


def test_under_prefix_a_name_stays_with_its_server_while_the_first_server_is_away() -> None:
    catalog = ToolCatalog(collision="prefix")

    catalog.rebuild(
        [
            ServerTools(server="primary", ready=False, tools=[], known_tool_names=["search"]),
            ServerTools(server="secondary", ready=True, tools=[_tool("search")]),
        ]
    )

    assert [tool.name for tool in catalog.listing().tools] == ["secondary__search"]
    assert catalog.server_away_with("search") == "primary"


def test_under_first_wins_the_next_server_stands_in_while_the_first_is_away() -> None:
    catalog = ToolCatalog(collision="first_wins")

    catalog.rebuild(
        [
            ServerTools(server="primary", ready=False, tools=[], known_tool_names=["search"]),
            ServerTools(server="secondary", ready=True, tools=[_tool("search")]),
        ]
    )

    assert catalog.find("search") is not None
    assert catalog.find("search").server == "secondary"  # type: ignore[union-attr]


def test_a_rebuild_makes_a_new_listing_object_so_callers_can_tell_the_version() -> None:
    catalog = ToolCatalog()
    before = catalog.listing()

    catalog.rebuild([ServerTools(server="a", ready=True, tools=[_tool("x")])])

    assert catalog.listing() is not before
