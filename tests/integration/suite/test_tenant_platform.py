"""Tenants that bring their own tools, through the whole suite as it is deployed (issue 27's end-to-end tests).

Two agent-service processes and two mcp-client-service (gateway) processes, each agent replica in front of its own
gateway replica; the agents share one PostgreSQL database and Redis, the gateways another PostgreSQL database (their
tenant server store). completion-service runs in the test's event loop over a scripted OpenAI. Tenants register
their servers through agent-service's admin API (``/api/v1/admin/mcp-servers``), which forwards to the gateway.

The gateways' outbound policy is a deployment's: loopback blocked, except 127.0.0.2 (``MCP_CLIENT_SSRF_ALLOWED_
NETWORKS``), where the tenants' tool servers listen; names resolve through a hosts file the tests rewrite
(``MCP_CLIENT_HOSTS_FILE``). The one shared server (the servers file's, an echo server with tools ``shared_*``) is at
``localhost``: the host names the operator wrote in the servers file are trusted. The third-party server is the npm
``@modelcontextprotocol/server-everything`` over streamable HTTP.

Tenants: ``a`` (an admin key and a plain key), ``b``, ``c`` and ``d`` (an admin key each), ``quiet`` (an admin key;
its agent switched off) and ``bare`` (no tool allowed); each scenario has tenants of its own, so the tests do not
depend on one another's servers.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import SecretStr
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.databases import REDIS_URL, fresh_postgres_database, redis_key_prefix
from support.echo_mcp_server import build_echo_server
from support.everything_server import everything_http_server
from support.fake_openai import ScriptedOpenAI
from support.mcp_gateway import GATEWAY_SECRET, WAIT_SECONDS, echo_http_server
from support.processes import agent_env, polled, spawned
from support.servers import free_port, serve_app

pytestmark = pytest.mark.anyio

A_ADMIN, A_APP, B_ADMIN, C_ADMIN, D_ADMIN, QUIET_ADMIN, BARE_APP = (
    f"{name}-{uuid.uuid4().hex}" for name in ("a-admin", "a-app", "b-admin", "c-admin", "d-admin", "quiet", "bare")
)
HEADER_VALUE = "Bearer tenant-a-secret-" + uuid.uuid4().hex
"""The value of the header tenant a registers its server with: write-only, never answered nor logged."""

CALLERS_FILE = f"""
[tenants.a]
[tenants.b]
[tenants.c]
[tenants.d]
[tenants.quiet]
[tenants.bare]
tools = []

{key_entry("a-admin", "a", A_ADMIN, role="admin")}
{key_entry("a-app", "a", A_APP)}
{key_entry("b-admin", "b", B_ADMIN, role="admin")}
{key_entry("c-admin", "c", C_ADMIN, role="admin")}
{key_entry("d-admin", "d", D_ADMIN, role="admin")}
{key_entry("quiet-admin", "quiet", QUIET_ADMIN, role="admin")}
{key_entry("bare-app", "bare", BARE_APP)}
"""

TENANT_SERVERS_HOST = "127.0.0.2"
"""Where the tenants' tool servers listen: a loopback address the gateways' policy allows, unlike 127.0.0.1."""
PRIVATE_NAME = "private.tenant.test"
"""A name the hosts file resolves to a private (RFC 1918) address."""
TENANT_D_NAME = "tools.tenant-d.test"
"""The name of tenant d's server: the hosts file says 127.0.0.2 at first, then 127.0.0.1 (loopback, blocked)."""

IDLE_SECONDS = 1.0
"""The gateways close a tenant server's session after this long without a call (``MCP_CLIENT_TENANT_IDLE_SECONDS``):
a session closed, the next call connects again, and the outbound policy checks the name's address then."""
CATALOG_CACHE_SECONDS = AgentSettings.model_fields["catalog_cache_seconds"].default
"""The agents keep each tenant's tool list as long as a deployment's do (the default): the 5 s bound includes it."""
SWITCH_OFF_SECONDS = 5.0
"""A server switched off is out of every replica's catalog within this (the issue's number)."""

ADMIN_SERVERS = "/api/v1/admin/mcp-servers"
MODEL = "gpt-4o"


