"""Tool names a provider would refuse, through completion-service to scripted servers that refuse them as
the real ones do: the exact names sent, and the caller's names on the calls that come back."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from completion_service.app import create_app
from completion_service.settings import CompletionSettings
from support import fake_gemini
from support.fake_bedrock import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, BedrockReply, ScriptedBedrock
from support.fake_gemini import ScriptedGemini
from support.fake_openai import ScriptedOpenAI, tool_calls
from support.servers import serve_app

pytestmark = pytest.mark.anyio

LONG = "read_" + "very_long_" * 12  # 125 characters, as MCP allows (up to 128)
CATALOG = ["search_documents", "web.search", "web_search", "Café Menu", LONG, "搜索"]
"""What third-party MCP servers name their tools; only the first and third suit OpenAI as they are."""


def _spec(name: str) -> dict[str, Any]:
    return {"name": name, "description": f"The tool {name}.", "inputSchema": {"type": "object", "properties": {}}}


def _hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


OPENAI_NAMES = {
    "search_documents": "search_documents",
    "web.search": f"web_search_{_hash('web.search')}",  # web_search is taken by the catalog's own
    "web_search": "web_search",
    "Café Menu": "Cafe_Menu",
    LONG: LONG[:64],
    "搜索": "tool",
}

HISTORY = [
    {"role": "user", "content": "Find the menu."},
    {"role": "assistant", "toolCalls": [{"id": "call_0", "name": "web.search", "arguments": {"query": "menu"}}]},
    {"role": "tool", "toolCallId": "call_0", "content": "no results"},
]


@asynccontextmanager
async def _service(**settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(CompletionSettings(demo_enabled=False, **settings))
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield client


async def _answer(client: httpx.AsyncClient, body: dict[str, Any], *, stream: bool) -> list[dict[str, Any]]:
    """The tool calls of the answer, whole or streamed."""
    if not stream:
        response = await client.post("/api/v1/completions", json=body)
        assert response.status_code == 200, response.text
        calls: list[dict[str, Any]] = response.json()["message"]["toolCalls"]
        return calls
    async with client.stream("POST", "/api/v1/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200, await response.aread()
        events = [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "done", events
    return [{k: v for k, v in e.items() if k != "type"} for e in events if e["type"] == "tool_call"]


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_gets_names_it_accepts_and_the_caller_gets_the_catalog_names_back(stream: bool) -> None:
    def call_what_was_offered(body: dict[str, Any]) -> Any:
        offered = [tool["function"]["name"] for tool in body["tools"]]
        return tool_calls(*((f"call_{n}", name, {}) for n, name in enumerate(offered, start=1)))

    fake = ScriptedOpenAI([call_what_was_offered])
    async with (
        serve_app(fake.app) as upstream,
        _service(openai_base_url=f"{upstream}/v1", openai_api_key="test-key") as client,
    ):
        body = {
            "model": "gpt-4o",
            "messages": HISTORY,
            "tools": [_spec(name) for name in CATALOG],
            "toolChoice": {"name": "web.search"},
        }
        calls = await _answer(client, body, stream=stream)

    [sent] = fake.requests
    assert [tool["function"]["name"] for tool in sent["tools"]] == [OPENAI_NAMES[name] for name in CATALOG]
    assert sent["messages"][1]["tool_calls"][0]["function"]["name"] == OPENAI_NAMES["web.search"]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": OPENAI_NAMES["web.search"]}}
    assert [call["name"] for call in calls] == CATALOG
    assert [call["id"] for call in calls] == [f"call_{n}" for n in range(1, len(CATALOG) + 1)]


async def test_names_valid_for_the_provider_go_out_unchanged() -> None:
    fake = ScriptedOpenAI([tool_calls(("call_1", "search_documents", {"query": "x"}))])
    async with (
        serve_app(fake.app) as upstream,
        _service(openai_base_url=f"{upstream}/v1", openai_api_key="test-key") as client,
    ):
        body = {"model": "gpt-4o", "messages": HISTORY[:1], "tools": [_spec("search_documents"), _spec("web-search")]}
        calls = await _answer(client, body, stream=False)
    assert [tool["function"]["name"] for tool in fake.requests[0]["tools"]] == ["search_documents", "web-search"]
    assert [call["name"] for call in calls] == ["search_documents"]


@pytest.mark.parametrize("stream", [False, True])
async def test_gemini_keeps_dotted_names_and_gets_the_others_mapped_by_its_own_rule(stream: bool) -> None:
    catalog = ["web.search", "Café Menu", "3d render"]
    fake = ScriptedGemini(
        [lambda body: fake_gemini.function_calls(*((d["name"], {}) for d in body["tools"][0]["functionDeclarations"]))]
    )
    async with (
        serve_app(fake.app) as upstream,
        _service(gemini_api_key=fake.api_key, gemini_base_url=upstream) as client,
    ):
        body = {"model": "gemini/gemini-2.5-flash", "messages": HISTORY, "tools": [_spec(name) for name in catalog]}
        calls = await _answer(client, body, stream=stream)

    [sent] = fake.requests
    declared = [d["name"] for d in sent.body["tools"][0]["functionDeclarations"]]
    assert declared == ["web.search", "Cafe_Menu", "_3d_render"]  # Gemini takes dots, not a digit first
    assert sent.body["contents"][1]["parts"][0]["functionCall"]["name"] == "web.search"
    assert [call["name"] for call in calls] == catalog


@pytest.mark.parametrize("stream", [False, True])
async def test_bedrock_gets_names_of_its_tool_spec_pattern_and_the_caller_gets_the_catalog_names_back(
    stream: bool,
) -> None:
    model = "anthropic.claude-3-5-haiku-20241022-v1:0"
    fake = ScriptedBedrock([BedrockReply(tool_uses=(("tooluse_1", "web_search", {"query": "menu"}),))])
    async with (
        serve_app(fake.app) as upstream,
        _service(
            bedrock_region=REGION,
            bedrock_endpoint_url=upstream,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        ) as client,
    ):
        body = {
            "model": f"bedrock/{model}",
            "messages": HISTORY,
            "tools": [_spec("web.search"), _spec("Café Menu")],
            "toolChoice": {"name": "web.search"},
        }
        calls = await _answer(client, body, stream=stream)

    [sent] = fake.requests
    config = sent["body"]["toolConfig"]
    assert [tool["toolSpec"]["name"] for tool in config["tools"]] == ["web_search", "Cafe_Menu"]
    assert config["toolChoice"] == {"tool": {"name": "web_search"}}
    assert sent["body"]["messages"][1]["content"][0]["toolUse"]["name"] == "web_search"
    assert [(call["name"], call["arguments"]) for call in calls] == [("web.search", {"query": "menu"})]
