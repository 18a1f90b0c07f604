"""Keeping sessions alive: restarts, timeouts, pagination, configured headers, shutdown."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp_types import ListToolsResult, PaginatedRequestParams, Tool
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_client_service.config.options import Backoff, ConnectionOptions
from mcp_client_service.config.servers_file import parse_servers_config
from mcp_client_service.registry.server_registry import ServerRegistry
from suite_common.ssrf import EgressPolicy
from support.echo_mcp_server import ECHO_TOOLS, build_echo_server
from support.mcp_gateway import FAST_RETRIES, WAIT_SECONDS, echo_http_server, echo_stdio_server, running_gateway
from support.servers import serve_app

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def running_registry(servers: dict[str, Any], **options: Any) -> AsyncIterator[ServerRegistry]:
    defaults: dict[str, Any] = {
        "connect_timeout": 10.0,
        "list_timeout": 5.0,
        "backoff": Backoff(initial=0.05, maximum=0.2),
        "egress": EgressPolicy(allow_loopback=True),
        "environ": dict(os.environ),
    }
    registry = ServerRegistry(
        parse_servers_config(json.dumps({"mcpServers": servers})), ConnectionOptions(**{**defaults, **options})
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(registry.run)
        yield registry
        tg.cancel_scope.cancel()


async def wait_for(registry: ServerRegistry, condition: Callable[[ServerRegistry], bool]) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        await registry.wait_until(condition)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_stdio_server_that_dies_mid_call_gives_an_error_result_and_is_restarted() -> None:
    async with running_gateway({"local": echo_stdio_server("local")}, **FAST_RETRIES) as gateway:
        await gateway.wait_until_ready("local")
        first_pid = (await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "pid"})).json()
        first_pid = first_pid["structuredContent"]["result"]

        crashed = await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "crash"})

        assert crashed.status_code == 200
        assert crashed.json()["isError"] is True
        assert 'The connection to the MCP server "local" dropped' in crashed.json()["content"][0]["text"]
        local = gateway.registry.connections["local"]
        await wait_for(gateway.registry, lambda _: local.attempts >= 2 and local.state == "ready")
        second = await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "pid"})
        second_pid = second.json()["structuredContent"]["result"]
        assert second_pid != first_pid
        assert not _alive(first_pid)
        status = (await gateway.http.get("/mcp/v1/servers")).json()["servers"][0]
        assert status["state"] == "ready"
        assert "lastError" not in status  # a serving server shows no stale error (the log keeps it)
    # Shutting the gateway down ends its stdio children.
    assert not _alive(second_pid)


async def test_readyz_is_200_once_every_enabled_server_is_ready() -> None:
    async with (
        echo_http_server("web") as url,
        running_gateway({"web": {"url": url}, "spare": {"url": url, "enabled": False}}) as gateway,
    ):
        await gateway.wait_until_ready("web")

        response = await gateway.http.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"web": "ok"}, "waitingFor": []}


async def test_a_server_that_never_answers_the_handshake_fails_with_a_timeout() -> None:
    hung = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}
    async with running_registry({"hung": hung}, connect_timeout=0.5) as registry:
        await wait_for(registry, lambda r: r.connections["hung"].state == "failed")

        assert registry.connections["hung"].last_error == "TimeoutError: connecting timed out after 0.5 s"


def _paged_server(pages: list[list[str]], *, list_delay: float = 0.0) -> ASGIApp:
    """A low-level MCP server whose tool list comes in ``pages``, each behind a cursor."""

    async def list_tools(_: ServerRequestContext[Any], params: PaginatedRequestParams | None) -> ListToolsResult:
        await anyio.sleep(list_delay)  # simulates a slow server
        index = int(params.cursor) if params and params.cursor else 0
        return ListToolsResult(
            tools=[Tool(name=name, input_schema={"type": "object"}) for name in pages[index]],
            next_cursor=str(index + 1) if index + 1 < len(pages) else None,
        )

    return Server("paged", on_list_tools=list_tools).streamable_http_app()


async def test_tool_lists_are_followed_across_every_page() -> None:
    async with (
        serve_app(_paged_server([["a", "b"], ["c"], ["d", "e"]])) as url,
        running_registry({"paged": {"url": url + "/mcp"}}) as registry,
    ):
        await wait_for(registry, lambda r: r.all_ready())

        assert [tool.name for tool in registry.catalog.listing().tools] == ["a", "b", "c", "d", "e"]


async def test_a_server_too_slow_to_list_its_tools_fails_with_a_timeout() -> None:
    async with (
        serve_app(_paged_server([["a"]], list_delay=5)) as url,
        running_registry({"slow": {"url": url + "/mcp"}}, list_timeout=0.3) as registry,
    ):
        await wait_for(registry, lambda r: r.connections["slow"].state == "failed")

        assert registry.connections["slow"].last_error == "TimeoutError: listing tools timed out after 0.3 s"


def _require_bearer(app: ASGIApp, token: str) -> ASGIApp:
    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (b"authorization", f"Bearer {token}".encode()) not in scope["headers"]:
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        await app(scope, receive, send)

    return guarded


async def test_an_http_server_gets_its_configured_headers() -> None:
    token = "t0ken-for-the-search-server"
    app = _require_bearer(build_echo_server("guarded").streamable_http_app(), token)
    async with serve_app(app) as url:
        servers = {
            "with-token": {"url": url + "/mcp", "headers": {"Authorization": f"Bearer {token}"}},
            "without": {"url": url + "/mcp"},
        }
        async with running_registry(servers) as registry:
            await wait_for(
                registry,
                lambda r: r.connections["with-token"].state == "ready" and r.connections["without"].state == "failed",
            )
            result = await registry.connections["with-token"].call_tool("whoami", {}, 5)

    assert result.structured_content == {"result": "guarded"}


async def test_a_header_value_quoted_by_a_failure_is_redacted_from_status_pages_and_readyz() -> None:
    token = "t0ken-pasted-with-its-newline"
    # A token pasted from a file keeps its newline; the HTTP library refuses the header and its
    # error quotes the value, escaped: b'Bearer t0ken-pasted-with-its-newline\n'.
    async with echo_http_server("search") as url:
        servers = {"pasted": {"url": url, "headers": {"Authorization": f"Bearer {token}\n"}}}
        async with running_gateway(servers, **FAST_RETRIES) as gateway:
            await gateway.wait_until_failed("pasted")
            status = (await gateway.http.get("/mcp/v1/servers")).json()["servers"][0]
            readyz = await gateway.http.get("/readyz")

    assert status["lastError"] == "LocalProtocolError: Illegal header value b'***'"
    assert token not in readyz.text
    assert readyz.json()["checks"] == {"pasted": status["state"]}


async def _serve_echo_until(stop: anyio.Event, *, task_status: TaskStatus[str]) -> None:
    async with echo_http_server("web") as url:
        task_status.started(url)
        await stop.wait()


async def test_an_http_server_that_goes_away_is_noticed_and_its_tools_say_why_they_fail() -> None:
    async with anyio.create_task_group() as tg:
        stop = anyio.Event()
        url = await tg.start(_serve_echo_until, stop)
        async with running_gateway({"web": {"url": url}}, **FAST_RETRIES, health_check_interval_seconds=0.1) as gateway:
            await gateway.wait_until_ready("web")

            stop.set()  # the server goes away while the session is idle

            await gateway.wait_until_failed("web")
            listed = (await gateway.http.get("/mcp/v1/tools/list-tools")).json()
            call = await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "echo", "arguments": {"text": "x"}})
            streamed = await gateway.http.post(
                "/mcp/v1/tools/call-tool",
                json={"name": "echo", "arguments": {"text": "x"}},
                headers={"accept": "text/event-stream"},
            )

    # Its tools stay listed, marked unavailable: configured, not unknown.
    assert {tool["name"] for tool in listed["tools"]} == set(ECHO_TOOLS)
    reasons = {tool["unavailable"]["reason"] for tool in listed["tools"]}
    assert len(reasons) == 1
    assert reasons.pop().startswith('its MCP server "web" is not ready (')
    assert call.status_code == 503
    error = call.json()["error"]
    assert error["code"] == "tool_unavailable"
    assert error["message"].startswith('The tool "echo" cannot be called now: its MCP server "web" is not ready (')
    assert "ConnectError" in error["message"]
    assert call.headers["retry-after"] == str(error["retryAfterSeconds"]) == "1"
    # Asked for SSE, the same refusal is the stream's one error event, with when to retry.
    [event] = [line for line in streamed.text.splitlines() if line.startswith("event:")]
    [data] = [line.removeprefix("data:").strip() for line in streamed.text.splitlines() if line.startswith("data:")]
    assert event == "event: error"
    refusal = json.loads(data)
    assert (refusal["code"], refusal["retryAfterSeconds"]) == ("tool_unavailable", 1)
    assert refusal["message"].startswith('The tool "echo" cannot be called now: its MCP server "web" is not ready (')


async def test_a_killed_stdio_server_keeps_its_tools_listed_as_unavailable_until_it_is_back() -> None:
    # A backoff of 3 s makes the restart window wide enough to look at; the retry time counts down.
    async with running_gateway(
        {"local": echo_stdio_server("local")},
        restart_backoff_initial_seconds=3.0,
        restart_backoff_max_seconds=3.0,
    ) as gateway:
        await gateway.wait_until_ready("local")
        local = gateway.registry.connections["local"]
        first = await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "pid"})
        os.kill(first.json()["structuredContent"]["result"], signal.SIGKILL)
        await wait_for(gateway.registry, lambda _: local.state == "failed")

        listed = {tool["name"]: tool for tool in (await gateway.http.get("/mcp/v1/tools/list-tools")).json()["tools"]}
        refused = await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "echo", "arguments": {"text": "x"}})
        status_while_away = (await gateway.http.get("/mcp/v1/servers")).json()["servers"][0]

        await wait_for(gateway.registry, lambda _: local.state == "ready")
        back = (await gateway.http.get("/mcp/v1/tools/list-tools")).json()["tools"]
        status_back = (await gateway.http.get("/mcp/v1/servers")).json()["servers"][0]
        echoed = await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "echo", "arguments": {"text": "x"}})

    assert set(listed) == set(ECHO_TOOLS)
    unavailable = listed["echo"]["unavailable"]
    assert unavailable["reason"] == (
        'its MCP server "local" is not ready (failed: the server process was killed by signal SIGKILL); '
        "the gateway keeps reconnecting"
    )
    assert 0 < unavailable["retryAfterSeconds"] <= 3.0
    assert listed["echo"]["inputSchema"]["properties"]["text"]["type"] == "string"  # the whole description stays
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "tool_unavailable"
    assert "killed by signal SIGKILL" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 3
    assert status_while_away["lastError"] == "the server process was killed by signal SIGKILL"
    assert all("unavailable" not in tool for tool in back)
    assert (status_back["state"], "lastError" in status_back) == ("ready", False)
    assert echoed.json()["content"] == [{"type": "text", "text": "x"}]
