"""``call-tool`` held to a server: with ``server`` (and ``serverTool``) the gateway calls that server's tool, or
nothing, whatever the name resolves to now; ``list-tools`` names a renamed tool's own name (``serverTool``).

Two real echo servers over stdio, ``echo-a`` first in the config, so under ``first_wins`` the names both offer
(``whoami``, ``pid``, ...) are ``echo-a``'s while it serves and ``echo-b``'s while it is away; ``echo-b``'s are
then shadowed, not listed, and still callable by a caller that names ``echo-b``.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from structlog.testing import capture_logs

from support.mcp_gateway import WAIT_SECONDS, Gateway, echo_stdio_server, running_gateway
from support.servers import serve_app

pytestmark = pytest.mark.anyio

CALL = "/mcp/v1/tools/call-tool"
LIST = "/mcp/v1/tools/list-tools"

BOTH = {"echo-a": echo_stdio_server("echo-a"), "echo-b": echo_stdio_server("echo-b")}


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[Gateway]:
    async with running_gateway(BOTH) as gateway:
        await gateway.wait_until_ready("echo-a", "echo-b")
        yield gateway


async def _reload(gateway: Gateway, servers: dict[str, Any]) -> None:
    gateway.write_servers(servers)
    reloaded = await gateway.http.post("/mcp/v1/servers/reload")
    assert reloaded.status_code == 200, reloaded.text
    await gateway.wait_until_ready(*servers)


async def _listed(gateway: Gateway) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in (await gateway.http.get(LIST)).json()["tools"]}


def _servers_called(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    return [log["server"] for log in logs if log["event"] == "mcp_tool_call"]


def _streamed_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) of an SSE answer, ``message`` for an event without a name."""
    events, name = [], "message"
    for line in text.splitlines():
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            events.append((name, json.loads(line.removeprefix("data:"))))
            name = "message"
    return events


async def test_a_call_held_to_a_server_runs_there_although_the_name_moved_to_another(gateway: Gateway) -> None:
    try:
        await _reload(gateway, {"echo-b": BOTH["echo-b"]})  # echo-a away: its names fall to echo-b
        planned = (await _listed(gateway))["whoami"]
        assert planned["server"] == "echo-b"
        held = {"name": "whoami", "server": "echo-b", "serverTool": "whoami"}

        await _reload(gateway, BOTH)  # echo-a back, first again: "whoami" is echo-a's, echo-b's is shadowed
        assert (await _listed(gateway))["whoami"]["server"] == "echo-a"
        with capture_logs() as logs:
            answered = await gateway.http.post(CALL, json=held)
            streamed = await gateway.http.post(CALL, json=held, headers={"accept": "text/event-stream"})
        unheld = await gateway.http.post(CALL, json={"name": "whoami"})  # the contract without a server
    finally:
        await _reload(gateway, BOTH)

    assert answered.status_code == 200, answered.text
    assert (answered.json()["server"], answered.json()["content"]) == ("echo-b", [{"type": "text", "text": "echo-b"}])
    [(event, result)] = _streamed_events(streamed.text)
    assert (event, result["server"], result["content"][0]["text"]) == ("result", "echo-b", "echo-b")
    assert _servers_called(logs) == ["echo-b", "echo-b"]  # echo-a ran nothing
    assert (unheld.status_code, unheld.json()["server"]) == (200, "echo-a")


async def test_a_call_held_to_a_server_that_no_longer_has_the_tool_is_refused_and_nothing_runs(
    gateway: Gateway,
) -> None:
    held = {"name": "whoami", "server": "echo-b", "serverTool": "whoami"}
    try:
        await _reload(gateway, {"echo-a": BOTH["echo-a"], "echo-b": {**BOTH["echo-b"], "deniedTools": ["whoami"]}})
        with capture_logs() as logs:
            denied = await gateway.http.post(CALL, json=held)
            streamed = await gateway.http.post(CALL, json=held, headers={"accept": "text/event-stream"})
        await _reload(gateway, {"echo-a": BOTH["echo-a"]})
        with capture_logs() as more_logs:
            removed = await gateway.http.post(CALL, json=held)
    finally:
        await _reload(gateway, BOTH)

    assert denied.status_code == 409
    assert denied.json()["error"] == {
        "code": "tool_server_mismatch",
        "message": 'The tool "whoami" was not called: the MCP server "echo-b" has no tool "whoami" now.',
    }
    [(event, error)] = _streamed_events(streamed.text)
    assert (event, error["code"]) == ("error", "tool_server_mismatch")
    assert (removed.status_code, removed.json()["error"]["code"]) == (409, "tool_server_mismatch")
    assert removed.json()["error"]["message"] == (
        'The tool "whoami" was not called: the MCP server "echo-b" is not one of the gateway\'s servers now.'
    )
    assert _servers_called(logs + more_logs) == []  # echo-a, which has "whoami", ran nothing either
    refusals = [log for log in logs + more_logs if log["event"] == "mcp_tool_call_refused"]
    assert [(log["server"], log["server_tool"], log["reason"]) for log in refusals] == [
        ("echo-b", "whoami", "no_such_tool")
    ] * 3


async def test_a_call_naming_a_tool_of_the_server_by_another_tools_name_is_refused(gateway: Gateway) -> None:
    refused = await gateway.http.post(CALL, json={"name": "whoami", "server": "echo-a", "serverTool": "pid"})
    held = await gateway.http.post(CALL, json={"name": "whoami", "server": "echo-a", "serverTool": "whoami"})
    by_server_only = await gateway.http.post(CALL, json={"name": "whoami", "server": "echo-b"})

    assert refused.status_code == 409
    assert refused.json()["error"] == {
        "code": "tool_server_mismatch",
        "message": 'The tool "whoami" was not called: the tool "pid" of the MCP server "echo-a" is not listed as '
        '"whoami".',
    }
    assert (held.status_code, held.json()["content"]) == (200, [{"type": "text", "text": "echo-a"}])
    assert (by_server_only.status_code, by_server_only.json()["content"]) == (200, [{"type": "text", "text": "echo-b"}])


