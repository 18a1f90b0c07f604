"""mcp-client-service over real MCP servers: one stdio child, two streamable HTTP servers, and
two that cannot start (a command that does not exist, one that never answers the handshake).

One gateway serves the whole module; its secret is in its environment, as in production.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from mcp_client_service.settings import MCPClientSettings
from suite_common.echo import MAX_ECHO_CHARS
from support.echo_mcp_server import ECHO_TOOLS
from support.mcp_gateway import Gateway, echo_http_server, echo_stdio_server, running_gateway

pytestmark = pytest.mark.anyio

SECRET = "module-secret-4f9a"

CALL = "/mcp/v1/tools/call-tool"
LIST = "/mcp/v1/tools/list-tools"


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[Gateway]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MCP_CLIENT_SERVICE_SECRET", SECRET)
        env.setenv("MCP_CLIENT_MAX_RESULT_CHARS", "1000")
        env.setenv("MCP_CLIENT_SSRF_ALLOW_LOOPBACK", "true")  # the HTTP servers are in this process
        settings = MCPClientSettings()
        async with (
            echo_http_server("remote", tool_prefix="remote_") as remote_url,
            echo_http_server("shadow") as shadow_url,
        ):
            servers = {
                "local": echo_stdio_server("local", env={"ECHO_CONFIGURED": "yes"}),
                "remote": {"url": remote_url},
                "broken": {"command": "no-such-mcp-server-command"},
                "hung": {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]},
                "shadow": {"type": "streamable-http", "url": shadow_url},
                "off": {"command": "never-started", "enabled": False},
            }
            async with running_gateway(servers, settings=settings) as gateway:
                # The API answers at once, before any server is ready.
                assert (await gateway.http.get("/healthz")).status_code == 200
                await gateway.wait_until_ready("local", "remote", "shadow")
                await gateway.wait_until_failed("broken")
                yield gateway


async def _call(gateway: Gateway, name: str, arguments: dict[str, Any], **headers: str) -> dict[str, Any]:
    response = await gateway.http.post(CALL, json={"name": name, "arguments": arguments}, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_list_tools_aggregates_stdio_and_http_servers_with_their_server(gateway: Gateway) -> None:
    response = await gateway.http.get(LIST)

    assert response.status_code == 200
    tools = response.json()["tools"]
    by_name = {tool["name"]: tool for tool in tools}
    assert [tool["name"] for tool in tools] == [*ECHO_TOOLS, *(f"remote_{name}" for name in ECHO_TOOLS)]
    assert by_name["echo"]["server"] == "local"
    assert by_name["remote_echo"]["server"] == "remote"
    assert by_name["add"]["description"] == "Add two integers."
    assert by_name["remote_add"]["inputSchema"]["properties"].keys() == {"a", "b"}
    assert by_name["remote_add"]["inputSchema"]["required"] == ["a", "b"]


async def test_on_a_name_clash_the_server_listed_first_wins(gateway: Gateway) -> None:
    # "shadow" offers the same tool names as "local", which comes first in the config.
    listed = {tool["name"]: tool["server"] for tool in (await gateway.http.get(LIST)).json()["tools"]}
    assert listed["whoami"] == "local"

    result = await _call(gateway, "whoami", {})

    assert result["server"] == "local"
    assert result["content"] == [{"type": "text", "text": "local"}]


@pytest.mark.parametrize(("tool", "server"), [("add", "local"), ("remote_add", "remote")])
async def test_call_tool_returns_the_tools_content_blocks(gateway: Gateway, tool: str, server: str) -> None:
    result = await _call(gateway, tool, {"a": 2, "b": 40})

    assert result["content"] == [{"type": "text", "text": "42"}]
    assert result["structuredContent"] == {"result": 42}
    assert result["isError"] is False
    assert result["server"] == server
    assert 0 < result["durationMs"] < 10_000


async def test_a_tools_own_error_result_passes_through(gateway: Gateway) -> None:
    result = await _call(gateway, "fail", {"message": "the disk is full"})

    assert result["isError"] is True
    assert result["server"] == "local"
    assert "the disk is full" in result["content"][0]["text"]


async def test_long_text_is_cut_with_a_marker(gateway: Gateway) -> None:
    result = await _call(gateway, "remote_echo", {"text": "x" * 1500})

    text = result["content"][0]["text"]
    kept = 1000 - len('{"type":"text","text":""}')  # the block's own JSON counts against the limit too
    assert text.startswith("x" * kept + f"\n[... cut here: {1500 - kept} more characters")
    assert "structuredContent" not in result


async def test_an_unknown_tool_is_404_naming_it(gateway: Gateway) -> None:
    response = await gateway.http.post(CALL, json={"name": "launch_rockets", "arguments": {}})

    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "tool_not_found"
    assert '"launch_rockets"' in error["message"]


async def test_an_unknown_tool_with_a_huge_name_is_404_naming_it_clipped(gateway: Gateway) -> None:
    name = "n" * 10_000
    response = await gateway.http.post(CALL, json={"name": name, "arguments": {}})

    assert response.status_code == 404
    message = response.json()["error"]["message"]
    assert message.startswith(f'No MCP server offers a tool named "{name[: MAX_ECHO_CHARS - 1]}…".')
    assert name not in message


@pytest.mark.parametrize(
    ("body", "content_type", "code"),
    [
        (b'{"name": "echo", "arguments": ', "application/json", "invalid_json"),
        (b'{"arguments": {}}', "application/json", "invalid_request"),
        (b'{"name": "echo", "arguments": ["hi"]}', "application/json", "invalid_request"),
        (b"", "application/json", "invalid_request"),
    ],
)
async def test_a_bad_body_is_400_and_calls_nothing(gateway: Gateway, body: bytes, content_type: str, code: str) -> None:
    response = await gateway.http.post(CALL, content=body, headers={"content-type": content_type})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


async def test_a_deadline_header_that_is_not_a_number_is_400(gateway: Gateway) -> None:
    response = await gateway.http.post(
        CALL, json={"name": "echo", "arguments": {"text": "hi"}}, headers={"X-Deadline-Ms": "soon"}
    )

    assert response.status_code == 400
    assert "X-Deadline-Ms" in response.json()["error"]["message"]


@pytest.mark.parametrize("path", [LIST, CALL, "/mcp/v1/servers"])
@pytest.mark.parametrize("secret", [None, "wrong", SECRET.upper()])
async def test_without_the_right_secret_every_api_endpoint_is_401(
    gateway: Gateway, path: str, secret: str | None
) -> None:
    headers = {} if secret is None else {"X-MCP-Service-Secret": secret}
    async with httpx.AsyncClient(base_url=gateway.url, headers=headers) as anonymous:
        if path == CALL:
            response = await anonymous.post(path, json={"name": "echo", "arguments": {"text": "hi"}})
        else:
            response = await anonymous.get(path)
        health = await anonymous.get("/healthz")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert SECRET not in response.text
    assert health.status_code == 200


async def test_a_call_past_its_deadline_is_an_error_result_and_the_service_keeps_serving(gateway: Gateway) -> None:
    started = time.monotonic()
    result = await _call(gateway, "slow", {"seconds": 30}, **{"X-Deadline-Ms": "300"})
    elapsed = time.monotonic() - started

    assert result["isError"] is True
    assert "did not finish within 0.3 s" in result["content"][0]["text"]
    assert elapsed < 5
    # The same session keeps serving.
    assert (await _call(gateway, "echo", {"text": "still here"}))["content"] == [{"type": "text", "text": "still here"}]


async def test_a_call_whose_deadline_has_passed_is_not_made(gateway: Gateway) -> None:
    result = await _call(gateway, "echo", {"text": "too late"}, **{"X-Deadline-Ms": "0"})

    assert result["isError"] is True
    assert "deadline had passed" in result["content"][0]["text"]
    assert result["durationMs"] == 0


@pytest.mark.parametrize("tool", ["rendezvous", "remote_rendezvous"])
async def test_concurrent_calls_share_one_session_without_waiting_for_each_other(gateway: Gateway, tool: str) -> None:
    group = f"concurrent-{tool}"
    results: dict[int, dict[str, Any]] = {}

    async def one(party: int) -> None:
        results[party] = await _call(gateway, tool, {"group": group, "parties": 2})

    # Each call returns only once both are in flight on the server: calls dispatched one after
    # the other would hang until the bound (the call timeout is 60 s).
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 1)
            tg.start_soon(one, 2)

    met = [{"type": "text", "text": f"2 calls met in {group}"}]
    assert results[1]["content"] == results[2]["content"] == met


@pytest.mark.parametrize("prefix", ["", "remote_"], ids=["stdio", "streamable-http"])
async def test_a_caller_that_disconnects_mid_call_has_the_tool_cancelled_on_the_server(
    gateway: Gateway, prefix: str
) -> None:
    tag = f"departing-caller-{prefix or 'local'}"

    async def departing_caller() -> None:
        async with httpx.AsyncClient(base_url=gateway.url, headers={"X-MCP-Service-Secret": SECRET}) as caller:
            await caller.post(CALL, json={"name": prefix + "hold", "arguments": {"tag": tag}})

    # The call timeout is 60 s: only the caller's departure can end the held call within the bound.
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(departing_caller)
            await _call(gateway, prefix + "await_hold", {"tag": tag, "event": "started"})
            tg.cancel_scope.cancel()  # the caller goes away mid-call, closing its connection

        cancelled = await _call(gateway, prefix + "await_hold", {"tag": tag, "event": "cancelled"})

    assert cancelled["content"] == [{"type": "text", "text": f"{tag} cancelled"}]
    # The session the cancelled call ran on keeps serving.
    assert (await _call(gateway, prefix + "echo", {"text": "next"}))["content"] == [{"type": "text", "text": "next"}]


async def test_servers_that_cannot_start_do_not_block_the_others_and_readyz_names_only_their_states(
    gateway: Gateway,
) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as probe:  # /readyz needs no secret
        response = await probe.get("/readyz")

    # Not ready only while "hung" is on its first attempt (bounded by the connect timeout): the
    # failed "broken" is not waited for (tests/integration/.../test_mcp_client_readiness.py has
    # the 200 once every first attempt has ended).
    assert response.status_code == 503
    assert response.json()["waitingFor"] == ["hung"]
    checks = response.json()["checks"]
    assert checks["local"] == checks["remote"] == checks["shadow"] == "ok"
    assert checks["broken"] in ("failed", "connecting")  # it keeps retrying
    assert checks["hung"] == "connecting"
    assert "off" not in checks  # a disabled server is not waited for
    # Why a server failed is for those with the secret (GET /mcp/v1/servers), not for probes.
    assert "no-such-mcp-server-command" not in response.text


async def test_the_servers_endpoint_gives_each_servers_state(gateway: Gateway) -> None:
    await _call(gateway, "echo", {"text": "for the p50"})

    response = await gateway.http.get("/mcp/v1/servers")

    assert response.status_code == 200
    servers = {server["name"]: server for server in response.json()["servers"]}
    assert list(servers) == ["local", "remote", "broken", "hung", "shadow", "off"]
    # A server that never failed has no lastError (absent, as every None on the wire).
    local = dict(servers["local"])
    p50 = local.pop("p50LatencyMs")
    assert local == {
        "name": "local",
        "transport": "stdio",
        "state": "ready",
        "toolCount": len(ECHO_TOOLS),
        "circuit": "closed",
    }
    assert 0 < p50 < 10_000
    assert "p50LatencyMs" not in servers["hung"]  # never called
    assert (servers["remote"]["transport"], servers["remote"]["state"]) == ("streamable-http", "ready")
    assert servers["broken"]["state"] in ("failed", "connecting")  # it keeps retrying
    assert servers["broken"]["lastError"].startswith('cannot start the command "no-such-mcp-server-command": ')
    assert "No such file or directory" in servers["broken"]["lastError"]
    assert servers["hung"]["state"] == "connecting"
    assert servers["off"]["state"] == "disabled"


async def test_a_stdio_child_never_sees_the_gateways_environment(gateway: Gateway) -> None:
    result = await _call(gateway, "env_keys", {})

    child_env = set(result["structuredContent"]["result"])
    assert "MCP_CLIENT_SERVICE_SECRET" not in child_env
    assert not any(key.startswith("MCP_CLIENT_") for key in child_env)
    assert SECRET not in json.dumps(result)
    assert {"ECHO_CONFIGURED", "PATH"} <= child_env  # its configured env, and the SDK's safe defaults
