"""What must never leave the gateway, and where it must never go.

Secrets by reference are resolved when a server connects and never appear in logs, statuses or
errors; the gateway's shared secret reaches no MCP server, by header or by environment; a stdio
child inherits only the allowed variables; the SSRF guard refuses blocked addresses with a
status that says why (and no connection is attempted to them).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send
from structlog.testing import capture_logs

from support.echo_mcp_server import build_echo_server
from support.mcp_gateway import (
    FAST_RETRIES,
    GATEWAY_SECRET,
    Gateway,
    echo_http_server,
    echo_stdio_server,
    raw_stdio_server,
    running_gateway,
)
from support.servers import serve_app

pytestmark = pytest.mark.anyio

CALL = "/mcp/v1/tools/call-tool"


async def _statuses(gateway: Gateway) -> dict[str, dict[str, Any]]:
    servers = (await gateway.http.get("/mcp/v1/servers")).json()["servers"]
    return {server["name"]: server for server in servers}


def _recording(app: ASGIApp, seen: list[dict[str, str]], *, bearer: str | None = None) -> ASGIApp:
    """``app`` that records the headers of every request, and refuses those without ``bearer``."""

    async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {key.decode().lower(): value.decode() for key, value in scope["headers"]}
            seen.append(headers)
            if bearer is not None and headers.get("authorization") != f"Bearer {bearer}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    return recorded


async def test_secret_references_are_resolved_when_connecting_and_never_shown() -> None:
    file_token, env_token = "f1le-t0ken-4f9a", "env-t0ken-77c1"
    seen_by_file_server: list[dict[str, str]] = []
    seen_by_env_server: list[dict[str, str]] = []
    file_app = _recording(build_echo_server("by-file").streamable_http_app(), seen_by_file_server, bearer=file_token)
    env_app = _recording(build_echo_server("by-env").streamable_http_app(), seen_by_env_server, bearer=env_token)
    environ = {
        "PATH": os.environ["PATH"],
        "SEARCH_TOKEN": env_token,
        # A token pasted with a newline: the HTTP library refuses it, and its error quotes the value.
        "PASTED_TOKEN": "pasted-t0ken-90d2\n",
    }
    async with serve_app(file_app) as file_url, serve_app(env_app) as env_url:
        servers = {
            "by-file": {"url": f"{file_url}/mcp", "headers": {"Authorization": "Bearer ${file:token}"}},
            "by-env": {"url": f"{env_url}/mcp", "headers": {"Authorization": "Bearer ${env:SEARCH_TOKEN}"}},
            "pasted": {"url": f"{env_url}/mcp", "headers": {"Authorization": "Bearer ${env:PASTED_TOKEN}"}},
            "unset": {"url": f"{env_url}/mcp", "headers": {"Authorization": "Bearer ${env:NOT_SET_TOKEN}"}},
            "child": {**echo_stdio_server("child"), "env": {"CHILD_TOKEN": "${env:SEARCH_TOKEN}"}, "toolPrefix": "c_"},
        }
        with capture_logs() as logs:
            # The file reference is relative to the config file's folder; `echo` wrote its newline.
            files = {"token": file_token + "\n"}
            async with running_gateway(servers, environ=environ, files=files, **FAST_RETRIES) as gateway:
                await gateway.wait_until_ready("by-file", "by-env", "child")
                await gateway.wait_until_failed("pasted", "unset")
                statuses = await _statuses(gateway)
                called = await gateway.http.post(CALL, json={"name": "whoami", "arguments": {}})
                child_keys = await gateway.http.post(CALL, json={"name": "c_env_keys", "arguments": {}})

    assert called.json()["content"] == [{"type": "text", "text": "by-file"}]
    assert seen_by_file_server[-1]["authorization"] == f"Bearer {file_token}"
    assert seen_by_env_server[0]["authorization"] == f"Bearer {env_token}"
    assert "CHILD_TOKEN" in child_keys.json()["structuredContent"]["result"]
    assert statuses["unset"]["lastError"] == (
        "a secret reference of its config cannot be resolved: ${env:NOT_SET_TOKEN} is not set in the gateway's "
        "environment"
    )
    assert statuses["pasted"]["lastError"] == "LocalProtocolError: Illegal header value b'Bearer ***'"
    shown = json.dumps(statuses) + json.dumps([str(log) for log in logs])
    for secret in (file_token, env_token, "pasted-t0ken-90d2"):
        assert secret not in shown


async def test_the_gateways_secret_is_never_forwarded_to_an_http_server() -> None:
    seen: list[dict[str, str]] = []
    app = _recording(build_echo_server("web").streamable_http_app(), seen)
    async with serve_app(app) as url, running_gateway({"web": {"url": f"{url}/mcp"}}) as gateway:
        await gateway.wait_until_ready("web")
        await gateway.http.post(CALL, json={"name": "echo", "arguments": {"text": GATEWAY_SECRET}}, headers={})

    assert len(seen) >= 2  # the handshake and the listing at least, and the call
    for headers in seen:
        assert "x-mcp-service-secret" not in headers
        assert not any(GATEWAY_SECRET in value for value in headers.values())


async def test_a_config_that_would_pass_the_gateways_secret_to_a_server_is_refused() -> None:
    async with echo_http_server("web") as url:
        servers = {
            "leaky-header": {"url": url, "headers": {"Authorization": f"Bearer {GATEWAY_SECRET}"}},
            "leaky-env": {**echo_stdio_server("leaky-env"), "env": {"TOKEN": GATEWAY_SECRET}},
        }
        async with running_gateway(servers, **FAST_RETRIES) as gateway:
            await gateway.wait_until_failed("leaky-header", "leaky-env")
            statuses = await _statuses(gateway)

    for name in ("leaky-header", "leaky-env"):
        assert statuses[name]["lastError"] == (
            "its config would pass the gateway's own shared secret to the server, so it was not started"
        )
    assert GATEWAY_SECRET not in json.dumps(statuses)


async def test_a_stdio_child_inherits_only_the_allowed_variables() -> None:
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/home/gateway",
        "LANG": "C.UTF-8",
        "TEAM_LABEL": "tools",
        "MCP_CLIENT_SERVICE_SECRET": GATEWAY_SECRET,
        "AWS_SECRET_ACCESS_KEY": "aws-s3cret",
        "BASH_FUNC_x%%": "() { echo exported function; }",
    }
    server = {**echo_stdio_server("child"), "env": {"CONFIGURED": "yes"}}
    async with running_gateway(
        {"child": server}, environ=environ, stdio_inherit_env=["PATH", "HOME", "LANG", "TEAM_LABEL", "BASH_FUNC_x%%"]
    ) as gateway:
        await gateway.wait_until_ready("child")
        result = (await gateway.http.post(CALL, json={"name": "env_keys", "arguments": {}})).json()

    child_env = set(result["structuredContent"]["result"])
    # What Python adds by itself at startup (LC_CTYPE coercion) is not inherited from the gateway.
    assert child_env - {"LC_CTYPE"} == {"PATH", "HOME", "LANG", "TEAM_LABEL", "CONFIGURED"}
    assert GATEWAY_SECRET not in json.dumps(result)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/mcp", "169.254.169.254 is a cloud metadata endpoint"),
        ("http://10.0.0.8:8102/mcp", "10.0.0.8 is a private address (RFC 1918)"),
        ("http://100.64.1.2/mcp", "100.64.1.2 is a shared carrier-grade NAT address"),
        ("http://[fd00::1]/mcp", "fd00::1 is a private address (unique local, fc00::/7)"),
        ("http://[::ffff:127.0.0.1]:8102/mcp", "is an IPv4-mapped IPv6 form of a loopback address"),
        ("http://127.0.0.1:8102/mcp", "127.0.0.1 is a loopback address"),
    ],
)
async def test_the_ssrf_guard_refuses_a_blocked_address_with_a_clear_status(url: str, reason: str) -> None:
    async with running_gateway(
        {"blocked": {"url": url}, "other": raw_stdio_server("plain")}, ssrf_allow_loopback=False, **FAST_RETRIES
    ) as gateway:
        await gateway.wait_until_failed("blocked")
        await gateway.wait_until_ready("other")  # the refused server blocks nobody
        status = (await _statuses(gateway))["blocked"]

    assert status["state"] == "failed"
    assert status["lastError"].startswith("refused by the SSRF guard: Refused to connect: ")
    assert reason in status["lastError"]
    assert "MCP_CLIENT_SSRF_ALLOW_LOOPBACK" in status["lastError"]


async def test_the_host_name_the_servers_file_gives_is_trusted_whatever_it_resolves_to() -> None:
    # The operator wrote the servers file: its own names are reached (compose and cluster service names resolve to
    # private addresses) without opening loopback or private networks for anything else (tenants' servers, redirects).
    async with echo_http_server("web") as url:
        servers = {"web": {"url": url.replace("127.0.0.1", "localhost")}}
        async with running_gateway(servers, ssrf_allow_loopback=False) as gateway:
            await gateway.wait_until_ready("web")
            result = (await gateway.http.post(CALL, json={"name": "whoami", "arguments": {}})).json()

    assert result["content"] == [{"type": "text", "text": "web"}]


async def test_loopback_mcp_servers_are_reached_when_local_mode_allows_them() -> None:
    async with echo_http_server("web") as url:
        servers = {"web": {"url": url}}  # an address literal: judged by the address rules, not trusted as a name
        async with running_gateway(servers, ssrf_allow_loopback=True) as gateway:
            await gateway.wait_until_ready("web")
            result = (await gateway.http.post(CALL, json={"name": "whoami", "arguments": {}})).json()

    assert result["content"] == [{"type": "text", "text": "web"}]
