"""A tenant's tool rules hold at dispatch, not only when its run is planned, and whatever name a tool is listed under.

Real services: agent-service, completion-service over a scripted OpenAI, mcp-client-service over two echo MCP
servers over stdio. Under ``first_wins`` ``echo-a`` comes first, so the names both offer (``whoami``, ``pid``, ...)
are ``echo-a``'s while it serves and fall to ``echo-b`` while it is away (here: taken out of the servers file and
put back, a reload, so that the catalog changes exactly between a run's planning and its tool call). A call goes out
held to the server it was planned with, and runs there or nowhere. ``acme`` and ``initech`` may use nothing of
``echo-a``; ``globex`` has no rules. ``whoami`` results are cached (``AGENT_TOOL_CACHE_TTLS``), per tenant: each
test's tenant has no result of its planned server cached yet.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.mcp_gateway import WAIT_SECONDS, echo_stdio_server
from support.stacks import AgentStack, running_stack

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex
INITECH_KEY = "initech-" + uuid.uuid4().hex

CALLERS_FILE = f"""
[tenants.acme]
deny_tools = ["echo-a:*"]

[tenants.globex]

[tenants.initech]
deny_tools = ["echo-a:*"]

{key_entry("acme-app", "acme", ACME_KEY)}

{key_entry("globex-app", "globex", GLOBEX_KEY)}

{key_entry("initech-app", "initech", INITECH_KEY)}
"""

BOTH = {"echo-a": echo_stdio_server("echo-a"), "echo-b": echo_stdio_server("echo-b")}
ONLY_B = {"echo-b": BOTH["echo-b"]}
B_WITHOUT_WHOAMI = {"echo-a": BOTH["echo-a"], "echo-b": {**BOTH["echo-b"], "deniedTools": ["whoami"]}}


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentStack]:
    folder = tmp_path_factory.mktemp("rules-at-dispatch")
    callers = folder / "callers.toml"
    callers.write_text(CALLERS_FILE)
    async with running_stack(echo={}, servers=BOTH, callers_file=callers, tool_cache_ttls={"whoami": 300}) as stack:
        yield stack


async def _serve(stack: AgentStack, servers: dict[str, Any]) -> None:
    """The gateway's servers become ``servers`` (a reload), each of them serving before this returns."""
    stack.gateway.write_servers(servers)
    reloaded = await stack.gateway.http.post("/mcp/v1/servers/reload")
    assert reloaded.status_code == 200, reloaded.text
    await stack.gateway.wait_until_ready(*servers)


def _run(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "who are you?"}], **extra}


def _offered(body: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools") or []}


async def _run_planned_on_echo_b_and_called_after_a_reload(
    stack: AgentStack, key: str, servers: dict[str, Any]
) -> tuple[httpx.Response, dict[str, Any]]:
    """A run planned while only echo-b serves, whose model calls ``whoami`` once the gateway serves ``servers``
    (with echo-a back, first again, "whoami" is echo-a's); its answer and the LLM's request that got the tool's
    result."""
    await _serve(stack, ONLY_B)
    release = anyio.Event()
    stack.llm.push(fake_openai.held(fake_openai.tool_calls(("call_1", "whoami", {})), release), fake_openai.text("ok"))
    asked = len(stack.llm.requests)
    answer: list[httpx.Response] = []

    async def run() -> None:
        answer.append(await stack.http.post("/api/v1/agent/run", json=_run(), headers=as_caller(key)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(WAIT_SECONDS):
            await stack.llm.wait_for_request(asked + 1)
        assert "whoami" in _offered(stack.llm.requests[asked])  # planned: echo-b's whoami, which the tenant may use
        await _serve(stack, servers)
        release.set()
    [response] = answer
    assert response.status_code == 200, response.text
    return response, stack.llm.requests[asked + 1]


def _tool_message(request: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [message for message in request["messages"] if message["role"] == "tool"]
    [message] = messages
    return message


def _servers_called(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The servers the gateway called (``mcp_tool_call``: every call it made, or found unavailable)."""
    return [log["server"] for log in logs if log["event"] == "mcp_tool_call"]


async def test_a_name_that_moved_to_a_denied_server_after_planning_runs_on_the_planned_server(
    stack: AgentStack,
) -> None:
    try:
        with capture_logs() as logs:
            response, second = await _run_planned_on_echo_b_and_called_after_a_reload(stack, ACME_KEY, BOTH)
    finally:
        await _serve(stack, BOTH)

    assert _tool_message(second)["content"] == "echo-b"  # echo-b's whoami, as planned, though "whoami" is echo-a's
    [tool_message] = [message for message in response.json()["messages"] if message["role"] == "tool"]
    assert not tool_message.get("isError")
    assert _servers_called(logs) == ["echo-b"]  # echo-a, which acme may not use, ran nothing
    assert not [log for log in logs if log["event"] == "mcp_tool_call_refused"]
    [audit] = [log for log in logs if log["event"] == "audit_tool_call"]
    assert (audit["tool"], audit["server"], audit["status"]) == ("whoami", "echo-b", "ok")


async def test_the_result_of_a_moved_name_is_cached_under_the_server_that_ran_it_not_under_the_name(
    stack: AgentStack,
) -> None:
    try:
        _, moved = await _run_planned_on_echo_b_and_called_after_a_reload(stack, GLOBEX_KEY, BOTH)
        assert _tool_message(moved)["content"] == "echo-b"

        # Planned on echo-a now ("whoami" is echo-a's): echo-b's result, cached by the run above, is not its answer.
        stack.llm.push(fake_openai.tool_calls(("call_2", "whoami", {})), fake_openai.text("ok"))
        asked = len(stack.llm.requests)
        with capture_logs() as logs:
            response = await stack.http.post("/api/v1/agent/run", json=_run(), headers=as_caller(GLOBEX_KEY))
        assert response.status_code == 200, response.text
    finally:
        await _serve(stack, BOTH)

    assert _tool_message(stack.llm.requests[asked + 1])["content"] == "echo-a"
    assert _servers_called(logs) == ["echo-a"]
    [audit] = [log for log in logs if log["event"] == "audit_tool_call"]
    assert (audit["server"], audit["status"]) == ("echo-a", "ok")


async def test_a_planned_server_that_no_longer_has_the_tool_is_refused_and_no_other_server_runs_it(
    stack: AgentStack,
) -> None:
    try:
        with capture_logs() as logs:
            response, second = await _run_planned_on_echo_b_and_called_after_a_reload(
                stack, INITECH_KEY, B_WITHOUT_WHOAMI
            )
    finally:
        await _serve(stack, BOTH)

    # The model reads it as the tool's error ("Error: ", as completion-service words an isError result).
    assert _tool_message(second)["content"] == (
        'Error: The tool call failed: The tool "whoami" was not called: the MCP server "echo-b" has no tool '
        '"whoami" now.'
    )
    [tool_message] = [message for message in response.json()["messages"] if message["role"] == "tool"]
    assert tool_message["isError"] is True
    assert _servers_called(logs) == []  # not echo-a, which has "whoami" and which initech may not use
    [refusal] = [log for log in logs if log["event"] == "mcp_tool_call_refused"]
    assert (refusal["tool"], refusal["server"], refusal["reason"]) == ("whoami", "echo-b", "no_such_tool")
    [audit] = [log for log in logs if log["event"] == "audit_tool_call"]
    assert (audit["tool"], audit["server"], audit["status"]) == ("whoami", "echo-b", "error")
