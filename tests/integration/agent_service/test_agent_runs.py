"""Whole agent runs through the three real services on loopback.

The tool servers are real MCP servers: search_documents over stdio (a spawned process),
web_search over streamable HTTP. Only what lies outside is scripted: the LLM (a server that
speaks OpenAI's Chat Completions wire format) and the search engine (SearXNG's JSON API).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic import SecretStr

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import DEFAULT_OPENAI_BASE_URL, CompletionSettings
from mcp_client_service.app import create_app as create_mcp_client_app
from mcp_client_service.settings import MCPClientSettings
from mcp_web_search.server import build_server as build_web_search_server
from mcp_web_search.settings import WebSearchSettings
from suite_common.echo import MAX_ECHO_CHARS, MAX_ECHO_ITEMS
from suite_common.wire import MAX_MODEL_NAME_CHARS
from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.fake_openai import ScriptedOpenAI
from support.fake_searxng import ScriptedSearxng
from support.servers import serve_app

pytestmark = pytest.mark.anyio

SECRET = "integration-secret"

ALL_TOOLS = {"search_documents", "list_sources", "add_documents", "web_search", "fetch_url"}

DOCS = {
    "deadlines.md": "# Deadlines\n\nEvery run has a wall-clock deadline of 120 seconds. When it passes, "
    "the run stops with finishReason deadline and every in-flight call is cancelled.\n",
    "gardening.md": "# Tomatoes\n\nTomatoes need six hours of sun and deep watering twice a week.\n",
}


@dataclass
class Stack:
    agent_url: str
    completion_url: str
    mcp_url: str
    llm: ScriptedOpenAI
    llm_url: str
    searxng: ScriptedSearxng


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("stack")
    docs = root / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    llm, searxng = ScriptedOpenAI(), ScriptedSearxng()
    async with (
        serve_app(llm.app) as llm_url,
        serve_app(searxng.app) as searxng_url,
        serve_app(
            build_web_search_server(
                WebSearchSettings(searxng_url=searxng_url, backends=["searxng"])
            ).streamable_http_app(streamable_http_path="/mcp")
        ) as web_search_url,
    ):
        config = root / "mcp_servers.json"
        config.write_text(
            json.dumps(
                {
                    "mcpServers": {
                        "rag": {
                            "command": sys.executable,
                            "args": ["-m", "mcp_rag_tool", "--transport", "stdio"],
                            "env": {"RAG_DOCS_PATHS": json.dumps([str(docs)]), "HOME": os.environ.get("HOME", "/")},
                        },
                        "web": {"url": f"{web_search_url}/mcp"},
                    }
                }
            )
        )
        mcp_settings = MCPClientSettings(
            servers_file=config, service_secret=SecretStr(SECRET), ssrf_allow_loopback=True
        )
        completion_settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), max_retries=0
        )
        mcp_app = create_mcp_client_app(mcp_settings)
        async with (
            serve_app(mcp_app) as mcp_url,
            serve_app(create_completion_app(completion_settings)) as completion_url,
        ):
            agent_settings = AgentSettings(
                completion_url=completion_url,
                mcp_client_url=mcp_url,
                mcp_service_secret=SecretStr(SECRET),
                catalog_cache_seconds=0,
            )
            async with serve_app(create_agent_app(agent_settings)) as agent_url:
                with anyio.fail_after(120):
                    await mcp_app.state.registry.wait_until(lambda registry: registry.all_ready())
                yield Stack(agent_url, completion_url, mcp_url, llm, llm_url, searxng)


@pytest.fixture
def fresh(stack: Stack) -> Stack:
    stack.llm.requests.clear()
    stack.searxng.recover()
    return stack


def run_body(question: str, **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": question}], **fields}


async def stream_run(stack: Stack, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The run's SSE events as (event name, JSON body), checking ids count up from 1."""
    events: list[tuple[str, dict[str, Any]]] = []
    ids: list[int] = []
    name = ""
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("POST", f"{stack.agent_url}/api/v1/agent/run", json=body) as response,
    ):
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                ids.append(int(line.removeprefix("id: ")))
            elif line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
    assert ids == list(range(1, len(events) + 1))
    return events


def of(events: list[tuple[str, dict[str, Any]]], kind: str) -> list[dict[str, Any]]:
    return [data for name, data in events if name == kind]


