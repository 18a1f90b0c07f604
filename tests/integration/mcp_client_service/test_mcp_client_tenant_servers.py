"""Tenant servers through the real gateway: registration, each tenant's catalog and calls, the outbound policy,
header values kept out of every answer and log line, and two replicas on one store.

The third-party server is the npm ``@modelcontextprotocol/server-everything`` over streamable HTTP, in its own
process; the echo server (tests/support) says what ``_meta`` a call carried.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from cryptography.fernet import Fernet
from structlog.testing import capture_logs

from mcp_client_service.tenants.servers import TenantServers
from support.databases import fresh_postgres_database
from support.everything_server import everything_http_server
from support.mcp_gateway import GATEWAY_SECRET, WAIT_SECONDS, echo_http_server, running_gateway
from support.processes import polled, spawned
from support.servers import free_port

pytestmark = pytest.mark.anyio

SERVERS = "/mcp/v1/tenants/{tenant}/servers"


def _as(tenant: str) -> dict[str, str]:
    return {"X-Tenant-Id": tenant}


async def _listed(tenants: TenantServers, tenant: str, name: str) -> None:
    """Wait (bounded) until the server's tools are listed and kept: registration lists them in the background."""
    with anyio.fail_after(WAIT_SECONDS):
        await tenants.wait_until(lambda servers: servers.recorded_listing(tenant, name) is not None)


