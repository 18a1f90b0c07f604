"""Personas and the system-prompt cascade (AGENT_CALLERS_FILE), through the real services.

An echo MCP server behind a real mcp-client-service (``tools``: echo, add, ...); only the LLM is scripted, and what
it was sent (system message, model, tools) is what is checked. ``acme`` may run ``gpt-4o*`` models, has a default
system prompt and a ``shared`` persona of its own; ``globex`` has no rules.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.stacks import AgentStack, running_stack

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex


CALLERS_FILE = f"""
[personas.concise]
description = "Short answers, with echo"
system_prompt = "Answer in one sentence."
model = "gpt-4o-mini"
tools = ["echo"]

[personas.shared]
system_prompt = "The global shared prompt."
model = "gpt-4o"

[personas.limited]
model = "gpt-4o"
tools = []

[personas.elsewhere]
model = "claude-3-haiku"

[tenants.acme]
models = ["gpt-4o*"]
system_prompt = "You answer for ACME."

[tenants.acme.personas.shared]
description = "ACME's own"
system_prompt = "ACME's own shared prompt."
model = "gpt-4o"

[tenants.globex]

{key_entry("acme-app", "acme", ACME_KEY)}

{key_entry("globex-app", "globex", GLOBEX_KEY)}
"""


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentStack]:
    folder = tmp_path_factory.mktemp("personas")
    callers = folder / "callers.toml"
    callers.write_text(CALLERS_FILE)
    async with running_stack(database_url=f"sqlite:///{folder}/runs.db", callers_file=callers) as stack:
        yield stack


def _run(*messages: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"messages": list(messages) or [{"role": "user", "content": "hello"}], **extra}


async def _sent(stack: AgentStack, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """Runs ``body`` as ``key``'s caller (the LLM answers at once) and returns what the LLM was sent."""
    stack.llm.push(fake_openai.text("done"))
    asked = len(stack.llm.requests)
    response = await stack.http.post("/api/v1/agent/run", json=body, headers=as_caller(key))
    assert response.status_code == 200, response.text
    [request] = stack.llm.requests[asked:]
    return request


def _system(request: dict[str, Any]) -> list[str]:
    """The system messages the LLM was sent; the cascade's one, when there is one, comes first."""
    messages = request["messages"]
    system = [message["content"] for message in messages if message["role"] == "system"]
    if system:
        assert messages[0]["role"] == "system"
    return system


