"""``POST /mcp/v1/servers/reload``: the servers file read again without a restart.

Added servers connect, removed ones close (their stdio children end), changed ones reconnect,
and a call in flight on a server that changed finishes on its old session.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from support.echo_mcp_server import ECHO_TOOLS
from support.mcp_gateway import (
    WAIT_SECONDS,
    Gateway,
    echo_http_server,
    echo_stdio_server,
    leaves_no_child_processes,
    running_gateway,
)

pytestmark = pytest.mark.anyio

RELOAD = "/mcp/v1/servers/reload"
CALL = "/mcp/v1/tools/call-tool"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _call(gateway: Gateway, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    response = await gateway.http.post(CALL, json={"name": name, "arguments": arguments or {}})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _pid(gateway: Gateway, tool: str) -> int:
    pid: int = (await _call(gateway, tool))["structuredContent"]["result"]
    return pid


async def _wait_closed(gateway: Gateway) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        await gateway.registry.wait_until(lambda registry: not registry.retiring)


async def test_reload_connects_added_servers_closes_removed_ones_and_reconnects_changed_ones() -> None:
    with leaves_no_child_processes():
        async with echo_http_server("web", tool_prefix="web_") as url:
            first = {
                "gone": echo_stdio_server("gone", tool_prefix="gone_"),
                "kept": echo_stdio_server("kept", tool_prefix="kept_"),
                "web": {"url": url},
            }
            async with running_gateway(first) as gateway:
                await gateway.wait_until_ready("gone", "kept", "web")
                gone_pid, kept_pid = await _pid(gateway, "gone_pid"), await _pid(gateway, "kept_pid")
                old_web = gateway.registry.connections["web"]

                gateway.write_servers(
                    {
                        "added": echo_stdio_server("added", tool_prefix="added_"),
                        "web": {"url": url, "headers": {"X-Version": "2"}},
                        "kept": echo_stdio_server("kept", tool_prefix="kept_"),
                    }
                )
                response = await gateway.http.post(RELOAD)
                await gateway.wait_until_ready("added", "web")
                await _wait_closed(gateway)
                listed = (await gateway.http.get("/mcp/v1/tools/list-tools")).json()["tools"]
                statuses = (await gateway.http.get("/mcp/v1/servers")).json()["servers"]
                kept_pid_after = await _pid(gateway, "kept_pid")
                who = await _call(gateway, "added_whoami")

    assert response.status_code == 200
    assert response.json() == {"added": ["added"], "removed": ["gone"], "changed": ["web"], "unchanged": ["kept"]}
    assert not _alive(gone_pid)
    assert kept_pid_after == kept_pid  # an unchanged server keeps its session and its process
    assert gateway.registry.connections["web"] is not old_web
    assert [status["name"] for status in statuses] == ["added", "web", "kept"]  # the new priority order
    assert {tool["server"] for tool in listed} == {"added", "web", "kept"}
    assert len(listed) == 3 * len(ECHO_TOOLS)
    assert who["content"] == [{"type": "text", "text": "added"}]


async def test_a_call_in_flight_on_a_changed_server_finishes_on_its_old_session() -> None:
    async with echo_http_server("web") as url, running_gateway({"web": {"url": url}}) as gateway:
        await gateway.wait_until_ready("web")
        old = gateway.registry.connections["web"]
        finished: dict[str, Any] = {}

        async def call_through_the_gate() -> None:
            finished.update(await _call(gateway, "gate", {"tag": "reload"}))

        with anyio.fail_after(WAIT_SECONDS):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call_through_the_gate)
                await _call(gateway, "await_hold", {"tag": "reload", "event": "started"})

                gateway.write_servers({"web": {"url": url, "headers": {"X-Version": "2"}}})
                reloaded = (await gateway.http.post(RELOAD)).json()
                await gateway.wait_until_ready("web")
                assert old.calls.in_flight == 1
                assert old in gateway.registry.retiring  # kept open for its call

                # The same server behind the new session opens the gate: the old call can end.
                await _call(gateway, "open_gate", {"tag": "reload"})
            await _wait_closed(gateway)

    assert reloaded["changed"] == ["web"]
    assert finished["isError"] is False
    assert finished["content"] == [{"type": "text", "text": "reload passed"}]
    assert old.calls.in_flight == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not json", "is not valid JSON"),
        ('{"mcpServers": {"x": {"command": 7}}}', 'server "x": field "command": Input should be a valid string'),
    ],
)
async def test_a_bad_file_on_reload_is_400_and_the_running_servers_stay(text: str, expected: str) -> None:
    async with running_gateway({"local": echo_stdio_server("local")}) as gateway:
        await gateway.wait_until_ready("local")
        pid = await _pid(gateway, "pid")
        gateway.config_path.write_text(text)

        response = await gateway.http.post(RELOAD)
        still = await _pid(gateway, "pid")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_servers_config"
    assert error["message"].startswith("The servers config was not reloaded: ")
    assert expected in error["message"]
    assert still == pid


async def test_reload_requires_the_secret() -> None:
    async with running_gateway({}) as gateway, httpx.AsyncClient(base_url=gateway.url) as anonymous:
        response = await anonymous.post(RELOAD)

    assert response.status_code == 401


async def test_a_secret_rotated_in_its_file_makes_reload_reconnect_the_server(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first-t0ken\n")
    async with echo_http_server("web") as url:
        servers = {"web": {"url": url, "headers": {"Authorization": f"Bearer ${{file:{token}}}"}}}
        async with running_gateway(servers) as gateway:
            await gateway.wait_until_ready("web")
            unchanged = (await gateway.http.post(RELOAD)).json()

            token.write_text("second-t0ken\n")
            rotated = (await gateway.http.post(RELOAD)).json()
            await gateway.wait_until_ready("web")

    assert unchanged["unchanged"] == ["web"]
    assert rotated["changed"] == ["web"]
    assert "t0ken" not in json.dumps([unchanged, rotated])
