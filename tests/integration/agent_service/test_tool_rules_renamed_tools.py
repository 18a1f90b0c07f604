"""A tenant's tool rules hold for tools the gateway renames, and a rule naming a server the gateway lacks is logged.

Real services: agent-service, completion-service (its ``demo`` model), mcp-client-service with
``MCP_CLIENT_TOOL_NAME_COLLISION=prefix`` over three echo MCP servers over stdio: ``echo-a`` keeps its names,
``echo-b``'s are listed as ``echo-b__<tool>``, and ``echo-c`` has ``toolPrefix: "c_"``. A rule names a tool by its
listed name or by its server's own name, with or without the server (docs/callers.md).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from agent_service.access.callers_file import parse_callers
from agent_service.admission.rule_servers import check_rule_servers
from agent_service.app import create_app as create_agent_app
from agent_service.infra.peers import ToolsClient
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from suite_common.peer_client import HttpxPeerClient
from support.caller_keys import as_caller, key_entry
from support.mcp_gateway import GATEWAY_SECRET, Gateway, echo_stdio_server, running_gateway
from support.servers import free_port, serve_app
from support.stacks import running_agent

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex

CALLERS_FILE = f"""
[tenants.acme]
deny_tools = ["whoami", "echo-b:pid", "echo-c:echo"]

[tenants.initech]
tools = ["echo-b:echo", "pid"]

[tenants.globex]

[tenants.typo]
tools = ["echo-z:*"]
deny_tools = ["ecoh-b:pid", "echo-a:pid"]

{key_entry("acme-app", "acme", ACME_KEY)}

{key_entry("globex-app", "globex", GLOBEX_KEY)}

{key_entry("initech-app", "initech", "initech-" + ACME_KEY)}
"""

SERVERS = {
    "echo-a": echo_stdio_server("echo-a"),
    "echo-b": echo_stdio_server("echo-b"),
    "echo-c": {**echo_stdio_server("echo-c"), "toolPrefix": "c_"},
}


@dataclass
class Stack:
    gateway: Gateway
    http: httpx.AsyncClient


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    callers = tmp_path_factory.mktemp("renamed-tools") / "callers.toml"
    callers.write_text(CALLERS_FILE)
    async with (
        running_gateway(SERVERS, tool_name_collision="prefix") as gateway,
        serve_app(create_completion_app(CompletionSettings())) as completion_url,
        running_agent(completion_url, gateway, callers_file=callers) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        await gateway.wait_until_ready(*SERVERS)
        yield Stack(gateway, http)


async def _tools(stack: Stack, key: str) -> dict[str, str]:
    """The tools the tenant of ``key`` is shown (and offered), with their server."""
    listed = await stack.http.get("/api/v1/agent/tools", headers=as_caller(key))
    assert listed.status_code == 200, listed.text
    return {tool["name"]: tool["server"] for tool in listed.json()["tools"]}


async def test_a_deny_rule_on_a_tools_own_name_stops_it_under_every_name_it_is_listed_as(stack: Stack) -> None:
    every = await _tools(stack, GLOBEX_KEY)
    assert {"whoami", "echo-b__whoami", "c_whoami", "echo-b__pid", "c_echo"} <= set(every)  # renamed, listed

    acme = await _tools(stack, ACME_KEY)

    assert not {"whoami", "echo-b__whoami", "c_whoami"} & set(acme)  # "whoami": every server's
    assert "echo-b__pid" not in acme  # "echo-b:pid": echo-b's own pid, listed as echo-b__pid
    assert "c_echo" not in acme  # "echo-c:echo": echo-c's own echo, listed as c_echo
    assert {"pid", "c_pid", "echo", "echo-b__echo"} <= set(acme)  # the others' pid and echo stay
    assert set(acme) == set(every) - {"whoami", "echo-b__whoami", "c_whoami", "echo-b__pid", "c_echo"}


async def test_an_allow_rule_on_a_tools_own_name_allows_it_under_its_listed_name(stack: Stack) -> None:
    initech = await _tools(stack, "initech-" + ACME_KEY)
    assert initech == {"echo-b__echo": "echo-b", "pid": "echo-a", "echo-b__pid": "echo-b", "c_pid": "echo-c"}


@pytest.mark.parametrize("tool", ["echo-b__whoami", "echo-b__pid", "c_whoami"])
async def test_a_run_naming_a_renamed_denied_tool_is_refused(stack: Stack, tool: str) -> None:
    body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "tools": ["echo", tool]}
    refused = await stack.http.post("/api/v1/agent/run", json=body, headers=as_caller(ACME_KEY))
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "tool_not_allowed"
    assert tool in refused.json()["error"]["message"]


async def test_each_server_a_rule_names_that_the_gateway_does_not_have_is_logged_as_a_warning(stack: Stack) -> None:
    rules = parse_callers(CALLERS_FILE).rules
    async with httpx.AsyncClient() as http:
        tools = ToolsClient(
            HttpxPeerClient(http), stack.gateway.url, secret=GATEWAY_SECRET, secret_header="X-MCP-Service-Secret"
        )
        with capture_logs() as logs:
            await check_rule_servers(rules, tools)

    warnings = [(log["tenant"], log["server"]) for log in logs if log["event"] == "tool_rule_unknown_server"]
    assert warnings == [("typo", "echo-z"), ("typo", "ecoh-b")]
    assert all(log["log_level"] == "warning" for log in logs)


async def test_the_gateway_unreachable_at_the_start_only_says_the_rules_were_not_checked(tmp_path: Path) -> None:
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE)
    rules = parse_callers(CALLERS_FILE).rules
    closed = f"http://127.0.0.1:{free_port()}"
    async with httpx.AsyncClient() as http:
        tools = ToolsClient(HttpxPeerClient(http), closed, secret="s", secret_header="X-MCP-Service-Secret")
        with capture_logs() as logs:
            await check_rule_servers(rules, tools, within=0.5)
    [unchecked] = [log for log in logs if log["event"] != "tool_rule_unknown_server"]
    assert (unchecked["event"], unchecked["log_level"]) == ("tool_rules_unchecked", "warning")

    # The service starts all the same, and serves.
    settings = AgentSettings(
        completion_url=closed, mcp_client_url=closed, mcp_service_secret=SecretStr("s"), callers_file=callers
    )
    async with serve_app(create_agent_app(settings)) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/healthz")).status_code == 200
