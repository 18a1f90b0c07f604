"""What the web console reads from agent-service, through the real services: the tools, the conversations, its files.

agent-service stores runs in SQLite and in PostgreSQL (each test runs on both); the tools are two echo MCP servers'
over streamable HTTP behind a real mcp-client-service; only the LLM is scripted (OpenAI's wire format).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from agent_service.api.console import CONSOLE_HEADERS
from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentSettings
from support import fake_openai
from support.mcp_gateway import GATEWAY_SECRET
from support.servers import free_port, serve_app
from support.stacks import AgentStack, running_stack

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
async def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentStack]:
    if request.param == "sqlite":
        database_url = f"sqlite:///{tmp_path_factory.mktemp('runs')}/runs.db"
    else:
        database_url = request.getfixturevalue("postgres_url")
    # "zeta": named after "tools" but with tools named before its: the list is sorted by server first.
    servers = {"zeta": {"allowedTools": ["a_echo"]}}
    async with running_stack(echo={"tools": "", "zeta": "a_"}, servers=servers, database_url=database_url) as stack:
        yield stack


@pytest.fixture(scope="module")
async def bare_agent() -> AsyncIterator[httpx.AsyncClient]:
    """agent-service storing no runs, in front of a gateway and a completion-service that are not there."""
    settings = AgentSettings(
        completion_url=f"http://127.0.0.1:{free_port()}",
        mcp_client_url=f"http://127.0.0.1:{free_port()}",
        mcp_service_secret=SecretStr(GATEWAY_SECRET),
        catalog_cache_seconds=0,
        database_url="",
    )
    async with serve_app(create_agent_app(settings)) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        yield http


async def _run(stack: AgentStack, conversation_id: str, content: str, answer: str) -> str:
    stack.llm.push(fake_openai.text(answer))
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": content}],
        "tools": [],
        "conversationId": conversation_id,
    }
    response = await stack.http.post("/api/v1/agent/run", json=body)
    assert response.status_code == 200, response.text
    run_id: str = response.json()["runId"]
    return run_id


async def test_the_tools_are_listed_by_server_then_name_without_schemas(stack: AgentStack) -> None:
    response = await stack.http.get("/api/v1/agent/tools")

    assert response.status_code == 200, response.text
    tools: list[dict[str, Any]] = response.json()["tools"]
    keys = [(tool["server"], tool["name"]) for tool in tools]
    assert keys == sorted(keys)
    assert {"echo", "gate"} <= {name for server, name in keys if server == "tools"}
    assert [name for server, name in keys if server == "zeta"] == ["a_echo"]
    assert keys[-1] == ("zeta", "a_echo")  # after every tool of "tools", though its name sorts first
    echo = next(tool for tool in tools if tool["name"] == "echo")
    assert echo["description"]
    assert "inputSchema" not in echo
    assert "unavailable" not in echo
    assert GATEWAY_SECRET not in response.text


async def test_the_tools_of_a_gateway_that_is_down_are_its_error(bare_agent: httpx.AsyncClient) -> None:
    response = await bare_agent.get("/api/v1/agent/tools")

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "upstream_unavailable"


async def test_conversations_are_listed_newest_first_with_title_run_count_and_status(stack: AgentStack) -> None:
    long_question = "Where\nis the   " + "very " * 30 + "long road?"
    older, newer = f"conv-older-{free_port()}", f"conv-newer-{free_port()}"
    await _run(stack, older, long_question, "Far away.")
    await _run(stack, newer, "Hello there", "Hi.")
    await _run(stack, older, "And back?", "Also far.")  # the older one is now the one updated last

    response = await stack.http.get("/api/v1/agent/conversations", params={"limit": 2})

    assert response.status_code == 200, response.text
    listed = response.json()["conversations"]
    assert [c["conversationId"] for c in listed] == [older, newer]
    title = listed[0]["title"]
    assert len(title) == 80
    assert title.startswith("Where is the very very ")
    assert title.endswith("…")
    assert [(c["runs"], c["status"]) for c in listed] == [(2, "completed"), (1, "completed")]
    assert listed[1]["title"] == "Hello there"
    assert listed[0]["updatedAt"] >= listed[1]["updatedAt"]
    assert listed[0]["createdAt"] <= listed[0]["updatedAt"]
    everything = (await stack.http.get("/api/v1/agent/conversations")).json()["conversations"]
    assert [c["conversationId"] for c in everything[:2]] == [older, newer]


@pytest.mark.parametrize("limit", ["0", "201", "-1", "ten", "1.5", ""])
async def test_a_conversations_limit_out_of_range_is_refused(stack: AgentStack, limit: str) -> None:
    response = await stack.http.get("/api/v1/agent/conversations", params={"limit": limit})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


async def test_conversations_are_not_listed_where_runs_are_not_stored(bare_agent: httpx.AsyncClient) -> None:
    response = await bare_agent.get("/api/v1/agent/conversations")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "runs_not_stored"


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/console", "text/html; charset=utf-8"),
        ("/console/", "text/html; charset=utf-8"),
        ("/console/index.html", "text/html; charset=utf-8"),
        ("/console/console.js", "text/javascript; charset=utf-8"),
        ("/console/console.css", "text/css; charset=utf-8"),
    ],
)
async def test_the_console_files_are_served_with_their_type_and_security_headers(
    bare_agent: httpx.AsyncClient, path: str, content_type: str
) -> None:
    response = await bare_agent.get(path)

    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    policy = response.headers["content-security-policy"]
    assert policy == CONSOLE_HEADERS["Content-Security-Policy"]
    assert {"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} <= {
        part.strip() for part in policy.split(";")
    }


async def test_the_console_page_is_the_same_at_each_of_its_addresses(bare_agent: httpx.AsyncClient) -> None:
    pages = {(await bare_agent.get(path)).content for path in ("/console", "/console/", "/console/index.html")}
    assert len(pages) == 1
    assert b"<html" in next(iter(pages)).lower()


@pytest.mark.parametrize(
    "path",
    [
        "/console/nope.js",
        "/console/__init__.py",
        "/console/../app.py",
        "/console/%2e%2e/app.py",
        "/console/..%2fsettings.py",
        "/console/..%2fconsole%2fconsole.css",  # a file that exists, reached through the parent folder
        "/console/%2e%2e%2f%2e%2e%2fpyproject.toml",
        "/console/.hidden.css",
        "/console/sub/console.js",
        "/console/console.js%00.css",
    ],
)
async def test_an_unknown_console_file_or_a_path_out_of_its_folder_is_a_json_404(
    bare_agent: httpx.AsyncClient, path: str
) -> None:
    # Sent as written: a client would resolve the dots itself.
    url = bare_agent.base_url.copy_with(raw_path=path.encode())
    response = await bare_agent.send(bare_agent.build_request("GET", url))

    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "not_found"


async def test_the_console_is_not_in_the_api_document(bare_agent: httpx.AsyncClient) -> None:
    paths = (await bare_agent.get("/openapi.json")).json()["paths"]

    assert "/api/v1/agent/tools" in paths
    assert "/api/v1/agent/conversations" in paths
    assert not [path for path in paths if path.startswith("/console")]
