"""A tool server's question reaches a person and their answer reaches the server, through the real services: an MCP
server over stdio that asks (``elicitation/create``), the real gateway, agent-service processes on one SQLite store,
the scripted OpenAI behind a real completion-service.

The replica that relayed the question is killed while the run waits: the run waits in the store and the call waits in
the gateway, so a restarted replica takes the answer, hands it to the gateway and follows the call to its result.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from integration.agent_service.test_run_takeover import TAKEOVER_SECONDS, EventStream, Replica, ended, kinds
from pydantic import SecretStr

from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.caller_keys import as_caller, key_entry
from support.fake_openai import ScriptedOpenAI, text, tool_calls
from support.mcp_gateway import Gateway, echo_stdio_server, running_gateway
from support.processes import agent_env, spawned
from support.run_streams import events_of, streamed_run
from support.servers import free_port, serve_app
from support.stacks import running_agent, wait_for_run

pytestmark = pytest.mark.anyio

ASKING_SCRIPT = Path(__file__).parents[2] / "support" / "asking_mcp_server.py"
KEY = "sk-acme-questions-0123456789"
CALLERS = "[tenants.acme]\n\n" + key_entry("acme-app", "acme", KEY, trusted=True)


@dataclass
class Stack:
    llm: ScriptedOpenAI
    gateway: Gateway
    completion_url: str


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    llm = ScriptedOpenAI()
    servers = {
        "asking": {"command": sys.executable, "args": [str(ASKING_SCRIPT), "--transport", "stdio"]},
        "echo": echo_stdio_server("echo"),  # its gates hold a call of the round until the test opens them
    }
    async with AsyncExitStack() as running:
        llm_url = await running.enter_async_context(serve_app(llm.app))
        settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), max_retries=0
        )
        completion_url = await running.enter_async_context(serve_app(create_completion_app(settings)))
        gateway = await running.enter_async_context(running_gateway(servers))
        await gateway.wait_until_ready("asking", "echo")
        yield Stack(llm, gateway, completion_url)


@asynccontextmanager
async def _replica(stack: Stack, folder: Path, name: str) -> AsyncIterator[Replica]:
    port = free_port()
    callers_file = folder / "callers.toml"
    callers_file.write_text(CALLERS)
    env = agent_env(
        port,
        stack.completion_url,
        stack.gateway,
        database_url=f"sqlite:///{folder}/runs.db",
        lease_seconds=1.0,
        callers_file=callers_file,
    )
    async with (
        spawned("agent_service", env, port, folder / f"{name}.log") as process,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30, headers=as_caller(KEY, "ada")) as http,
    ):
        yield Replica(process, http)


async def _asked(replica: Replica) -> tuple[str, dict[str, Any]]:
    """A streamed run whose tool asks; the client leaves once asked. The run's id and its ``input_required``."""
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Greet me."}], "tools": ["greet"]}
    async with replica.http.stream("POST", "/api/v1/agent/run", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        seen = await EventStream(response).read(until=lambda events: events[-1][1] == "input_required")
    assert kinds(seen) == ["run_started", "tool_call", "input_required"]
    return seen[0][2]["runId"], seen[-1][2]


async def test_an_answer_given_to_a_restarted_replica_reaches_the_asking_server_with_the_schemas_defaults(
    stack: Stack, tmp_path: Path
) -> None:
    stack.llm.push(tool_calls(("call_greet", "greet", {})), text("Greeted."))

    async with _replica(stack, tmp_path, "first") as first:
        run_id, asked = await _asked(first)
        await first.kill()
    assert (asked["name"], asked["server"]) == ("greet", "asking")
    assert asked["requestedSchema"]["properties"]["greeting"]["default"] == "hello"

    async with _replica(stack, tmp_path, "restarted") as restarted:
        answer = {"inputs": [{"inputId": asked["inputId"], "action": "accept", "content": {"name": "Ada"}}]}
        answered = await restarted.http.post(f"/api/v1/agent/runs/{run_id}/inputs", json=answer)
        assert answered.status_code == 200, answered.text
        run = await wait_for_run(restarted.http, run_id, ended, within=TAKEOVER_SECONDS)

    assert run["status"] == "completed", run
    [result] = [message for message in run["messages"] if message["role"] == "tool"]
    assert json.loads(result["content"]) == {"action": "accept", "name": "Ada", "greeting": "hello", "times": 1}
    assert run["messages"][-1]["content"] == "Greeted."
    [question] = run["inputs"]
    assert (question["status"], question["decidedBy"]) == ("accepted", "acme-app/ada")


async def test_a_declined_question_reaches_the_server_as_declined(stack: Stack, tmp_path: Path) -> None:
    stack.llm.push(tool_calls(("call_greet", "greet", {})), text("Not greeted."))

    async with _replica(stack, tmp_path, "only") as replica:
        run_id, asked = await _asked(replica)
        answer = {"inputs": [{"inputId": asked["inputId"], "action": "decline"}]}
        answered = await replica.http.post(f"/api/v1/agent/runs/{run_id}/inputs", json=answer)
        assert answered.status_code == 200, answered.text
        run = await wait_for_run(replica.http, run_id, ended, within=TAKEOVER_SECONDS)

    [result] = [message for message in run["messages"] if message["role"] == "tool"]
    assert json.loads(result["content"]) == {"action": "decline"}


async def test_a_run_nobody_can_wait_for_declines_the_question_with_its_tenant_and_the_server_gets_the_decline(
    stack: Stack, tmp_path: Path
) -> None:
    # Not stored: the call goes without a callId, and the run declines the question itself. Its decline carries the
    # run's tenant (X-Tenant-Id): the gateway must know the question as that tenant's, or the decline is a 404 and
    # the call waits for the gateway's own limit (an hour) instead of going on now.
    stack.llm.push(tool_calls(("call_greet", "greet", {})), text("Not greeted."))
    callers_file = tmp_path / "callers.toml"
    callers_file.write_text(CALLERS)
    async with (
        running_agent(stack.completion_url, stack.gateway, database_url="", callers_file=callers_file) as url,
        httpx.AsyncClient(base_url=url, timeout=30, headers=as_caller(KEY, "ada")) as http,
    ):
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Greet me."}], "tools": ["greet"]}
        events = await streamed_run(http, "/api/v1/agent/run", body, seconds=TAKEOVER_SECONDS)

    assert events_of(events, "input_required") == []
    [result] = events_of(events, "tool_result")
    assert json.loads(result["content"]) == {"action": "decline"}
    assert events[-1][0] == "done", events


async def test_a_question_answered_while_the_rounds_other_calls_still_run_is_taken_and_the_run_goes_on_at_once(
    stack: Stack, tmp_path: Path
) -> None:
    # The question is told once stored: here with gate_a's result, while gate_b still runs. The answer is taken then
    # (not 409 because the run does not wait yet); when gate_b ends, the run parks with nothing pending and goes on
    # at once. Once the server has the answer, its content is no longer kept in the store.
    stack.llm.push(
        tool_calls(("call_greet", "greet", {}), ("call_a", "gate", {"tag": "a"}), ("call_b", "gate", {"tag": "b"})),
        text("Greeted."),
    )
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Greet me."}], "tools": ["greet", "gate"]}

    async def open_gate(tag: str) -> None:
        opened = await stack.gateway.http.post(
            "/mcp/v1/tools/call-tool", json={"name": "open_gate", "arguments": {"tag": tag}}
        )
        assert opened.status_code == 200, opened.text

    async with _replica(stack, tmp_path, "only") as replica:
        async with replica.http.stream("POST", "/api/v1/agent/run", json={**body, "stream": True}) as response:
            stream = EventStream(response)
            [(_, _, started)] = await stream.read(until=lambda events: events[-1][1] == "run_started")
            run_id = started["runId"]
            await wait_for_run(replica.http, run_id, lambda run: bool(run.get("inputs")), within=TAKEOVER_SECONDS)
            await open_gate("a")
            seen = await stream.read(until=lambda events: events[-1][1] == "input_required")
            asked = seen[-1][2]
            answer = {"inputs": [{"inputId": asked["inputId"], "action": "accept", "content": {"name": "Ada"}}]}
            answered = await replica.http.post(f"/api/v1/agent/runs/{run_id}/inputs", json=answer)
            await open_gate("b")
        run = await wait_for_run(replica.http, run_id, ended, within=TAKEOVER_SECONDS)

    assert answered.status_code == 200, answered.text
    assert answered.json()["status"] == "tool_loop"  # not parked yet
    assert run["status"] == "completed", run
    results = {message["toolCallId"]: message["content"] for message in run["messages"] if message["role"] == "tool"}
    assert json.loads(results["call_greet"]) == {"action": "accept", "name": "Ada", "greeting": "hello", "times": 1}
    assert (results["call_a"], results["call_b"]) == ("a passed", "b passed")
    [question] = run["inputs"]
    assert (question["status"], question["decidedBy"]) == ("accepted", "acme-app/ada")
    with sqlite3.connect(tmp_path / "runs.db") as database:
        assert database.execute("SELECT status, answer FROM inputs").fetchall() == [("accepted", None)]
