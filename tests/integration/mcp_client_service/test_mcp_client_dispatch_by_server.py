"""``call-tool`` held to a server: with ``server`` (and ``serverTool``) the gateway calls a name only on that server's
tool, and answers 409 ``tool_server_mismatch`` once the name resolves elsewhere; ``list-tools`` names a renamed
tool's own name (``serverTool``).

Two real echo servers over stdio, ``echo-a`` first in the config, so under ``first_wins`` the names both offer
(``whoami``, ``pid``, ...) are ``echo-a``'s while it serves and ``echo-b``'s while it is away.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from support.mcp_gateway import Gateway, echo_stdio_server, running_gateway

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


async def _listed(gateway: Gateway) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in (await gateway.http.get(LIST)).json()["tools"]}


async def test_a_call_held_to_a_server_is_refused_once_the_name_moved_to_another(gateway: Gateway) -> None:
    try:
        await _reload(gateway, {"echo-b": BOTH["echo-b"]})  # echo-a away: its names fall to echo-b
        planned = (await _listed(gateway))["whoami"]
        assert planned["server"] == "echo-b"
        held = {"name": "whoami", "server": "echo-b", "serverTool": "whoami"}
        while_away = await gateway.http.post(CALL, json=held)

        await _reload(gateway, BOTH)  # echo-a back, first again
        await gateway.wait_until_ready("echo-a")
        refused = await gateway.http.post(CALL, json=held)
        streamed = await gateway.http.post(CALL, json=held, headers={"accept": "text/event-stream"})
        unheld = await gateway.http.post(CALL, json={"name": "whoami"})  # the contract of DESIGN.md, unchanged
    finally:
        await _reload(gateway, BOTH)
        await gateway.wait_until_ready("echo-a", "echo-b")

    assert (while_away.status_code, while_away.json()["server"]) == (200, "echo-b")
    assert while_away.json()["content"] == [{"type": "text", "text": "echo-b"}]
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "tool_server_mismatch"
    assert error["message"] == (
        'The tool "whoami" runs on the MCP server "echo-a" now, not on "echo-b" as the caller expected, '
        "so it was not called."
    )
    [event] = [line for line in streamed.text.splitlines() if line.startswith("data:")]
    assert "event: error" in streamed.text
    assert json.loads(event.removeprefix("data:"))["code"] == "tool_server_mismatch"
    assert (unheld.status_code, unheld.json()["server"]) == (200, "echo-a")


async def test_a_call_held_to_another_tool_of_the_same_server_is_refused(gateway: Gateway) -> None:
    refused = await gateway.http.post(CALL, json={"name": "whoami", "server": "echo-a", "serverTool": "pid"})
    held = await gateway.http.post(CALL, json={"name": "whoami", "server": "echo-a", "serverTool": "whoami"})
    by_server_only = await gateway.http.post(CALL, json={"name": "whoami", "server": "echo-a"})

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "tool_server_mismatch"
    assert 'is the tool "whoami" of "echo-a" now, not "pid"' in refused.json()["error"]["message"]
    assert (held.status_code, held.json()["content"]) == (200, [{"type": "text", "text": "echo-a"}])
    assert (by_server_only.status_code, by_server_only.json()["server"]) == (200, "echo-a")


async def test_an_unknown_name_held_to_a_server_is_still_404(gateway: Gateway) -> None:
    missing = await gateway.http.post(CALL, json={"name": "nope", "server": "echo-a", "serverTool": "nope"})
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "tool_not_found")


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

    assert "serverTool" not in listed["whoami"]  # listed under its own name
    assert (listed["echo-b__whoami"]["server"], listed["echo-b__whoami"]["serverTool"]) == ("echo-b", "whoami")
    assert (listed["c_pid"]["server"], listed["c_pid"]["serverTool"]) == ("echo-c", "pid")
    assert renamed.json()["content"] == [{"type": "text", "text": "echo-b"}]
