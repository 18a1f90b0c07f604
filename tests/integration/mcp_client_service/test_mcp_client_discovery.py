"""Discovery: strict schema checks, servers that are slow or change their tools, the catalog's cache,
name collisions, and real third-party and SSE servers.

The misbehaving servers are real processes over stdio (``support/raw_mcp_server.py``) or real
MCP servers over HTTP in this process.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ListToolsResult, PaginatedRequestParams, Tool
from structlog.testing import capture_logs

from support.echo_mcp_server import ECHO_TOOLS
from support.mcp_gateway import (
    FAST_RETRIES,
    WAIT_SECONDS,
    Gateway,
    echo_http_server,
    echo_stdio_server,
    leaves_no_child_processes,
    raw_stdio_server,
    running_gateway,
)
from support.raw_mcp_server import INVALID_TOOLS
from support.servers import serve_app

pytestmark = pytest.mark.anyio

LIST = "/mcp/v1/tools/list-tools"
CALL = "/mcp/v1/tools/call-tool"
QUIET: dict[str, Any] = {"health_check_interval_seconds": 3600.0, "catalog_cache_seconds": 3600.0}
"""Neither probes nor TTL refreshes: only a notification can make the gateway list again."""


async def _listed(gateway: Gateway) -> dict[str, str]:
    response = await gateway.http.get(LIST)
    assert response.status_code == 200
    return {tool["name"]: tool["server"] for tool in response.json()["tools"]}


async def _status(gateway: Gateway, name: str) -> dict[str, Any]:
    servers = (await gateway.http.get("/mcp/v1/servers")).json()["servers"]
    status: dict[str, Any] = next(server for server in servers if server["name"] == name)
    return status


async def _call(gateway: Gateway, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = await gateway.http.post(CALL, json={"name": name, "arguments": arguments})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _wait_for_tool(gateway: Gateway, name: str) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        await gateway.registry.wait_until(lambda registry: registry.catalog.find(name) is not None)


@contextmanager
def _events(*names: str) -> Iterator[list[MutableMapping[str, Any]]]:
    """The structlog events of these names logged in the block (available once it ends)."""
    selected: list[MutableMapping[str, Any]] = []
    with capture_logs() as logs:
        yield selected
        selected.extend(log for log in logs if log["event"] in names)


async def test_tools_with_unusable_schemas_are_dropped_logged_and_named_on_the_status() -> None:
    with (
        leaves_no_child_processes(),
        capture_logs() as logs,
    ):
        async with running_gateway({"mixed": raw_stdio_server("invalid-schemas")}) as gateway:
            await gateway.wait_until_ready("mixed")
            listed = await _listed(gateway)
            status = await _status(gateway, "mixed")
            called = await _call(gateway, "good", {})

    assert listed == {"echo": "mixed", "pid": "mixed", "good": "mixed"}
    assert called["content"] == [{"type": "text", "text": "good called"}]
    assert status["state"] == "degraded"  # serving, but not all of its tools
    assert status["toolCount"] == 3
    reasons = {tool["name"]: tool["reason"] for tool in status["invalidTools"]}
    assert reasons.keys() == INVALID_TOOLS.keys()
    assert reasons["no_schema"] == "it has no inputSchema"
    assert reasons["bad_draft7"].startswith("its inputSchema is not a valid JSON Schema (draft-07) at properties/n")
    logged = {log["tool"]: log for log in logs if log["event"] == "mcp_tool_invalid_schema"}
    assert logged.keys() == INVALID_TOOLS.keys()
    assert all(log["server"] == "mixed" and log["log_level"] == "warning" for log in logged.values())
    assert not [log for log in logs if log["event"] == "mcp_server_no_valid_tools"]


async def test_a_repeated_name_and_a_task_only_tool_of_a_server_without_tasks_are_dropped_and_logged() -> None:
    with capture_logs() as logs:
        async with running_gateway({"odd": raw_stdio_server("odd-tools")}) as gateway:
            await gateway.wait_until_ready("odd")
            tools = {tool["name"]: tool for tool in (await gateway.http.get(LIST)).json()["tools"]}
            status = await _status(gateway, "odd")
            echoed = await _call(gateway, "echo", {"text": "the first echo"})
            task_only = await gateway.http.post(CALL, json={"name": "long_job", "arguments": {}})

    assert set(tools) == {"echo", "pid", "maybe_task"}  # a tool that may run as a task may run directly too
    assert tools["echo"]["description"] == "Return the text."
    assert echoed["content"] == [{"type": "text", "text": "the first echo"}]
    assert task_only.status_code == 404
    assert status["toolCount"] == 3
    assert {tool["name"]: tool["reason"] for tool in status["invalidTools"]} == {
        "echo": "another tool of this server has the same name; the first one is listed",
        "long_job": 'it can only run as a task (execution.taskSupport is "required"), and the server does not '
        "offer tools/call as a task (capabilities.tasks.requests.tools.call at protocol 2025-11-25)",
    }
    [duplicate] = [log for log in logs if log["event"] == "mcp_tool_duplicate_name"]
    [task] = [log for log in logs if log["event"] == "mcp_tool_task_required"]
    assert (duplicate["server"], duplicate["tool"], task["tool"]) == ("odd", "echo", "long_job")


async def test_a_server_left_with_no_valid_tool_is_logged_and_lists_nothing() -> None:
    with capture_logs() as logs:
        servers = {"broken": raw_stdio_server("no-valid-tools"), "fine": echo_stdio_server("fine")}
        async with running_gateway(servers) as gateway:
            await gateway.wait_until_ready("broken", "fine")
            listed = await _listed(gateway)
            status = await _status(gateway, "broken")

    assert set(listed.values()) == {"fine"}
    assert (status["state"], status["toolCount"], len(status["invalidTools"])) == ("degraded", 0, len(INVALID_TOOLS))
    [warning] = [log for log in logs if log["event"] == "mcp_server_no_valid_tools"]
    assert (warning["server"], warning["dropped"]) == ("broken", len(INVALID_TOOLS))


async def test_a_server_slow_to_list_its_tools_blocks_no_other_and_fails_with_a_timeout() -> None:
    async with echo_http_server("web", tool_prefix="web_") as url:
        servers = {
            "slow": raw_stdio_server("slow-list", "--delay", "60"),
            "local": raw_stdio_server("plain"),
            "web": {"url": url},
        }
        with leaves_no_child_processes():
            async with running_gateway(servers, list_timeout_seconds=4) as gateway:
                await gateway.wait_until_ready("local", "web")
                listed_while_slow_lists = await _listed(gateway)
                slow_state = gateway.registry.connections["slow"].state
                await gateway.wait_until_failed("slow")
                status = await _status(gateway, "slow")

    assert slow_state == "connecting"
    assert listed_while_slow_lists == {"echo": "local", "pid": "local"} | {f"web_{name}": "web" for name in ECHO_TOOLS}
    assert status["lastError"] == "TimeoutError: listing tools timed out after 4 s"


async def test_a_handshake_era_server_that_announces_changed_tools_is_listed_again_at_once() -> None:
    async with running_gateway({"growing": raw_stdio_server("list-changed")}, **QUIET) as gateway:
        await gateway.wait_until_ready("growing")
        assert "sprout" not in await _listed(gateway)

        with _events("mcp_server_tools_list_changed") as announced:
            await _call(gateway, "grow", {"name": "sprout"})  # answers, then sends notifications/tools/list_changed
            await _wait_for_tool(gateway, "sprout")

        called = await _call(gateway, "sprout", {})

    assert announced[0]["server"] == "growing"
    assert called["content"] == [{"type": "text", "text": "sprout called"}]


def _growing_server() -> MCPServer:
    """A 2026-era server whose ``grow(name)`` adds a tool and announces it on listen streams."""
    server = MCPServer("growing")

    async def grow(name: str, ctx: Context) -> str:
        def sprout() -> str:
            return f"{name} here"

        server.add_tool(sprout, name=name)
        await ctx.notify_tools_changed()
        return "grown"

    server.add_tool(grow)
    return server


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_a_2026_server_that_announces_changed_tools_on_its_listen_stream_is_listed_again(
    transport: str,
) -> None:
    server = _growing_server()
    app = server.streamable_http_app() if transport == "streamable-http" else server.sse_app()
    async with serve_app(app) as url:
        config = {"url": url + "/mcp"} if transport == "streamable-http" else {"type": "sse", "url": url + "/sse"}
        async with running_gateway({"growing": config}, **QUIET) as gateway:
            await gateway.wait_until_ready("growing")
            connection = gateway.registry.connections["growing"]

            await _call(gateway, "grow", {"name": "sprout"})
            await _wait_for_tool(gateway, "sprout")
            called = await _call(gateway, "sprout", {})
            status = await _status(gateway, "growing")

    assert connection.transport == transport
    assert called["content"] == [{"type": "text", "text": "sprout here"}]
    assert status["transport"] == transport


def _counting_server(names: list[str], calls: list[int]) -> Server[Any]:
    """A server whose tool list is ``names`` as it is at each ``tools/list``, counted in ``calls``."""

    async def list_tools(_: ServerRequestContext[Any], __: PaginatedRequestParams | None) -> ListToolsResult:
        calls.append(1)
        return ListToolsResult(tools=[Tool(name=name, input_schema={"type": "object"}) for name in names])

    return Server("counting", on_list_tools=list_tools)


async def test_list_tools_is_served_from_the_cache_without_asking_the_servers() -> None:
    names, lists = ["a"], list[int]()
    async with (
        serve_app(_counting_server(names, lists).streamable_http_app()) as url,
        running_gateway({"counting": {"url": url + "/mcp"}}, **QUIET) as gateway,
    ):
        await gateway.wait_until_ready("counting")
        listed_at_connect = len(lists)
        names.append("b")  # changed silently: no notification

        for _ in range(5):
            assert await _listed(gateway) == {"a": "counting"}

    assert len(lists) == listed_at_connect == 1


async def test_a_silent_change_is_picked_up_when_the_catalog_ttl_passes() -> None:
    names, lists = ["a"], list[int]()
    async with (
        serve_app(_counting_server(names, lists).streamable_http_app()) as url,
        running_gateway(
            {"counting": {"url": url + "/mcp"}}, catalog_cache_seconds=0.3, health_check_interval_seconds=3600
        ) as gateway,
    ):
        await gateway.wait_until_ready("counting")
        names.append("b")

        await _wait_for_tool(gateway, "b")
        listed = await _listed(gateway)

    assert listed == {"a": "counting", "b": "counting"}
    assert len(lists) >= 2


async def test_under_the_prefix_policy_clashing_tools_of_later_servers_are_listed_as_server__tool() -> None:
    async with echo_http_server("shadow") as url:
        servers = {"local": echo_stdio_server("local"), "shadow": {"url": url}}
        with _events("mcp_tool_name_clash") as clashes:
            async with running_gateway(servers, tool_name_collision="prefix") as gateway:
                await gateway.wait_until_ready("local", "shadow")
                listed = await _listed(gateway)
                first = await _call(gateway, "whoami", {})
                second = await _call(gateway, "shadow__whoami", {})

    assert listed["whoami"] == "local"
    assert listed["shadow__whoami"] == "shadow"
    assert len(listed) == 2 * len(ECHO_TOOLS)
    assert (first["content"][0]["text"], second["content"][0]["text"]) == ("local", "shadow")
    assert {(clash["server"], clash["ignored_server"], clash["renamed_to"]) for clash in clashes} >= {
        ("local", "shadow", "shadow__whoami")
    }


async def test_a_servers_allow_list_deny_list_and_prefix_decide_what_it_offers_and_under_which_name() -> None:
    config = {
        **echo_stdio_server("local"),
        "toolPrefix": "loc_",
        "allowedTools": ["e*", "add"],
        "deniedTools": ["env_*"],
    }
    async with running_gateway({"local": config}) as gateway:
        await gateway.wait_until_ready("local")
        listed = await _listed(gateway)
        echoed = await _call(gateway, "loc_echo", {"text": "through the prefix"})
        denied = await gateway.http.post(CALL, json={"name": "loc_env_keys", "arguments": {}})
        status = await _status(gateway, "local")

    assert set(listed) == {"loc_echo", "loc_add"}
    assert status["toolCount"] == 2  # what it offers, not what the server lists
    assert echoed["content"] == [{"type": "text", "text": "through the prefix"}]
    assert denied.status_code == 404


async def test_the_third_party_time_server_is_listed_and_called_over_stdio() -> None:
    # mcp-server-time from PyPI, as its README configures it; it needs no network.
    time_server = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
    with leaves_no_child_processes():
        async with running_gateway({"time": time_server}, **FAST_RETRIES) as gateway:
            await gateway.wait_until_ready("time")
            listed = await _listed(gateway)
            described = {tool["name"]: tool for tool in (await gateway.http.get(LIST)).json()["tools"]}
            converted = await _call(
                gateway,
                "convert_time",
                {"source_timezone": "Europe/Paris", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            )
            refused = await _call(gateway, "get_current_time", {"timezone": "Mars/Olympus_Mons"})

    assert listed == {"get_current_time": "time", "convert_time": "time"}
    # The whole description on REST, as the server sent it: annotations and output schema included.
    assert described["convert_time"]["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    assert "target" in described["convert_time"]["outputSchema"]["properties"]
    assert converted["isError"] is False
    structured = converted["structuredContent"]
    assert structured["source"]["datetime"][11:19] == "12:00:00"
    assert structured["target"]["timezone"] == "Asia/Tokyo"
    # Tokyo is 8 hours ahead of Paris in winter, 7 in summer.
    assert (structured["target"]["datetime"][11:16], structured["time_difference"]) in (
        ("20:00", "+8.0h"),
        ("19:00", "+7.0h"),
    )
    assert refused["isError"] is True


async def test_a_tool_with_a_schema_nested_too_deeply_is_dropped_and_the_others_are_listed() -> None:
    # The deep schema is beyond what the SDK's JSON parser reads: the listing would fail whole,
    # and the server with it, again and again.
    with capture_logs() as logs:
        async with running_gateway({"deep": raw_stdio_server("deep-schema")}) as gateway:
            await gateway.wait_until_ready("deep")
            listed = await _listed(gateway)
            status = await _status(gateway, "deep")

    assert listed == {"echo": "deep", "pid": "deep"}
    assert status["state"] == "degraded"
    assert status["invalidTools"] == [
        {"name": "deep", "reason": "its inputSchema is nested 301 levels deep, more than the 100 the gateway accepts"}
    ]
    assert gateway.registry.connections["deep"].attempts == 1
    assert [log["tool"] for log in logs if log["event"] == "mcp_tool_invalid_schema"] == ["deep"]


async def test_a_server_with_more_tools_than_the_cap_is_listed_up_to_it_and_logged() -> None:
    names, lists = [f"tool_{n:03}" for n in range(40)], list[int]()
    with _events("mcp_server_too_many_tools") as too_many:
        async with (
            serve_app(_counting_server(names, lists).streamable_http_app()) as url,
            running_gateway({"many": {"url": url + "/mcp"}}, max_tools_per_server=25, **QUIET) as gateway,
        ):
            await gateway.wait_until_ready("many")
            listed = await _listed(gateway)

    assert sorted(listed) == names[:25]
    [warning] = too_many
    assert (warning["server"], warning["listed"], warning["left_out"]) == ("many", 25, 15)


async def test_changes_announced_in_quick_succession_are_listed_once_per_debounce_period() -> None:
    settings = {**QUIET, "list_changed_debounce_seconds": 1.0}
    async with running_gateway({"growing": raw_stdio_server("list-changed")}, **settings) as gateway:
        await gateway.wait_until_ready("growing")

        # 20 tools, each announced on its own, 50 ms apart: 1 s of notifications.
        await _call(gateway, "grow_many", {"prefix": "sprout_", "count": 20, "interval": 0.05})
        await _wait_for_tool(gateway, "sprout_19")
        lists = int((await _call(gateway, "list_count", {}))["content"][0]["text"])
        listed = await _listed(gateway)

    assert {f"sprout_{n}" for n in range(20)} <= listed.keys()
    # The first listing at connect, then at most one per second of announcements (not 20).
    assert 2 <= lists <= 4