def _offered(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools") or []}


async def test_a_persona_gives_the_run_its_model_tools_and_system_prompt(stack: AgentStack) -> None:
    sent = await _sent(stack, GLOBEX_KEY, _run(persona="concise"))
    assert sent["model"] == "gpt-4o-mini"
    assert _offered(sent) == {"echo"}
    assert _system(sent) == ["Answer in one sentence."]


async def test_the_requests_own_fields_and_system_message_win_over_the_personas(stack: AgentStack) -> None:
    own = _run({"role": "system", "content": "My own prompt."}, {"role": "user", "content": "hello"})
    sent = await _sent(stack, ACME_KEY, {**own, "persona": "concise", "model": "gpt-4o", "tools": []})
    assert sent["model"] == "gpt-4o"
    assert _offered(sent) == set()
    assert _system(sent) == ["My own prompt."]  # exactly one: neither the persona's nor the tenant's is added


async def test_without_a_persona_prompt_the_tenants_default_is_used_and_without_one_none(stack: AgentStack) -> None:
    assert _system(await _sent(stack, ACME_KEY, _run(model="gpt-4o"))) == ["You answer for ACME."]
    assert _system(await _sent(stack, ACME_KEY, _run(persona="limited"))) == ["You answer for ACME."]
    assert _system(await _sent(stack, GLOBEX_KEY, _run(model="gpt-4o"))) == []


async def test_a_tenants_own_persona_shadows_the_global_one_of_its_name(stack: AgentStack) -> None:
    assert _system(await _sent(stack, ACME_KEY, _run(persona="shared"))) == ["ACME's own shared prompt."]
    assert _system(await _sent(stack, GLOBEX_KEY, _run(persona="shared"))) == ["The global shared prompt."]


async def test_an_unknown_persona_is_a_400_listing_the_tenants_personas(stack: AgentStack) -> None:
    asked = len(stack.llm.requests)
    refused = await stack.http.post("/api/v1/agent/run", json=_run(persona="verbose"), headers=as_caller(ACME_KEY))
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "unknown_persona"
    assert "concise, elsewhere, limited, shared" in error["message"]
    assert len(stack.llm.requests) == asked


async def test_a_persona_is_still_held_to_the_tenants_models(stack: AgentStack) -> None:
    refused = await stack.http.post("/api/v1/agent/run", json=_run(persona="elsewhere"), headers=as_caller(ACME_KEY))
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "model_not_allowed"


async def test_a_continued_conversation_is_given_the_prompt_once_on_every_run(stack: AgentStack) -> None:
    conversation = f"conv-{uuid.uuid4().hex}"
    first = await _sent(stack, ACME_KEY, _run(persona="concise", conversationId=conversation))
    assert _system(first) == ["Answer in one sentence."]
    second = await _sent(
        stack, ACME_KEY, _run({"role": "user", "content": "again"}, persona="concise", conversationId=conversation)
    )
    assert _system(second) == ["Answer in one sentence."]
    assert [message["role"] for message in second["messages"]] == ["system", "user", "assistant", "user"]
    stored = await stack.http.get(f"/api/v1/agent/conversations/{conversation}", headers=as_caller(ACME_KEY))
    assert stored.status_code == 200, stored.text
    assert "system" not in {message["role"] for message in stored.json()["messages"]}  # never stored


async def test_the_personas_a_caller_may_use_are_listed(stack: AgentStack) -> None:
    listed = await stack.http.get("/api/v1/agent/personas", headers=as_caller(ACME_KEY))
    assert listed.status_code == 200, listed.text
    personas = listed.json()["personas"]
    assert [persona["name"] for persona in personas] == ["concise", "elsewhere", "limited", "shared"]
    assert personas[0] == {
        "name": "concise",
        "description": "Short answers, with echo",
        "model": "gpt-4o-mini",
        "systemPrompt": "Answer in one sentence.",  # what the console shows for a new conversation of it
    }
    assert personas[3]["description"] == "ACME's own"
    assert personas[3]["systemPrompt"] == "ACME's own shared prompt."
    assert "systemPrompt" not in personas[2]
    assert listed.json()["systemPrompt"] == "You answer for ACME."  # the tenant's: a conversation without a persona's
    globex = await stack.http.get("/api/v1/agent/personas", headers=as_caller(GLOBEX_KEY))
    assert "systemPrompt" not in globex.json()
    unauthenticated = await stack.http.get("/api/v1/agent/personas")
    assert unauthenticated.status_code == 401


async def test_a_conversation_keeps_the_settings_its_newest_run_asked_for_and_its_first_system_prompt(
    stack: AgentStack,
) -> None:
    conversation = f"conv-{uuid.uuid4().hex}"
    first = _run(
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "hello"},
        persona="concise",
        model="gpt-4o",
        tools=["echo"],
        reasoning={"effort": "low", "summary": "auto"},
        verbosity="high",
        maxTokens=321,
        conversationId=conversation,
    )
    await _sent(stack, ACME_KEY, first)
    stored = await stack.http.get(f"/api/v1/agent/conversations/{conversation}", headers=as_caller(ACME_KEY))
    assert stored.status_code == 200, stored.text
    assert stored.json()["settings"] == {
        "model": "gpt-4o",
        "persona": "concise",
        "tools": ["echo"],
        "reasoning": {"effort": "low", "summary": "auto"},
        "verbosity": "high",
        "maxTokens": 321,
        "systemPrompt": "Be terse.",
    }

    # The next run's settings replace them (what it left out is left out: the defaults applied), its system
    # prompt stays the one the conversation started with.
    await _sent(
        stack, ACME_KEY, _run({"role": "user", "content": "again"}, persona="shared", conversationId=conversation)
    )
    stored = await stack.http.get(f"/api/v1/agent/conversations/{conversation}", headers=as_caller(ACME_KEY))
    assert stored.json()["settings"] == {"persona": "shared", "systemPrompt": "Be terse."}
    listed = await stack.http.get("/api/v1/agent/conversations", headers=as_caller(ACME_KEY))
    [entry] = [item for item in listed.json()["conversations"] if item["conversationId"] == conversation]
    assert entry["settings"] == {"persona": "shared", "systemPrompt": "Be terse."}


async def test_the_console_suggestions_need_a_caller_key(stack: AgentStack) -> None:
    served = await stack.http.get("/api/v1/agent/console/suggestions", headers=as_caller(GLOBEX_KEY))
    assert served.status_code == 200, served.text
    assert served.json()["suggestions"]
    unauthenticated = await stack.http.get("/api/v1/agent/console/suggestions")
    assert unauthenticated.status_code == 401


async def test_the_openai_front_takes_a_persona_by_header(stack: AgentStack) -> None:
    stack.llm.push(fake_openai.text("done"))
    asked = len(stack.llm.requests)
    async with openai.AsyncOpenAI(base_url=f"{stack.agent_url}/v1", api_key=GLOBEX_KEY, max_retries=0) as client:
        await client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Agent-Persona": "concise"},
        )
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"X-Agent-Persona": "verbose"},
            )
    [sent] = stack.llm.requests[asked:]
    assert sent["model"] == "gpt-4o"  # the body's model wins
    assert _offered(sent) == {"echo"}
    assert _system(sent) == ["Answer in one sentence."]
    assert refused.value.code == "unknown_persona"