@dataclass(frozen=True)
class Platform:
    llm: ScriptedOpenAI
    completion_url: str
    agents: tuple[httpx.AsyncClient, httpx.AsyncClient]
    """A client of each agent-service replica (``base_url`` its URL); replica i uses gateway replica i."""
    logs: tuple[Path, ...]
    """The log files the four service processes write."""
    folder: Path
    everything_url: str
    """server-everything's MCP URL, at ``TENANT_SERVERS_HOST``."""

    @property
    def hosts_file(self) -> Path:
        return self.folder / "hosts"

    def resolve(self, lines: str) -> None:
        """Replace the gateways' hosts file (a new file moved over it: they notice the change at their next
        connection)."""
        fresh = self.folder / "hosts.new"
        fresh.write_text(lines)
        os.replace(fresh, self.hosts_file)


def _hosts(tenant_d_address: str) -> str:
    return f"10.20.30.40 {PRIVATE_NAME}\n{tenant_d_address} {TENANT_D_NAME}\n"


def _gateway_env(port: int, folder: Path, database_url: str) -> dict[str, str]:
    return {
        "MCP_CLIENT_PORT": str(port),
        "MCP_CLIENT_SERVICE_SECRET": GATEWAY_SECRET,
        "MCP_CLIENT_SERVERS_FILE": str(folder / "servers.json"),
        "MCP_CLIENT_DATABASE_URL": database_url,
        "MCP_CLIENT_SECRETS_KEY": (folder / "secrets.key").read_text(),
        "MCP_CLIENT_SSRF_ALLOWED_NETWORKS": f"{TENANT_SERVERS_HOST}/32",
        "MCP_CLIENT_HOSTS_FILE": str(folder / "hosts"),
        "MCP_CLIENT_TENANT_IDLE_SECONDS": str(IDLE_SECONDS),
    }


@pytest.fixture(scope="module")
def databases() -> Iterator[tuple[str, str]]:
    """The agents' and the gateways' PostgreSQL databases, this module's own."""
    with fresh_postgres_database("agent") as agent_url, fresh_postgres_database("mcp_client") as gateway_url:
        yield agent_url, gateway_url


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory, databases: tuple[str, str]) -> AsyncIterator[Platform]:
    folder = tmp_path_factory.mktemp("platform")
    agent_database, gateway_database = databases
    llm = ScriptedOpenAI()
    (folder / "callers.toml").write_text(CALLERS_FILE)
    (folder / "secrets.key").write_text(Fernet.generate_key().decode())
    (folder / "hosts").write_text(_hosts(TENANT_SERVERS_HOST))
    async with AsyncExitStack() as running:
        shared_url = await running.enter_async_context(echo_http_server("shared", tool_prefix="shared_"))
        shared_url = shared_url.replace("127.0.0.1", "localhost")  # a name: the servers file's are trusted
        (folder / "servers.json").write_text(json.dumps({"mcpServers": {"shared": {"url": shared_url}}}))
        everything = await running.enter_async_context(everything_http_server(folder / "everything.log"))
        llm_url = await running.enter_async_context(serve_app(llm.app))
        settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), max_retries=0
        )
        completion_url = await running.enter_async_context(serve_app(create_completion_app(settings)))
        prefix = await running.enter_async_context(redis_key_prefix())
        agents = []
        logs = []
        for replica in (1, 2):
            gateway_port, agent_port = free_port(), free_port()
            gateway_log, agent_log = folder / f"gateway-{replica}.log", folder / f"agent-{replica}.log"
            env = _gateway_env(gateway_port, folder, gateway_database)
            await running.enter_async_context(spawned("mcp_client_service", env, gateway_port, gateway_log))
            env = agent_env(
                agent_port,
                completion_url,
                f"http://127.0.0.1:{gateway_port}",
                database_url=agent_database,
                callers_file=folder / "callers.toml",
                redis_url=REDIS_URL,
                redis_key_prefix=prefix,
                catalog_cache_seconds=CATALOG_CACHE_SECONDS,
            )
            await running.enter_async_context(spawned("agent_service", env, agent_port, agent_log))
            http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{agent_port}", timeout=30)
            agents.append(await running.enter_async_context(http))
            logs += [gateway_log, agent_log]
        yield Platform(
            llm=llm,
            completion_url=completion_url,
            agents=(agents[0], agents[1]),
            logs=tuple(logs),
            folder=folder,
            everything_url=everything.replace("127.0.0.1", TENANT_SERVERS_HOST),
        )


# --- helpers ---------------------------------------------------------------------------------------------------