async def test_a_run_calls_two_tools_in_parallel_then_answers(fresh: Stack) -> None:
    fresh.llm.push(
        fake_openai.tool_calls(
            ("call_docs", "search_documents", {"queries": ["what happens when the deadline passes"]}),
            ("call_web", "web_search", {"query": "agent loop deadline"}),
        ),
        fake_openai.text("The run stops with finishReason deadline."),
    )
    with anyio.fail_after(60):
        events = await stream_run(fresh, run_body("What happens at the deadline?"))
    assert events[0][0] == "run_started"
    assert set(of(events, "run_started")[0]["tools"]) == ALL_TOOLS
    assert [call["name"] for call in of(events, "tool_call")] == ["search_documents", "web_search"]
    results = {result["toolCallId"]: result for result in of(events, "tool_result")}
    assert not results["call_docs"]["isError"]
    assert "deadlines.md" in results["call_docs"]["content"]
    assert not results["call_web"]["isError"]
    assert fresh.searxng.requests[-1]["q"] == "agent loop deadline"
    assert "".join(t["delta"] for t in of(events, "text")) == "The run stops with finishReason deadline."
    done = events[-1]
    assert done[0] == "done"
    assert (done[1]["finishReason"], done[1]["iterations"]) == ("stop", 2)
    assert done[1]["usage"]["inputTokens"] > 0
    # The second LLM call saw both results, in the order the model asked for them.
    second = fresh.llm.requests[1]
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_docs", "call_web"]
    assert "Deadlines" in tool_messages[0]["content"]
    assert {t["function"]["name"] for t in second["tools"]} == ALL_TOOLS


async def test_a_run_that_keeps_calling_tools_stops_at_the_iteration_cap(fresh: Stack) -> None:
    for i in range(3):
        fresh.llm.push(fake_openai.tool_calls((f"call_{i}", "web_search", {"query": f"round {i}"})))
    with anyio.fail_after(60):
        events = await stream_run(fresh, run_body("loop forever", maxIterations=3, tools=["web_search"]))
    done = of(events, "done")[0]
    assert (done["finishReason"], done["iterations"]) == ("max_iterations", 3)
    assert len(fresh.llm.requests) == 3
    assert len(of(events, "tool_result")) == 3


async def test_a_failing_tool_is_reported_to_the_model_which_recovers(fresh: Stack) -> None:
    fresh.searxng.fail_with(500)
    fresh.llm.push(
        fake_openai.tool_calls(("call_web", "web_search", {"query": "anything"})),
        fake_openai.text("The search failed, so I answer from memory."),
    )
    with anyio.fail_after(60):
        events = await stream_run(fresh, run_body("search the web", tools=["web_search"]))
    [result] = of(events, "tool_result")
    assert result["isError"] is True
    assert "failed with HTTP 500" in result["content"]
    fed_back = [m for m in fresh.llm.requests[1]["messages"] if m["role"] == "tool"]
    assert fed_back[0]["content"] == result["content"]
    done = of(events, "done")[0]
    assert (done["finishReason"], done["iterations"]) == ("stop", 2)


async def test_a_run_past_its_deadline_ends_with_finish_reason_deadline(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.hang())
    with anyio.fail_after(15):
        events = await stream_run(fresh, run_body("take your time", deadlineSeconds=1))
    done = events[-1]
    assert done[0] == "done"
    assert done[1]["finishReason"] == "deadline"


async def test_a_non_streamed_run_answers_with_one_json_object(fresh: Stack) -> None:
    fresh.llm.push(
        fake_openai.tool_calls(("call_docs", "search_documents", {"queries": ["tomatoes"]})),
        fake_openai.text("Six hours of sun."),
    )
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{fresh.agent_url}/api/v1/agent/run", json=run_body("tomatoes?", stream=False, tools=["search_documents"])
        )
    assert response.status_code == 200
    result = response.json()
    assert result["finishReason"] == "stop"
    assert result["message"] == {"role": "assistant", "content": "Six hours of sun."}
    assert [m["role"] for m in result["messages"]] == ["assistant", "tool", "assistant"]
    assert "gardening.md" in result["messages"][1]["content"]
    assert fresh.llm.requests[0]["stream"] is False


async def test_an_unknown_tool_name_is_a_400_that_lists_the_available_tools(fresh: Stack) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{fresh.agent_url}/api/v1/agent/run", json=run_body("hi", tools=["nope"]))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unknown_tools"
    assert "search_documents" in error["message"]
    assert "web_search" in error["message"]


async def test_the_plain_path_sends_no_tools_to_the_model(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.text("Hello."))
    events = await stream_run(fresh, run_body("hi", tools=[]))
    assert "tools" not in fresh.llm.requests[0]
    assert of(events, "done")[0]["iterations"] == 1


