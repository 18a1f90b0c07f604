"""A conversation with an unanswered tool call and a stray tool result, through completion-service to scripted
OpenAI and Bedrock servers that refuse such a conversation as the real ones do: every provider gets it mended
the same way (``providers/tool_turns``), where OpenAI and Bedrock used to get it as it was, and refuse it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from completion_service.app import create_app
from completion_service.providers.tool_turns import NOT_RUN_RESULT
from completion_service.settings import CompletionSettings
from support.fake_bedrock import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, BedrockReply, ScriptedBedrock
from support.fake_openai import ScriptedOpenAI, text
from support.servers import serve_app

pytestmark = pytest.mark.anyio

BROKEN = [
    {"role": "user", "content": "Compare the two."},
    {
        "role": "assistant",
        "toolCalls": [
            {"id": "call_a", "name": "web_search", "arguments": {"query": "a"}},
            {"id": "call_b", "name": "web_search", "arguments": {"query": "b"}},
        ],
    },
    {"role": "user", "content": "Hurry up."},  # written before the results came
    {"role": "tool", "toolCallId": "call_a", "content": "A"},  # call_b never answered (the run was cut)
    {"role": "tool", "toolCallId": "call_gone", "content": "lost", "isError": True},  # answers no call
]
TOOLS = [{"name": "web_search", "description": "Search the web.", "inputSchema": {"type": "object"}}]
STRAY_TEXT = "Result of tool call call_gone (the tool failed):\nlost"


@asynccontextmanager
async def _service(**settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(CompletionSettings(demo_enabled=False, **settings))
    async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield client


async def _complete(client: httpx.AsyncClient, body: dict[str, Any], *, stream: bool) -> str:
    """The answer's text, whole or streamed."""
    if not stream:
        response = await client.post("/api/v1/completions", json=body)
        assert response.status_code == 200, response.text
        return str(response.json()["message"]["content"])
    async with client.stream("POST", "/api/v1/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200, await response.aread()
        events = [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "done", events
    return "".join(event["delta"] for event in events if event["type"] == "text")


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_gets_every_call_answered_in_order_and_the_stray_result_as_user_text(stream: bool) -> None:
    fake = ScriptedOpenAI([text("Done.")])
    async with (
        serve_app(fake.app) as upstream,
        _service(openai_base_url=f"{upstream}/v1", openai_api_key="test-key") as client,
    ):
        answer = await _complete(client, {"model": "gpt-4o", "messages": BROKEN, "tools": TOOLS}, stream=stream)

    assert answer == "Done."
    [sent] = fake.requests
    assert [{k: v for k, v in m.items() if k != "tool_calls"} for m in sent["messages"][1:]] == [
        {"role": "assistant", "content": None},
        {"role": "tool", "tool_call_id": "call_a", "content": "A"},
        {"role": "tool", "tool_call_id": "call_b", "content": f"Error: {NOT_RUN_RESULT}"},
        {"role": "user", "content": "Hurry up."},
        {"role": "user", "content": STRAY_TEXT},
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_bedrock_gets_every_call_answered_in_order_and_the_stray_result_as_user_text(stream: bool) -> None:
    fake = ScriptedBedrock([BedrockReply(text="Done.")])
    async with (
        serve_app(fake.app) as upstream,
        _service(
            bedrock_region=REGION,
            bedrock_endpoint_url=upstream,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        ) as client,
    ):
        body = {"model": "bedrock/amazon.nova-lite-v1:0", "messages": BROKEN, "tools": TOOLS}
        answer = await _complete(client, body, stream=stream)

    assert answer == "Done."
    [sent] = fake.requests
    assert sent["body"]["messages"][2] == {
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": "call_a", "content": [{"text": "A"}], "status": "success"}},
            {"toolResult": {"toolUseId": "call_b", "content": [{"text": NOT_RUN_RESULT}], "status": "error"}},
            {"text": "Hurry up."},
            {"text": STRAY_TEXT},
        ],
    }
