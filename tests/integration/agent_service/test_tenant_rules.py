"""What a tenant may use ([tenants.<name>] in AGENT_CALLERS_FILE), through the real services.

Two echo MCP servers behind a real mcp-client-service (``tools``: echo, add, ...; ``other``: other_echo, ...);
only the LLM is scripted. ``acme`` may run ``gpt-4o*`` models with ``echo`` and the whole ``other`` server less
``other_fail``; ``globex`` has no rules; ``initech`` may have one run in progress at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import openai
import pytest

from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.stacks import AgentStack, stack_of_callers

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex
INITECH_KEY = "initech-" + uuid.uuid4().hex


CALLERS_FILE = f"""
[tenants.acme]
models = ["gpt-4o*"]
tools = ["echo", "other:*"]
deny_tools = ["other:other_fail"]

[tenants.globex]

[tenants.initech]
max_concurrent_runs = 1

{key_entry("acme-app", "acme", ACME_KEY)}

{key_entry("globex-app", "globex", GLOBEX_KEY)}

{key_entry("initech-app", "initech", INITECH_KEY)}
"""


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentStack]:
    async with stack_of_callers(
        tmp_path_factory.mktemp("tenant-rules"), CALLERS_FILE, echo={"tools": "", "other": "other_"}
    ) as stack:
        yield stack


def _run(model: str = "gpt-4o", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], **extra}


def _offered(body: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools") or []}


async def _tools_offered(stack: AgentStack, key: str) -> set[str]:
    stack.llm.push(fake_openai.text("done"))
    asked = len(stack.llm.requests)
    response = await stack.http.post("/api/v1/agent/run", json=_run(), headers=as_caller(key))
    assert response.status_code == 200, response.text
    [request] = stack.llm.requests[asked:]
    return _offered(request)


async def test_a_model_the_tenant_may_not_run_is_refused_before_anything_runs(stack: AgentStack) -> None:
    asked = len(stack.llm.requests)
    refused = await stack.http.post("/api/v1/agent/run", json=_run("demo"), headers=as_caller(ACME_KEY))
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "model_not_allowed"
    async with openai.AsyncOpenAI(base_url=f"{stack.agent_url}/v1", api_key=ACME_KEY, max_retries=0) as client:
        with pytest.raises(openai.PermissionDeniedError) as denied:
            await client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "hi"}])
    assert denied.value.code == "model_not_allowed"
    assert len(stack.llm.requests) == asked  # nothing reached the LLM


async def _every_tool(stack: AgentStack) -> list[dict[str, Any]]:
    """The whole tool list, as globex (no rules) sees it."""
    listed = await stack.http.get("/api/v1/agent/tools", headers=as_caller(GLOBEX_KEY))
    assert listed.status_code == 200
    tools: list[dict[str, Any]] = listed.json()["tools"]
    return tools


async def _acme_tools(stack: AgentStack) -> set[str]:
    """What acme's rules allow: echo, and the whole other server but other_fail."""
    every = await _every_tool(stack)
    allowed = {tool["name"] for tool in every if tool["server"] == "other" and tool["name"] != "other_fail"}
    assert len(allowed) > 1
    return allowed | {"echo"}


async def test_the_openai_model_list_shows_a_tenant_only_its_models(stack: AgentStack) -> None:
    async with (
        openai.AsyncOpenAI(base_url=f"{stack.agent_url}/v1", api_key=ACME_KEY, max_retries=0) as acme,
        openai.AsyncOpenAI(base_url=f"{stack.agent_url}/v1", api_key=GLOBEX_KEY, max_retries=0) as globex,
    ):
        every = [model.id async for model in globex.models.list()]
        mine = [model.id async for model in acme.models.list()]
    assert "demo" in every  # completion-service's demo model, which acme may not run
    assert mine == [name for name in every if name.startswith("gpt-4o")]


async def test_a_tenant_is_offered_only_its_allowed_tools_and_others_all(stack: AgentStack) -> None:
    acme = await _tools_offered(stack, ACME_KEY)
    assert acme == await _acme_tools(stack)  # "add" is not allowed; "other_fail" is denied after "other:*"
    globex = await _tools_offered(stack, GLOBEX_KEY)
    assert globex == {tool["name"] for tool in await _every_tool(stack)}
    assert {"add", "other_fail"} <= globex


async def test_the_tool_list_shows_a_tenant_only_its_allowed_tools(stack: AgentStack) -> None:
    acme = await stack.http.get("/api/v1/agent/tools", headers=as_caller(ACME_KEY))
    assert acme.status_code == 200
    assert {tool["name"] for tool in acme.json()["tools"]} == await _acme_tools(stack)


@pytest.mark.parametrize("tool", ["add", "other_fail"])
async def test_a_run_naming_a_tool_the_tenant_may_not_use_is_refused_naming_it(stack: AgentStack, tool: str) -> None:
    refused = await stack.http.post("/api/v1/agent/run", json=_run(tools=["echo", tool]), headers=as_caller(ACME_KEY))
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "tool_not_allowed"
    assert tool in error["message"]


async def test_a_tool_nobody_has_is_still_unknown(stack: AgentStack) -> None:
    refused = await stack.http.post("/api/v1/agent/run", json=_run(tools=["nope"]), headers=as_caller(ACME_KEY))
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "unknown_tools"
    available = refused.json()["error"]["message"].split("Available tools: ")[1].rstrip(".")
    assert set(available.split(", ")) == await _acme_tools(stack)  # only its own are named


async def test_a_model_call_to_a_tool_outside_the_tenants_rules_is_refused_without_dispatch(stack: AgentStack) -> None:
    stack.llm.push(fake_openai.tool_calls(("call_1", "other_fail", {"message": "boom"})), fake_openai.text("ok"))
    asked = len(stack.llm.requests)
    response = await stack.http.post("/api/v1/agent/run", json=_run(), headers=as_caller(ACME_KEY))
    assert response.status_code == 200, response.text
    second = stack.llm.requests[asked + 1]
    [result] = [message for message in second["messages"] if message["role"] == "tool"]
    assert "not available in this run" in result["content"]
    assert "boom" not in result["content"]


async def test_a_tenants_own_cap_refuses_its_second_run_while_another_tenant_runs(stack: AgentStack) -> None:
    stack.llm.push(fake_openai.hang())
    asked = len(stack.llm.requests)
    async with (
        httpx.AsyncClient(base_url=stack.agent_url, timeout=30) as held,
        anyio.create_task_group() as task_group,
    ):
        task_group.start_soon(lambda: held.post("/api/v1/agent/run", json=_run(), headers=as_caller(INITECH_KEY)))
        with anyio.fail_after(20):
            await stack.llm.wait_for_request(asked + 1)
        second = await stack.http.post("/api/v1/agent/run", json=_run(), headers=as_caller(INITECH_KEY))
        assert second.status_code == 429, second.text
        assert second.json()["error"]["code"] == "too_many_runs"
        stack.llm.push(fake_openai.text("still served"))
        other = await stack.http.post("/api/v1/agent/run", json=_run(), headers=as_caller(GLOBEX_KEY))
        assert other.status_code == 200, other.text
        assert other.json()["message"]["content"] == "still served"
        task_group.cancel_scope.cancel()
