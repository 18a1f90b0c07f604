"""End users' roles (``X-User-Role``) through the real services: which tools a role is offered and may name
(``tool_roles``), and its monthly budget (``role_monthly_tokens``).

Two echo MCP servers behind a real mcp-client-service (``tools``: echo, add, ...; ``other``: other_echo, ...); only
the LLM is scripted. ``acme`` maps ``add`` to admins and the whole ``other`` server to owners, and gives each guest
one token a month (a run's first call uses it up); admins and owners have no budget.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.stacks import AgentStack, stack_of_callers

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
UNTRUSTED_KEY = "acme-untrusted-" + uuid.uuid4().hex

CALLERS_FILE = f"""
[tenants.acme]
tool_roles = {{"add" = "admin", "other:*" = "owner"}}
role_monthly_tokens = {{guest = 1}}

{key_entry("acme-platform", "acme", ACME_KEY, trusted=True)}

{key_entry("acme-app", "acme", UNTRUSTED_KEY)}
"""


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentStack]:
    async with stack_of_callers(
        tmp_path_factory.mktemp("roles"), CALLERS_FILE, echo={"tools": "", "other": "other_"}
    ) as stack:
        yield stack


def _run(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], **extra}


def _user(role: str) -> str:
    return f"{role}-{uuid.uuid4().hex[:8]}"  # a user of its own per test: budgets are counted per user


async def _offered(stack: AgentStack, role: str) -> set[str]:
    """The tools the LLM is offered in a run of an end user of ``role``."""
    stack.llm.push(fake_openai.text("done"))
    asked = len(stack.llm.requests)
    headers = as_caller(ACME_KEY, _user(role), role=role)
    response = await stack.http.post("/api/v1/agent/run", json=_run(), headers=headers)
    assert response.status_code == 200, response.text
    [request] = stack.llm.requests[asked:]
    return {tool["function"]["name"] for tool in request.get("tools") or []}


async def test_a_guest_is_not_offered_a_tool_mapped_to_admin_nor_an_owners_server(stack: AgentStack) -> None:
    guest, user, admin, owner = [await _offered(stack, role) for role in ("guest", "user", "admin", "owner")]
    assert "echo" in guest
    assert "add" not in guest
    assert not any(name.startswith("other_") for name in guest)
    assert user == guest
    assert admin == guest | {"add"}
    assert {"add", "other_echo"} <= owner
    assert owner > admin


async def test_the_tool_list_shows_a_guest_only_the_tools_of_its_role(stack: AgentStack) -> None:
    guest = await stack.http.get("/api/v1/agent/tools", headers=as_caller(ACME_KEY, role="guest"))
    owner = await stack.http.get("/api/v1/agent/tools", headers=as_caller(ACME_KEY, role="owner"))
    assert guest.status_code == owner.status_code == 200, guest.text
    guest_names = {tool["name"] for tool in guest.json()["tools"]}
    owner_names = {tool["name"] for tool in owner.json()["tools"]}
    assert "echo" in guest_names
    assert {"add", "other_echo"} <= owner_names - guest_names


async def test_a_guest_naming_a_tool_mapped_to_admin_is_403_and_an_admin_may_use_it(stack: AgentStack) -> None:
    asked = len(stack.llm.requests)
    refused = await stack.http.post(
        "/api/v1/agent/run", json=_run(tools=["echo", "add"]), headers=as_caller(ACME_KEY, _user("g"), role="guest")
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"] == {
        "code": "tool_not_allowed",
        "message": "Tools not allowed to the end user's role (guest): add.",
    }
    assert len(stack.llm.requests) == asked  # refused before anything ran
    stack.llm.push(fake_openai.text("done"))
    admin = await stack.http.post(
        "/api/v1/agent/run", json=_run(tools=["add"]), headers=as_caller(ACME_KEY, _user("a"), role="admin")
    )
    assert admin.status_code == 200, admin.text


async def test_the_openai_front_offers_a_guest_only_the_tools_of_its_role(stack: AgentStack) -> None:
    stack.llm.push(fake_openai.text("hi"))
    asked = len(stack.llm.requests)
    async with openai.AsyncOpenAI(
        base_url=f"{stack.agent_url}/v1", api_key=ACME_KEY, max_retries=0, default_headers={"X-User-Role": "guest"}
    ) as client:
        answer = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "hi"
    [request] = stack.llm.requests[asked:]
    offered = {tool["function"]["name"] for tool in request.get("tools") or []}
    assert "echo" in offered
    assert "add" not in offered


async def test_a_guests_monthly_budget_applies_and_an_owners_does_not(stack: AgentStack) -> None:
    guest, owner = as_caller(ACME_KEY, _user("guest"), role="guest"), as_caller(ACME_KEY, _user("owner"), role="owner")
    for _ in range(2):  # an owner has no budget: each run is admitted and answered
        stack.llm.push(fake_openai.text("done"))
        answered = await stack.http.post("/api/v1/agent/run", json=_run(), headers=owner)
        assert answered.status_code == 200, answered.text
        assert answered.json()["finishReason"] == "stop"
    stack.llm.push(fake_openai.text("done"))
    first = await stack.http.post("/api/v1/agent/run", json=_run(), headers=guest)
    assert first.status_code == 200, first.text  # its one call uses the guest's token up
    refused = await stack.http.post("/api/v1/agent/run", json=_run(), headers=guest)
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "budget_exhausted"
    assert "(role_monthly_tokens.guest: " in error["message"]


async def test_an_untrusted_key_may_not_name_a_role_and_a_wrong_role_is_400(stack: AgentStack) -> None:
    untrusted = await stack.http.post("/api/v1/agent/run", json=_run(), headers=as_caller(UNTRUSTED_KEY, role="guest"))
    assert untrusted.status_code == 403, untrusted.text
    assert untrusted.json()["error"]["code"] == "user_not_allowed"
    wrong = await stack.http.post("/api/v1/agent/run", json=_run(), headers=as_caller(ACME_KEY, role="superuser"))
    assert wrong.status_code == 400, wrong.text
    assert wrong.json()["error"]["code"] == "invalid_user_role"