def _tool_names(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [tool["name"] for tool in response.json()["tools"]]


def _error_code(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


async def test_a_tenant_registers_a_third_party_server_and_only_it_sees_and_calls_its_tools(tmp_path: Path) -> None:
    async with everything_http_server(tmp_path / "everything.log") as url, running_gateway({}) as gateway:
        created = await gateway.http.post(SERVERS.format(tenant="a"), json={"name": "everything", "url": url})
        assert created.status_code == 201, created.text
        assert created.json()["state"] in ("idle", "connecting", "ready")
        await _listed(gateway.tenants, "a", "everything")

        listed = await gateway.http.get("/mcp/v1/tools/list-tools", headers=_as("a"))
        echo = next(tool for tool in listed.json()["tools"] if tool["name"] == "echo")
        assert (echo["server"], echo["tenant"]) == ("everything", "a")
        called = await gateway.http.post(
            "/mcp/v1/tools/call-tool", headers=_as("a"), json={"name": "echo", "arguments": {"message": "hello a"}}
        )
        assert called.status_code == 200, called.text
        assert "hello a" in json.dumps(called.json()["content"])
        card = (await gateway.http.get(SERVERS.format(tenant="a") + "/everything")).json()
        assert card["state"] == "ready"
        assert card["toolCount"] == len(card["tools"]) > 0

        # Tenant b (and a caller naming no tenant) never sees, calls or reaches it.
        assert "echo" not in _tool_names(await gateway.http.get("/mcp/v1/tools/list-tools", headers=_as("b")))
        assert "echo" not in _tool_names(await gateway.http.get("/mcp/v1/tools/list-tools"))
        for request in ({"name": "echo"}, {"name": "echo", "server": "everything"}):
            refused = await gateway.http.post(
                "/mcp/v1/tools/call-tool", headers=_as("b"), json={**request, "arguments": {"message": "b"}}
            )
            assert (refused.status_code, _error_code(refused)) == (404, "tool_not_found")
        theirs = SERVERS.format(tenant="b") + "/everything"
        for response in (
            await gateway.http.get(theirs),
            await gateway.http.patch(theirs, json={"enabled": False}),
            await gateway.http.delete(theirs),
        ):
            assert (response.status_code, _error_code(response)) == (404, "server_not_found")
        assert (await gateway.http.get(SERVERS.format(tenant="b"))).json()["servers"] == []

        # Switched off: out of a's catalog at once, and its calls are refused.
        switched = await gateway.http.patch(SERVERS.format(tenant="a") + "/everything", json={"enabled": False})
        assert switched.json()["state"] == "disabled"
        assert "echo" not in _tool_names(await gateway.http.get("/mcp/v1/tools/list-tools", headers=_as("a")))
        refused = await gateway.http.post(
            "/mcp/v1/tools/call-tool", headers=_as("a"), json={"name": "echo", "arguments": {"message": "x"}}
        )
        assert refused.status_code == 404
        assert gateway.tenants.sessions.get(("a", "everything", "")) is None


async def test_the_tool_server_learns_who_the_call_acts_for_and_header_values_never_leave() -> None:
    secret = "Bearer sk-tenant-secret-4711"
    caller = {"tenant": "a", "user": "u-1", "role": "admin", "runId": "run-1", "conversationId": "conv-1"}
    key = Fernet.generate_key().decode()
    with capture_logs() as logs:
        async with echo_http_server("notes") as url, running_gateway({}, secrets_key=key) as gateway:
            created = await gateway.http.post(
                SERVERS.format(tenant="a"), json={"name": "notes", "url": url, "headers": {"Authorization": secret}}
            )
            assert created.status_code == 201, created.text
            assert created.json()["headerNames"] == ["Authorization"]
            await _listed(gateway.tenants, "a", "notes")

            called = await gateway.http.post(
                "/mcp/v1/tools/call-tool",
                headers=_as("a"),
                json={"name": "caller_meta", "arguments": {}, "caller": caller},
            )
            answers = [
                created,
                called,
                await gateway.http.get(SERVERS.format(tenant="a")),
                await gateway.http.get(SERVERS.format(tenant="a") + "/notes"),
                await gateway.http.patch(SERVERS.format(tenant="a") + "/notes", json={"allowedTools": ["caller_meta"]}),
                await gateway.http.get("/mcp/v1/tools/list-tools", headers=_as("a")),
                await gateway.http.get("/mcp/v1/servers"),
            ]

    assert json.loads(called.json()["content"][0]["text"]) == caller
    for answer in answers:
        assert "sk-tenant-secret" not in answer.text
    assert not [line for line in logs if "sk-tenant-secret" in repr(line)]


async def test_registering_a_url_the_outbound_policy_blocks_is_refused_saying_why() -> None:
    async with running_gateway({"shared": {"url": "http://127.0.0.1:9/mcp"}}, ssrf_allow_loopback=False) as gateway:
        path = SERVERS.format(tenant="a")
        for url, why in (
            ("http://169.254.169.254/latest/meta-data/", "metadata"),
            ("http://127.0.0.1:9/mcp", "loopback"),
            ("http://localhost:9/mcp", "loopback"),  # a name resolving to a blocked address
            ("http://10.1.2.3/mcp", "private"),
        ):
            refused = await gateway.http.post(path, json={"name": "x", "url": url})
            assert (refused.status_code, _error_code(refused)) == (422, "url_not_allowed"), refused.text
            assert why in refused.json()["error"]["message"]
        referencing = await gateway.http.post(
            path, json={"name": "x", "url": "https://example.com/mcp", "headers": {"A": "${env:HOME}"}}
        )
        assert (referencing.status_code, _error_code(referencing)) == (400, "invalid_server")
        shared_name = await gateway.http.post(path, json={"name": "shared", "url": "https://example.com/mcp"})
        assert (shared_name.status_code, _error_code(shared_name)) == (409, "server_exists")
        unknown_field = await gateway.http.post(path, json={"name": "x", "url": "https://example.com/", "cmd": "sh"})
        assert unknown_field.status_code == 400
        assert (await gateway.http.get(path)).json()["servers"] == []


async def test_a_call_whose_connection_the_outbound_policy_refuses_is_403_and_not_a_tool_error() -> None:
    # One store, two replicas: the first may reach loopback (where it registers the server), the second may not.
    async with (
        echo_http_server("notes") as url,
        running_gateway({}) as permissive,
        running_gateway({}, ssrf_allow_loopback=False) as strict,
    ):
        created = await permissive.http.post(SERVERS.format(tenant="a"), json={"name": "notes", "url": url})
        assert created.status_code == 201, created.text
        await _listed(strict.tenants, "a", "notes")  # the strict replica learns of it from the store

        blocked = await strict.http.post(
            "/mcp/v1/tools/call-tool", headers=_as("a"), json={"name": "echo", "arguments": {"text": "x"}}
        )

        assert (blocked.status_code, _error_code(blocked)) == (403, "outbound_ssrf_blocked"), blocked.text
        assert "loopback" in blocked.json()["error"]["message"]


@asynccontextmanager
async def _gateway_process(database_url: str, folder: Path, name: str) -> AsyncIterator[httpx.AsyncClient]:
    port = free_port()
    servers_file = folder / f"{name}-servers.json"
    servers_file.write_text('{"mcpServers": {}}')
    env = {
        "MCP_CLIENT_PORT": str(port),
        "MCP_CLIENT_SERVICE_SECRET": GATEWAY_SECRET,
        "MCP_CLIENT_SERVERS_FILE": str(servers_file),
        "MCP_CLIENT_DATABASE_URL": database_url,
        "MCP_CLIENT_SSRF_ALLOW_LOOPBACK": "true",
    }
    async with (
        spawned("mcp_client_service", env, port, folder / f"{name}.log"),
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"X-MCP-Service-Secret": GATEWAY_SECRET}, timeout=10
        ) as http,
    ):
        yield http


async def _tools_of(http: httpx.AsyncClient, tenant: str) -> list[str]:
    return _tool_names(await http.get("/mcp/v1/tools/list-tools", headers=_as(tenant)))