async def test_a_wrong_shared_secret_is_refused(fresh: Stack) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        direct = await http.get(
            f"{fresh.mcp_url}/mcp/v1/tools/list-tools", headers={"X-MCP-Service-Secret": "guess-1234"}
        )
        assert direct.status_code == 401
        assert direct.json()["error"]["code"] == "unauthorized"
        assert "guess-1234" not in direct.text
        # An agent-service configured with the wrong secret says so instead of running blind.
        settings = AgentSettings(
            completion_url=fresh.completion_url, mcp_client_url=fresh.mcp_url, mcp_service_secret=SecretStr("wrong")
        )
        async with serve_app(create_agent_app(settings)) as misconfigured:
            response = await http.post(f"{misconfigured}/api/v1/agent/run", json=run_body("hi"))
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "tools_unauthorized"


async def test_a_client_that_disconnects_cancels_the_run_and_its_llm_call(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.hang())
    with anyio.fail_after(15):
        async with (
            httpx.AsyncClient(timeout=30) as http,
            http.stream("POST", f"{fresh.agent_url}/api/v1/agent/run", json=run_body("wait")) as response,
        ):
            assert response.status_code == 200
            # Leave, without reading the rest, once the LLM call is in flight.
            await fresh.llm.wait_for_request(1)
        # Leaving the stream closed the connection: the run's call to the LLM must end too.
        await fresh.llm.wait_for_hangup()


async def test_an_unknown_model_is_a_400_before_the_stream_starts(fresh: Stack) -> None:
    # With OpenAI configured every name routes there, so ask a completion-service that has only `demo`.
    demo_only = create_completion_app(
        CompletionSettings(openai_api_key=None, openai_base_url=DEFAULT_OPENAI_BASE_URL, demo_enabled=True)
    )
    async with serve_app(demo_only) as completion_url:
        settings = AgentSettings(
            completion_url=completion_url, mcp_client_url=fresh.mcp_url, mcp_service_secret=SecretStr(SECRET)
        )
        async with serve_app(create_agent_app(settings)) as agent_url, httpx.AsyncClient(timeout=30) as http:
            response = await http.post(f"{agent_url}/api/v1/agent/run", json=run_body("hi", model="gpt-4o"))
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == "model_not_found"
    assert "'gpt-4o'" in error["message"]
    assert "demo" in error["message"]


async def test_an_unknown_model_names_only_the_tenants_models_and_no_operator_setting(
    fresh: Stack, tmp_path: Path
) -> None:
    # A catalog entry the tenant may not run, and no OpenAI key: completion-service's own refusal names both.
    catalog = [{"name": "internal-finetune", "provider": "openai", "model": "ft:gpt-4o:acme", "apiKey": "sk-internal"}]
    completion = create_completion_app(
        CompletionSettings(
            openai_api_key=None, openai_base_url=DEFAULT_OPENAI_BASE_URL, demo_enabled=True, models=json.dumps(catalog)
        )
    )
    callers = tmp_path / "callers.toml"
    callers.write_text(f'[tenants.acme]\nmodels = ["demo*"]\n\n{key_entry("acme-app", "acme", "acme-key-1")}\n')
    async with serve_app(completion) as completion_url:
        settings = AgentSettings(
            completion_url=completion_url,
            mcp_client_url=fresh.mcp_url,
            mcp_service_secret=SecretStr(SECRET),
            callers_file=callers,
        )
        async with serve_app(create_agent_app(settings)) as agent_url, httpx.AsyncClient(timeout=30) as http:
            body = run_body("hi", model="demo-large")
            response = await http.post(f"{agent_url}/api/v1/agent/run", json=body, headers=as_caller("acme-key-1"))
            openai_front = await http.post(
                f"{agent_url}/v1/chat/completions",
                json={"model": "demo-large", "messages": [{"role": "user", "content": "hi"}]},
                headers=as_caller("acme-key-1"),
            )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "model_not_found",
        "message": "Unknown model 'demo-large'. Models this caller may run: demo.",
    }
    assert openai_front.status_code == 404
    assert openai_front.json()["error"]["message"] == "Unknown model 'demo-large'. Models this caller may run: demo."


@pytest.mark.parametrize("stream", [True, False])
async def test_a_model_name_over_the_limit_is_a_400_naming_the_limit(fresh: Stack, stream: bool) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{fresh.agent_url}/api/v1/agent/run", json=run_body("hi", model="m" * 70_000, stream=stream)
        )
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "code": "invalid_request",
            "message": f"model: String should have at most {MAX_MODEL_NAME_CHARS} characters",
        }
    }
    assert not fresh.llm.requests


