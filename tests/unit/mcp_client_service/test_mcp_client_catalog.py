"""The aggregated catalog: config order, allow/deny lists and prefixes, name clashes (first_wins, prefix)."""

from __future__ import annotations

import json

from mcp_types import Tool, ToolAnnotations
from structlog.testing import capture_logs

from mcp_client_service.config.servers_file import StdioServerConfig
from mcp_client_service.registry.catalog import Away, NameClash, ServerTools, ToolCatalog, aggregate_tools


def _tool(name: str, description: str = "") -> Tool:
    return Tool(name=name, description=description, input_schema={"type": "object", "properties": {}})


def test_tools_of_ready_servers_are_listed_in_config_order_with_their_server() -> None:
    tools, clashes = aggregate_tools(
        [
            ServerTools(server="rag", ready=True, tools=[_tool("search_documents", "Search the docs")]),
            ServerTools(server="down", ready=False, tools=[], known_tools=[_tool("fetch_url")]),
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


def test_a_server_that_went_away_keeps_its_tools_listed_as_unavailable_with_when_to_retry() -> None:
    now = [100.0]
    catalog = ToolCatalog(clock=lambda: now[0])
    catalog.rebuild([ServerTools(server="web", ready=True, tools=[_tool("web_search")])])
    assert catalog.find("web_search") is not None

    away = Away(reason='its MCP server "web" is not ready (failed: killed by SIGKILL)', retry_at=108.0)
    catalog.rebuild([ServerTools(server="web", ready=False, tools=[], known_tools=[_tool("web_search")], away=away)])
    listed = json.loads(catalog.listing_json())
    now[0] = 100.5  # within a second: the JSON rendered at the rebuild is served as it is
    unchanged = json.loads(catalog.listing_json())
    now[0] = 103.0
    later = json.loads(catalog.listing_json())

    assert catalog.find("web_search") is None
    entry = catalog.unavailable("web_search")
    assert entry is not None
    assert (entry.server, entry.server_tool_name) == ("web", "web_search")
    assert catalog.unavailable("unknown") is None
    assert listed == {
        "tools": [
            {
                "name": "web_search",
                "description": "",
                "inputSchema": {"type": "object", "properties": {}},
                "server": "web",
                "unavailable": {
                    "reason": 'its MCP server "web" is not ready (failed: killed by SIGKILL)',
                    "retryAfterSeconds": 8.0,
                },
            }
        ]
    }
    assert unchanged == listed
    assert later["tools"][0]["unavailable"]["retryAfterSeconds"] == 5.0


def test_a_listed_tool_carries_its_title_annotations_and_output_schema() -> None:
    tool = Tool(
        name="delete_file",
        title="Delete a file",
        description="Deletes it.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        output_schema={"type": "object", "properties": {"deleted": {"type": "boolean"}}},
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True),
    )
    catalog = ToolCatalog()

    catalog.rebuild([ServerTools(server="files", ready=True, tools=[tool])])

    assert json.loads(catalog.listing_json())["tools"] == [
        {
            "name": "delete_file",
            "title": "Delete a file",
            "description": "Deletes it.",
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "outputSchema": {"type": "object", "properties": {"deleted": {"type": "boolean"}}},
            "annotations": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
            "server": "files",
        }
    ]


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
            ServerTools(server="primary", ready=False, tools=[], known_tools=[_tool("search")]),
            ServerTools(server="secondary", ready=True, tools=[_tool("search")]),
        ]
    )

    listed = [(tool.name, tool.unavailable is not None) for tool in catalog.listing().tools]
    assert listed == [("search", True), ("secondary__search", False)]
    assert catalog.unavailable("search").server == "primary"  # type: ignore[union-attr]


def test_under_first_wins_the_next_server_stands_in_while_the_first_is_away() -> None:
    catalog = ToolCatalog(collision="first_wins")

    catalog.rebuild(
        [
            ServerTools(server="primary", ready=False, tools=[], known_tools=[_tool("search")]),
            ServerTools(server="secondary", ready=True, tools=[_tool("search")]),
        ]
    )

    assert catalog.find("search") is not None
    assert catalog.find("search").server == "secondary"  # type: ignore[union-attr]
    assert [tool.server for tool in catalog.listing().tools] == ["secondary"]  # not listed twice


def test_a_rebuild_makes_a_new_listing_object_so_callers_can_tell_the_version() -> None:
    catalog = ToolCatalog()
    before = catalog.listing()

    catalog.rebuild([ServerTools(server="a", ready=True, tools=[_tool("x")])])

    assert catalog.listing() is not before


def test_every_servers_tool_is_found_by_its_server_and_own_name_shadowed_away_or_renamed() -> None:
    catalog = ToolCatalog(collision="first_wins")
    away = Away(reason="restarting", retry_at=5.0)

    catalog.rebuild(
        [
            ServerTools(server="primary", ready=True, tools=[_tool("search", "primary's")]),
            ServerTools(
                server="secondary",
                ready=True,
                tools=[_tool("search", "secondary's"), _tool("hidden")],
                offers=lambda name: name != "hidden",
            ),
            ServerTools(server="prefixed", ready=True, tools=[_tool("search", "prefixed's")], tool_prefix="p_"),
            ServerTools(server="resting", ready=False, tools=[], known_tools=[_tool("search", "resting's")], away=away),
        ]
    )

    assert [tool.server for tool in catalog.listing().tools if tool.name == "search"] == ["primary"]
    shadowed = catalog.served("secondary", server_tool="search")
    assert shadowed is not None
    assert (shadowed.name, shadowed.tool.description, shadowed.away) == ("search", "secondary's", None)
    assert catalog.served("secondary", name="search") is shadowed
    assert catalog.served("secondary", name="secondary__search") is shadowed  # the name it has under prefix
    assert catalog.served("secondary", server_tool="hidden") is None  # not offered: its deniedTools
    renamed = catalog.served("prefixed", server_tool="search")
    assert renamed is not None
    assert renamed.name == "p_search"
    assert catalog.served("prefixed", name="p_search") is renamed
    assert catalog.served("prefixed", name="search") is None  # never listed so
    resting = catalog.served("resting", server_tool="search")
    assert resting is not None
    assert (resting.tool.description, resting.away) == ("resting's", away)
    assert catalog.served("nowhere", server_tool="search") is None


def test_under_prefix_a_servers_tool_is_found_by_its_prefixed_name_and_its_own() -> None:
    catalog = ToolCatalog(collision="prefix")

    catalog.rebuild(
        [
            ServerTools(server="primary", ready=True, tools=[_tool("search")]),
            ServerTools(server="web search", ready=True, tools=[_tool("search", "secondary's")]),
        ]
    )

    served = catalog.served("web search", server_tool="search")
    assert served is not None
    assert (served.name, served.tool.description) == ("web_search__search", "secondary's")
    assert catalog.served("web search", name="web_search__search") is served
    assert catalog.served("web search", name="search") is served