async def test_a_server_switched_off_on_one_replica_leaves_the_others_catalog_within_5_seconds(tmp_path: Path) -> None:
    with fresh_postgres_database("mcp_client") as database_url:
        async with (
            echo_http_server("notes") as url,
            _gateway_process(database_url, tmp_path, "one") as one,
            _gateway_process(database_url, tmp_path, "two") as two,
        ):
            created = await one.post(SERVERS.format(tenant="a"), json={"name": "notes", "url": url})
            assert created.status_code == 201, created.text

            async def two_lists_it() -> bool:
                return "echo" in await _tools_of(two, "a")

            await polled(two_lists_it, WAIT_SECONDS)
            switched = await one.patch(SERVERS.format(tenant="a") + "/notes", json={"enabled": False})
            assert switched.status_code == 200, switched.text

            async def two_dropped_it() -> bool:
                return "echo" not in await _tools_of(two, "a")

            await polled(two_dropped_it, 5.0)
            refused = await two.post(
                "/mcp/v1/tools/call-tool", headers=_as("a"), json={"name": "echo", "arguments": {"text": "x"}}
            )
            assert refused.status_code == 404
            assert "echo" not in await _tools_of(two, "b")


@pytest.mark.parametrize("cap", ["²", "\u0661", "-1", "1.5", " 3", "10001", "9" * 5000])
async def test_a_max_servers_that_is_not_ascii_digits_in_range_is_400_never_500(cap: str) -> None:
    async with running_gateway({}) as gateway:
        for response in (
            await gateway.http.get(SERVERS.format(tenant="a"), params={"maxServers": cap}),
            await gateway.http.post(
                SERVERS.format(tenant="a"), params={"maxServers": cap}, json={"name": "x", "url": "http://x.test/"}
            ),
        ):
            assert (response.status_code, _error_code(response)) == (400, "invalid_request"), response.text


async def test_a_callers_tenant_other_than_the_headers_is_refused_and_without_the_header_it_is_not_passed_on() -> None:
    caller = {"tenant": "a", "user": "u-1", "runId": "run-1"}
    async with echo_http_server("notes") as url, running_gateway({"notes": {"url": url}}) as gateway:
        await gateway.wait_until_ready("notes")
        call = {"name": "caller_meta", "arguments": {}, "caller": caller}

        mismatch = await gateway.http.post("/mcp/v1/tools/call-tool", headers=_as("b"), json=call)
        assert (mismatch.status_code, _error_code(mismatch)) == (400, "tenant_mismatch")
        streamed = await gateway.http.post(
            "/mcp/v1/tools/call-tool", headers={**_as("b"), "accept": "text/event-stream"}, json=call
        )
        assert streamed.status_code == 400

        same = await gateway.http.post("/mcp/v1/tools/call-tool", headers=_as("a"), json=call)
        assert json.loads(same.json()["content"][0]["text"]) == caller
        shared = await gateway.http.post("/mcp/v1/tools/call-tool", json=call)
        assert json.loads(shared.json()["content"][0]["text"]) == {"user": "u-1", "runId": "run-1"}


async def test_a_urls_password_and_query_values_are_masked_in_answers_and_kept_in_the_store() -> None:
    async with echo_http_server("notes") as url, running_gateway({}) as gateway:
        secret_url = url.replace("http://", "http://me:pw-4711@") + "?api_key=sk-4711&region=eu"
        created = await gateway.http.post(SERVERS.format(tenant="a"), json={"name": "notes", "url": secret_url})
        assert created.status_code == 201, created.text
        await _listed(gateway.tenants, "a", "notes")
        answers = [
            created,
            await gateway.http.get(SERVERS.format(tenant="a")),
            await gateway.http.get(SERVERS.format(tenant="a") + "/notes"),
            await gateway.http.patch(SERVERS.format(tenant="a") + "/notes", json={"enabled": True}),
        ]
        stored = await gateway.tenants.store.get("a", "notes")

    assert created.json()["url"] == url.replace("http://", "http://me:***@") + "?api_key=***&region=***"
    for answer in answers:
        assert "4711" not in answer.text
    assert stored is not None
    assert stored.url == secret_url


@pytest.mark.parametrize("tenant", ["t" * 65, "a b", ".hidden", "a:b"])
async def test_a_tenant_agent_service_would_refuse_is_refused_by_the_gateway_too(tenant: str) -> None:
    async with running_gateway({}) as gateway:
        assert (await gateway.http.get("/mcp/v1/tools/list-tools", headers=_as("t" * 64))).status_code == 200
        for response in (
            await gateway.http.get("/mcp/v1/tools/list-tools", headers={"X-Tenant-Id": tenant}),
            await gateway.http.get(SERVERS.format(tenant=tenant)),
        ):
            assert (response.status_code, _error_code(response)) == (400, "invalid_tenant"), response.text