async def test_an_unknown_name_held_to_a_server_is_still_404(gateway: Gateway) -> None:
    missing = await gateway.http.post(CALL, json={"name": "nope", "server": "echo-a", "serverTool": "nope"})
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "tool_not_found")


async def test_a_call_held_to_a_server_that_is_away_is_unavailable_and_never_runs_on_the_next_server() -> None:
    # A backoff of 3 s keeps echo-a away long enough to call; meanwhile its names fall to echo-b.
    async with running_gateway(BOTH, restart_backoff_initial_seconds=3.0, restart_backoff_max_seconds=3.0) as gateway:
        await gateway.wait_until_ready("echo-a", "echo-b")
        echo_a = gateway.registry.connections["echo-a"]
        pid = await gateway.http.post(CALL, json={"name": "pid", "server": "echo-a"})
        os.kill(pid.json()["structuredContent"]["result"], signal.SIGKILL)
        with anyio.fail_after(WAIT_SECONDS):
            await gateway.registry.wait_until(lambda _: echo_a.state == "failed")

        held = {"name": "whoami", "server": "echo-a", "serverTool": "whoami"}
        with capture_logs() as logs:
            refused = await gateway.http.post(CALL, json=held)
            streamed = await gateway.http.post(CALL, json=held, headers={"accept": "text/event-stream"})
        unheld = await gateway.http.post(CALL, json={"name": "whoami"})

    assert refused.status_code == 503
    error = refused.json()["error"]
    assert error["code"] == "tool_unavailable"
    assert error["message"].startswith('The tool "whoami" cannot be called now: its MCP server "echo-a" is not ready')
    assert 1 <= int(refused.headers["retry-after"]) <= 3
    [(event, streamed_error)] = _streamed_events(streamed.text)
    assert (event, streamed_error["code"]) == ("error", "tool_unavailable")
    called = [log for log in logs if log["event"] == "mcp_tool_call"]
    assert [(log["server"], log["outcome"]) for log in called] == [("echo-a", "unavailable")] * 2  # echo-b: nothing
    assert (unheld.status_code, unheld.json()["server"]) == (200, "echo-b")  # where the name fell meanwhile


async def test_a_shadowed_tool_is_called_with_its_own_input_schema() -> None:
    # "add" of the second server takes strings; the listed "add" (echo-a's, first) takes integers.
    strings = MCPServer("strings")

    @strings.tool(name="add")
    def add(a: str, b: str) -> str:
        """Concatenate two strings."""
        return a + b

    async with serve_app(strings.streamable_http_app()) as url:
        servers = {"echo-a": BOTH["echo-a"], "strings": {"url": url + "/mcp"}}
        async with running_gateway(servers) as gateway:
            await gateway.wait_until_ready("echo-a", "strings")
            listed = (await _listed(gateway))["add"]
            held = {"name": "add", "server": "strings", "serverTool": "add"}
            joined = await gateway.http.post(CALL, json={**held, "arguments": {"a": "x", "b": "y"}})
            wrong = await gateway.http.post(CALL, json={**held, "arguments": {"a": 1, "b": 2}})

    assert (listed["server"], listed["inputSchema"]["properties"]["a"]["type"]) == ("echo-a", "integer")
    assert (joined.status_code, joined.json()["server"], joined.json()["content"][0]["text"]) == (200, "strings", "xy")
    assert wrong.json()["isError"] is True
    assert wrong.json()["content"][0]["text"].startswith(
        'The arguments do not match the inputSchema of the tool "add", so it was not called: $.a: expected string'
    )


async def test_list_tools_names_the_servers_own_name_of_a_renamed_tool() -> None:
    servers = {
        "echo-a": BOTH["echo-a"],
        "echo-b": BOTH["echo-b"],
        "echo-c": {**echo_stdio_server("echo-c"), "toolPrefix": "c_"},
    }
    async with running_gateway(servers, tool_name_collision="prefix") as gateway:
        await gateway.wait_until_ready("echo-a", "echo-b", "echo-c")
        listed = await _listed(gateway)
        renamed = await gateway.http.post(
            CALL, json={"name": "echo-b__whoami", "server": "echo-b", "serverTool": "whoami"}
        )
        # "whoami" is listed as echo-a's; held to echo-b it still names echo-b's (before the collision renamed it).
        by_own_name = await gateway.http.post(CALL, json={"name": "whoami", "server": "echo-b", "serverTool": "whoami"})
        prefixed = await gateway.http.post(CALL, json={"name": "c_pid", "server": "echo-c", "serverTool": "pid"})
        unprefixed = await gateway.http.post(CALL, json={"name": "pid", "server": "echo-c", "serverTool": "pid"})

    assert "serverTool" not in listed["whoami"]  # listed under its own name
    assert (listed["echo-b__whoami"]["server"], listed["echo-b__whoami"]["serverTool"]) == ("echo-b", "whoami")
    assert (listed["c_pid"]["server"], listed["c_pid"]["serverTool"]) == ("echo-c", "pid")
    assert renamed.json()["content"] == [{"type": "text", "text": "echo-b"}]
    assert by_own_name.json()["content"] == [{"type": "text", "text": "echo-b"}]
    assert (prefixed.status_code, prefixed.json()["server"]) == (200, "echo-c")
    assert (unprefixed.status_code, unprefixed.json()["error"]["code"]) == (409, "tool_server_mismatch")