def _error(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def _run(question: str, **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": question}], **fields}


async def _tool_names(agent: httpx.AsyncClient, key: str) -> set[str]:
    listed = await agent.get("/api/v1/agent/tools", headers=as_caller(key))
    assert listed.status_code == 200, listed.text
    return {tool["name"] for tool in listed.json()["tools"]}


async def _listed(agent: httpx.AsyncClient, key: str, name: str) -> dict[str, Any]:
    """The server's card once its tools are listed (registration lists them in the background)."""
    card: dict[str, Any] = {}

    async def listed() -> bool:
        nonlocal card
        response = await agent.get(f"{ADMIN_SERVERS}/{name}", headers=as_caller(key))
        assert response.status_code == 200, response.text
        card = response.json()
        assert card["state"] != "failed", card
        return bool(card["toolCount"])

    await polled(listed, WAIT_SECONDS)
    return card


async def _offered(platform: Platform, agent: httpx.AsyncClient, key: str) -> set[str]:
    """The tools a run of ``agent`` offers the model now (the run answers at once)."""
    platform.llm.push(fake_openai.text("Nothing to do."))
    response = await agent.post("/api/v1/agent/run", json=_run("anything?"), headers=as_caller(key))
    assert response.status_code == 200, response.text
    return {tool["function"]["name"] for tool in platform.llm.requests[-1].get("tools", [])}


# --- a tenant's own server, and nobody else's ------------------------------------------------------------------


async def test_a_tenants_third_party_server_serves_its_runs_and_no_other_tenant_or_plain_key_reaches_it(
    platform: Platform,
) -> None:
    one, two = platform.agents
    answers: list[httpx.Response] = []
    server = {"name": "everything", "url": platform.everything_url, "headers": {"Authorization": HEADER_VALUE}}
    created = await one.post(ADMIN_SERVERS, json=server, headers=as_caller(A_ADMIN))
    answers.append(created)
    assert created.status_code == 201, created.text
    assert created.json()["headerNames"] == ["Authorization"]
    card = await _listed(one, A_ADMIN, "everything")
    everything_tools = {tool["name"] for tool in card["tools"]}
    assert "echo" in everything_tools

    # Tenant a: its catalog is the shared tools and its own, on this replica at once and on the other within
    # seconds (its gateway reads the store's revision, it keeps a tenant's catalog for a while); a run calls its tool.
    assert {"echo", "shared_echo"} <= await _tool_names(one, A_APP)

    async def two_lists_it() -> bool:
        return "echo" in await _tool_names(two, A_APP)

    await polled(two_lists_it, SWITCH_OFF_SECONDS)
    platform.llm.push(
        fake_openai.tool_calls(("call_1", "echo", {"message": "hello from a"})), fake_openai.text("It said hello.")
    )
    ran = await two.post("/api/v1/agent/run", json=_run("echo it", tools=["echo"]), headers=as_caller(A_APP))
    answers.append(ran)
    assert ran.status_code == 200, ran.text
    assert [message["role"] for message in ran.json()["messages"]] == ["assistant", "tool", "assistant"]
    assert "hello from a" in ran.json()["messages"][1]["content"]
    assert ran.json()["message"]["content"] == "It said hello."

    # Tenant b, on either replica: not in its tools, its admin list, its runs; by name, a server it does not have.
    for agent in platform.agents:
        tools = await _tool_names(agent, B_ADMIN)
        assert "shared_echo" in tools
        assert not tools & everything_tools
        listed = await agent.get(ADMIN_SERVERS, headers=as_caller(B_ADMIN))
        assert listed.status_code == 200
        assert listed.json()["servers"] == []
        refused = await agent.post("/api/v1/agent/run", json=_run("echo?", tools=["echo"]), headers=as_caller(B_ADMIN))
        assert _error(refused) == (400, "unknown_tools")
        available = refused.json()["error"]["message"].partition("Available tools: ")[2].rstrip(".").split(", ")
        assert not set(available) & everything_tools
        for method, body in (("GET", None), ("PATCH", {"enabled": False}), ("DELETE", None)):
            theirs = await agent.request(method, f"{ADMIN_SERVERS}/everything", json=body, headers=as_caller(B_ADMIN))
            assert _error(theirs) == (404, "server_not_found"), (method, theirs.text)
        answers.append(listed)

    # A key of tenant a without the admin role: 403 for every operation, nothing changed.
    operations: tuple[tuple[str, str, dict[str, Any] | None], ...] = (
        ("GET", ADMIN_SERVERS, None),
        ("POST", ADMIN_SERVERS, {"name": "mine", "url": platform.everything_url}),
        ("GET", f"{ADMIN_SERVERS}/everything", None),
        ("PATCH", f"{ADMIN_SERVERS}/everything", {"enabled": False}),
        ("DELETE", f"{ADMIN_SERVERS}/everything", None),
    )
    for method, path, body in operations:
        plain = await one.request(method, path, json=body, headers=as_caller(A_APP))
        assert _error(plain) == (403, "admin_only"), (method, path, plain.text)
    still = await two.get(f"{ADMIN_SERVERS}/everything", headers=as_caller(A_ADMIN))
    assert (still.json()["enabled"], still.json()["headerNames"]) == (True, ["Authorization"])

    # The header's value: in no answer, and in no line any service process logged.
    answers += [still, await two.get(ADMIN_SERVERS, headers=as_caller(A_ADMIN))]
    secret = HEADER_VALUE.removeprefix("Bearer ")
    assert not [answer.request.url for answer in answers if secret in answer.text]
    logged = {log.name: log.read_text() for log in platform.logs}
    assert "tenant_server_changed" in logged["agent-1.log"]  # the logs are written as it happens, and read here
    assert not [name for name, text in logged.items() if secret in text]


# --- a switch reaches every replica ----------------------------------------------------------------------------


async def test_a_server_switched_off_through_one_agent_replica_is_not_offered_by_the_others_runs_within_5_seconds(
    platform: Platform,
) -> None:
    one, two = platform.agents
    created = await one.post(
        ADMIN_SERVERS, json={"name": "everything", "url": platform.everything_url}, headers=as_caller(C_ADMIN)
    )
    assert created.status_code == 201, created.text
    await _listed(one, C_ADMIN, "everything")

    async def offered_by_two() -> bool:
        return "echo" in await _offered(platform, two, C_ADMIN)

    await polled(offered_by_two, WAIT_SECONDS)

    switched = await one.patch(f"{ADMIN_SERVERS}/everything", json={"enabled": False}, headers=as_caller(C_ADMIN))
    assert switched.status_code == 200, switched.text
    assert switched.json()["state"] == "disabled"
    started = time.monotonic()

    async def gone_from_two() -> bool:
        return "echo" not in await _offered(platform, two, C_ADMIN)

    await polled(gone_from_two, SWITCH_OFF_SECONDS)
    took = time.monotonic() - started
    assert took < SWITCH_OFF_SECONDS
    assert "shared_echo" in await _offered(platform, two, C_ADMIN)  # the shared tools stay
    refused = await two.post("/api/v1/agent/run", json=_run("echo?", tools=["echo"]), headers=as_caller(C_ADMIN))
    assert _error(refused) == (400, "unknown_tools")


# --- the outbound policy ---------------------------------------------------------------------------------------


async def test_registering_a_url_the_outbound_policy_blocks_is_422_saying_why(platform: Platform) -> None:
    agent = platform.agents[0]
    for url, why in (
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        (f"http://127.0.0.1:{free_port()}/mcp", "loopback"),
        (f"http://{PRIVATE_NAME}/mcp", "private"),
    ):
        refused = await agent.post(ADMIN_SERVERS, json={"name": "probe", "url": url}, headers=as_caller(D_ADMIN))
        assert _error(refused) == (422, "url_not_allowed"), refused.text
        assert why in refused.json()["error"]["message"], refused.text
    listed = await agent.get(ADMIN_SERVERS, headers=as_caller(D_ADMIN))
    assert [server["name"] for server in listed.json()["servers"]] == []


class _CountedRequests:
    """An ASGI app's wrapper that counts the HTTP requests it receives."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.count = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.count += 1
        await self.app(scope, receive, send)


async def test_a_server_whose_name_turns_to_a_blocked_address_ends_the_next_run_with_403_and_is_never_called(
    platform: Platform,
) -> None:
    agent = platform.agents[0]
    # The echo server answers requests for the name only (its check against DNS rebinding is the Host header's).
    security = TransportSecuritySettings(allowed_hosts=[f"{TENANT_D_NAME}:*"])
    counted = _CountedRequests(build_echo_server("notes").streamable_http_app(transport_security=security))
    async with serve_app(counted, host=TENANT_SERVERS_HOST) as url:
        port = url.rpartition(":")[2]
        server = {"name": "notes", "url": f"http://{TENANT_D_NAME}:{port}/mcp"}
        created = await agent.post(ADMIN_SERVERS, json=server, headers=as_caller(D_ADMIN))
        assert created.status_code == 201, created.text
        await _listed(agent, D_ADMIN, "notes")
        platform.llm.push(fake_openai.tool_calls(("call_1", "echo", {"text": "before"})), fake_openai.text("Done."))
        before = await agent.post("/api/v1/agent/run", json=_run("echo", tools=["echo"]), headers=as_caller(D_ADMIN))
        assert before.status_code == 200, before.text
        assert "before" in before.json()["messages"][1]["content"]

        # The session the call opened closes when idle: the next call has to connect, and resolve the name, again.
        async def idle() -> bool:
            card = await agent.get(f"{ADMIN_SERVERS}/notes", headers=as_caller(D_ADMIN))
            return bool(card.json()["state"] == "idle")

        await polled(idle, IDLE_SECONDS + WAIT_SECONDS)
        platform.resolve(_hosts("127.0.0.1"))
        received, asked = counted.count, len(platform.llm.requests)

        platform.llm.push(fake_openai.tool_calls(("call_2", "echo", {"text": "after"})))  # no reply after it
        blocked = await agent.post("/api/v1/agent/run", json=_run("echo", tools=["echo"]), headers=as_caller(D_ADMIN))

        assert _error(blocked) == (403, "outbound_ssrf_blocked"), blocked.text
        assert "outbound policy" in blocked.json()["error"]["message"]  # not which address: no probe of the network
        assert counted.count == received  # the tool server heard nothing
        assert len(platform.llm.requests) == asked + 1  # and the model was not told
    platform.resolve(_hosts(TENANT_SERVERS_HOST))


# --- plain chat without the gateway ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def gatewayless_agent(platform: Platform) -> AsyncIterator[httpx.AsyncClient]:
    """An agent-service process whose gateway process was started, then stopped (killed)."""
    folder = platform.folder
    gateway_port, agent_port = free_port(), free_port()
    gateway_env = {
        **_gateway_env(gateway_port, folder, f"sqlite:///{folder}/gateway-stopped.db"),
        "MCP_CLIENT_HOSTS_FILE": "",
    }
    env = agent_env(
        agent_port,
        platform.completion_url,
        f"http://127.0.0.1:{gateway_port}",
        database_url=f"sqlite:///{folder}/agent-alone.db",
        callers_file=folder / "callers.toml",
    )
    async with (
        spawned("mcp_client_service", gateway_env, gateway_port, folder / "gateway-stopped.log") as gateway,
        spawned("agent_service", env, agent_port, folder / "agent-alone.log"),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{agent_port}", timeout=30) as http,
    ):
        gateway.kill()
        await gateway.wait()
        with pytest.raises(httpx.ConnectError):
            await http.get(f"http://127.0.0.1:{gateway_port}/healthz")
        yield http


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Hello?"}]}


async def test_a_tenant_with_the_agent_off_gets_plain_completions_with_the_gateway_stopped(
    platform: Platform, gatewayless_agent: httpx.AsyncClient
) -> None:
    off = await gatewayless_agent.patch(
        "/api/v1/admin/runtime", json={"agentEnabled": False}, headers=as_caller(QUIET_ADMIN)
    )
    assert off.status_code == 200, off.text
    assert off.json()["agentEnabled"] is False
    platform.llm.push(fake_openai.text("Plain hello."))
    answer = await gatewayless_agent.post("/v1/chat/completions", json=CHAT, headers=as_caller(QUIET_ADMIN))
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "Plain hello."
    assert "x-agent-run-id" not in answer.headers  # one completion, not a run
    assert "tools" not in platform.llm.requests[-1]


async def test_a_tenant_without_tools_gets_plain_completions_with_the_gateway_stopped(
    platform: Platform, gatewayless_agent: httpx.AsyncClient
) -> None:
    platform.llm.push(fake_openai.text("Plain hello."))
    answer = await gatewayless_agent.post("/v1/chat/completions", json=CHAT, headers=as_caller(BARE_APP))
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "Plain hello."
    assert "x-agent-run-id" not in answer.headers
    assert "tools" not in platform.llm.requests[-1]