async def test_a_model_name_with_a_control_character_is_a_400(fresh: Stack) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{fresh.agent_url}/api/v1/agent/run", json=run_body("hi", model="gpt-4o\nx"))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert "control characters" in response.json()["error"]["message"]


@pytest.mark.parametrize("client", ["aiohttp", "httpx"])
async def test_a_model_named_with_odd_characters_is_checked_under_its_own_name(fresh: Stack, client: str) -> None:
    # Dots, slashes, ? # % and spaces: a URL would reread them (`a/../b` is `b` to an HTTP client or a proxy).
    odd = "team a/../b?c#d %41/."
    entry = {"name": odd, "provider": "openai", "model": "m", "apiKey": "test-key", "baseUrl": f"{fresh.llm_url}/v1"}
    only_the_catalog = create_completion_app(
        CompletionSettings(openai_api_key=None, openai_base_url=DEFAULT_OPENAI_BASE_URL, models=json.dumps([entry]))
    )
    fresh.llm.push(fake_openai.text("Answered."))
    async with (
        serve_app(only_the_catalog) as completion_url,
        httpx.AsyncClient(timeout=30) as http,
        httpx.AsyncClient(timeout=30) as agent_http,
    ):
        settings = AgentSettings(
            completion_url=completion_url, mcp_client_url=fresh.mcp_url, mcp_service_secret=SecretStr(SECRET)
        )
        app = create_agent_app(settings, http_client=agent_http if client == "httpx" else None)
        async with serve_app(app) as agent_url:
            response = await http.post(
                f"{agent_url}/api/v1/agent/run", json=run_body("hi", model=odd, stream=False, tools=[])
            )
    assert response.status_code == 200, response.text
    assert response.json()["message"]["content"] == "Answered."
    assert fresh.llm.requests[0]["model"] == "m"


async def test_ten_thousand_unknown_tool_names_are_echoed_as_the_first_few_and_a_count(fresh: Stack) -> None:
    unknown = [f"no_such_tool_{number}" for number in range(10_000)]
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{fresh.agent_url}/api/v1/agent/run", json=run_body("hi", tools=["web_search", *unknown])
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "unknown_tools"
    shown = ", ".join(unknown[:MAX_ECHO_ITEMS])
    assert error["message"].startswith(f"Unknown tools: {shown} and 9,990 more. Available tools: ")
    assert len(error["message"]) < 1_000


async def test_a_long_tool_choice_name_is_echoed_clipped(fresh: Stack) -> None:
    name = "t" * 10_000
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{fresh.agent_url}/api/v1/agent/run", json=run_body("hi", tools=["web_search"], toolChoice={"name": name})
        )
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message == f"toolChoice names '{name[: MAX_ECHO_CHARS - 1]}…', which is not among the run's tools."


async def test_a_non_streamed_run_that_fails_midway_keeps_what_it_did(fresh: Stack) -> None:
    fresh.llm.push(
        fake_openai.tool_calls(("call_docs", "search_documents", {"queries": ["tomatoes"]})),
        fake_openai.error(500),
    )
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{fresh.agent_url}/api/v1/agent/run", json=run_body("tomatoes?", stream=False, tools=["search_documents"])
        )
    assert response.status_code == 503
    body = response.json()
    assert body["error"]["code"] == "upstream_unavailable"
    assert body["finishReason"] == "error"
    # The tool ran before the LLM failed: the caller still gets that part of the run.
    assert [m["role"] for m in body["messages"]] == ["assistant", "tool"]
    assert "gardening.md" in body["messages"][1]["content"]
    assert body["iterations"] == 2
    assert "message" not in body  # there is no final answer to report
    assert not _nulls(body)


async def test_a_non_streamed_run_whose_first_llm_call_fails_answers_the_error_without_nulls(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.error(500))
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{fresh.agent_url}/api/v1/agent/run", json=run_body("hi", stream=False, tools=[]))
    assert response.status_code == 503
    body = response.json()
    assert (body["error"]["code"], body["finishReason"], body["messages"], body["iterations"]) == (
        "upstream_unavailable",
        "error",
        [],
        1,
    )
    assert set(body) == {"error", "runId", "messages", "finishReason", "iterations", "usage"}
    assert not _nulls(body)


def _nulls(value: Any, path: str = "$") -> list[str]:
    """The paths of every JSON null in ``value``."""
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _nulls(item, f"{path}.{key}")]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _nulls(item, f"{path}[{index}]")]
    return []
