"""Caller keys and tenants through the real services (AGENT_CALLERS_FILE).

agent-service stores in SQLite; the tools are the echo MCP server's behind a real mcp-client-service; only the
LLM is scripted. Two tenants, ``acme`` (a trusted key from the file's hash, and an untrusted one from an
environment variable) and ``globex``: each sees its own runs and conversations, and another's exactly as
an unknown id.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import structlog
from structlog.testing import capture_logs

from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.stacks import AgentStack, running_stack

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
ACME_ENV_KEY = "acme-env-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex
_KEY_ENV = "TEST_CALLERS_ACME_APP_KEY"


CALLERS_FILE = f"""
[tenants.acme]
[tenants.globex]

{key_entry("acme-platform", "acme", ACME_KEY, trusted=True)}

[[keys]]
name = "acme-app"
tenant = "acme"
key_env = "{_KEY_ENV}"

{key_entry("globex-app", "globex", GLOBEX_KEY)}
"""


@pytest.fixture(scope="module")
def key_in_environment() -> Iterator[None]:
    os.environ[_KEY_ENV] = ACME_ENV_KEY
    try:
        yield
    finally:
        del os.environ[_KEY_ENV]


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory, key_in_environment: None) -> AsyncIterator[AgentStack]:
    folder = tmp_path_factory.mktemp("callers")
    callers = folder / "callers.toml"
    callers.write_text(CALLERS_FILE)
    async with running_stack(database_url=f"sqlite:///{folder}/runs.db", callers_file=callers) as stack:
        yield stack


def _run(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}], "tools": ["echo"], **extra}


async def _finished_run(stack: AgentStack, key: str, **extra: Any) -> dict[str, Any]:
    stack.llm.push(fake_openai.text("done"))
    response = await stack.http.post("/api/v1/agent/run", json=_run("hello", **extra), headers=as_caller(key))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize("headers", [{}, as_caller("not-a-key"), {"Authorization": f"Basic {ACME_KEY}"}])
async def test_the_agent_api_refuses_a_request_without_a_known_key(stack: AgentStack, headers: dict[str, str]) -> None:
    for method, path in [
        ("POST", "/api/v1/agent/run"),
        ("GET", "/api/v1/agent/runs/run_x"),
        ("GET", "/api/v1/agent/conversations"),
        ("GET", "/api/v1/agent/tools"),
    ]:
        response = await stack.http.request(method, path, json=_run("hi"), headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["code"] == "unauthorized"
        assert ACME_KEY not in response.text


async def test_health_metrics_openapi_and_the_console_page_stay_open(stack: AgentStack) -> None:
    for path in ["/healthz", "/metrics", "/openapi.json", "/console"]:
        response = await stack.http.get(path)
        assert response.status_code == 200, path


async def test_a_key_from_the_file_and_a_key_from_the_environment_both_work(stack: AgentStack) -> None:
    for key in (ACME_KEY, ACME_ENV_KEY, GLOBEX_KEY):
        run = await _finished_run(stack, key)
        assert run["message"]["content"] == "done"


async def test_the_openai_front_refuses_a_wrong_key_in_openais_shape(stack: AgentStack) -> None:
    async with openai.AsyncOpenAI(base_url=f"{stack.agent_url}/v1", api_key="wrong", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError) as refused:
            await client.models.list()
        assert refused.value.code == "unauthorized"
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


async def test_the_openai_front_serves_the_right_key(stack: AgentStack) -> None:
    stack.llm.push(fake_openai.text("hello from the front"))
    async with openai.AsyncOpenAI(base_url=f"{stack.agent_url}/v1", api_key=ACME_KEY, max_retries=0) as client:
        completion = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "hello from the front"


async def test_only_a_trusted_key_may_name_the_end_user(stack: AgentStack) -> None:
    trusted = await _finished_run_with_user(stack, ACME_KEY, "user-42")
    assert trusted.status_code == 200, trusted.text
    untrusted = await stack.http.post(
        "/api/v1/agent/run", json=_run("hi"), headers={**as_caller(ACME_ENV_KEY), "X-User-Id": "user-42"}
    )
    assert untrusted.status_code == 403
    assert untrusted.json()["error"]["code"] == "user_not_allowed"
    malformed = await stack.http.post(
        "/api/v1/agent/run", json=_run("hi"), headers={**as_caller(ACME_KEY), "X-User-Id": "two words"}
    )
    assert malformed.status_code == 400


async def _finished_run_with_user(stack: AgentStack, key: str, user: str) -> httpx.Response:
    stack.llm.push(fake_openai.text("done"))
    return await stack.http.post("/api/v1/agent/run", json=_run("hi"), headers={**as_caller(key), "X-User-Id": user})


async def test_the_lines_a_run_logs_name_its_caller_tenant_and_user_never_the_key(stack: AgentStack) -> None:
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        response = await _finished_run_with_user(stack, ACME_KEY, "user-7")
    assert response.status_code == 200, response.text
    [finished] = [line for line in logs if line["event"] == "run_finished"]
    assert (finished["caller"], finished["tenant"], finished["user"]) == ("acme-platform", "acme", "user-7")
    assert ACME_KEY not in str(logs)


def _without_id(response: httpx.Response, unknown: str, known: str) -> tuple[int, str]:
    """The answer with the id it names replaced: an unknown id's and another tenant's must then be equal."""
    return response.status_code, response.text.replace(unknown, "ID").replace(known, "ID")


async def test_another_tenants_run_is_answered_exactly_as_an_unknown_one(stack: AgentStack) -> None:
    run_id = (await _finished_run(stack, ACME_KEY))["runId"]
    unknown = "run_" + uuid.uuid4().hex
    assert (await stack.http.get(f"/api/v1/agent/runs/{run_id}", headers=as_caller(ACME_ENV_KEY))).status_code == 200
    for method, path in [
        ("GET", "/api/v1/agent/runs/{}"),
        ("GET", "/api/v1/agent/runs/{}/events"),
        ("POST", "/api/v1/agent/runs/{}/cancel"),
    ]:
        theirs = await stack.http.request(method, path.format(run_id), headers=as_caller(GLOBEX_KEY))
        nobodys = await stack.http.request(method, path.format(unknown), headers=as_caller(GLOBEX_KEY))
        assert theirs.status_code == 404, (path, theirs.text)
        assert _without_id(theirs, run_id, unknown) == _without_id(nobodys, unknown, run_id)


async def test_conversations_belong_to_their_tenant(stack: AgentStack) -> None:
    conversation = "conv_" + uuid.uuid4().hex
    await _finished_run(stack, ACME_KEY, conversationId=conversation)
    await _finished_run(stack, ACME_ENV_KEY, conversationId=conversation)  # same tenant, another key: continues

    mine = await stack.http.get(f"/api/v1/agent/conversations/{conversation}", headers=as_caller(ACME_KEY))
    assert mine.status_code == 200
    assert len(mine.json()["runs"]) == 2
    unknown = "conv_" + uuid.uuid4().hex
    theirs = await stack.http.get(f"/api/v1/agent/conversations/{conversation}", headers=as_caller(GLOBEX_KEY))
    nobodys = await stack.http.get(f"/api/v1/agent/conversations/{unknown}", headers=as_caller(GLOBEX_KEY))
    assert theirs.status_code == 404
    assert _without_id(theirs, conversation, unknown) == _without_id(nobodys, unknown, conversation)

    listed = await stack.http.get("/api/v1/agent/conversations", headers=as_caller(GLOBEX_KEY))
    assert conversation not in {c["conversationId"] for c in listed.json()["conversations"]}
    listed = await stack.http.get("/api/v1/agent/conversations", headers=as_caller(ACME_ENV_KEY))
    assert conversation in {c["conversationId"] for c in listed.json()["conversations"]}


async def test_a_conversation_id_another_tenant_uses_is_a_new_conversation_of_ones_own(stack: AgentStack) -> None:
    """Conversations are keyed by (tenant, id): globex naming acme's id gets exactly what an unused id gets (a new
    conversation of its own), learns nothing of acme's, and acme's is left as it was."""
    conversation, unused = "conv_" + uuid.uuid4().hex, "conv_" + uuid.uuid4().hex
    await _finished_run(stack, ACME_KEY, conversationId=conversation)

    answers = []
    for conversation_id in (conversation, unused):
        sent = len(stack.llm.requests)
        answer = await _finished_run(stack, GLOBEX_KEY, conversationId=conversation_id)
        answers.append((answer["messages"], [m["content"] for m in stack.llm.requests[sent]["messages"]]))
    assert answers[0] == answers[1]
    assert answers[0][1] == ["hello"], "nothing of acme's conversation reached the model"

    theirs = await stack.http.get(f"/api/v1/agent/conversations/{conversation}", headers=as_caller(GLOBEX_KEY))
    assert [m["content"] for m in theirs.json()["messages"]] == ["hello", "done"]
    mine = await stack.http.get(f"/api/v1/agent/conversations/{conversation}", headers=as_caller(ACME_KEY))
    assert [m["content"] for m in mine.json()["messages"]] == ["hello", "done"]
    assert len(mine.json()["runs"]) == 1, "nothing of globex's was added to acme's"
    assert {run["runId"] for run in mine.json()["runs"]}.isdisjoint(run["runId"] for run in theirs.json()["runs"])


def test_a_callers_file_that_cannot_be_used_ends_the_start_with_one_line(tmp_path: Path) -> None:
    callers = tmp_path / "callers.toml"
    callers.write_text('[tenants.acme]\n[[keys]]\nname = "k"\ntenant = "nobody"\nkey_env = "X"\n')
    env = {name: value for name, value in os.environ.items() if not name.startswith("AGENT_")}
    env.update(AGENT_PORT="0", AGENT_MCP_SERVICE_SECRET="s3cret", AGENT_CALLERS_FILE=str(callers), HOME=str(tmp_path))
    finished = subprocess.run(
        [sys.executable, "-m", "agent_service"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 1
    assert finished.stderr.splitlines() == [
        f"agent-service: AGENT_CALLERS_FILE: {callers}: key 'k': tenant 'nobody' is not one of [tenants.*]"
    ]
