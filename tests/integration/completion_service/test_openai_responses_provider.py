"""completion-service served for real, its OpenAI settings pointed at a scripted server of the Responses API."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from pydantic import SecretStr

from completion_service.app import create_app
from completion_service.catalog import CatalogError
from completion_service.settings import CompletionSettings
from support.fake_openai_responses import ScriptedResponses, error, text, tool_calls
from support.servers import serve_app

pytestmark = pytest.mark.anyio

MODEL = "openai-responses/gpt-5"
SYSTEM = {"role": "system", "content": "Answer from the documents."}
USER = {"role": "user", "content": "How does the agent loop stop?"}
SEARCH = {
    "name": "search_documents",
    "description": "Search the documents.",
    "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}
READ = {
    "name": "read_document",
    "description": "Read one document.",
    "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}


@asynccontextmanager
async def completion_service(
    fake: ScriptedResponses, *, api_key: str = "test-key", **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The service with its OpenAI settings (key and base URL) pointed at ``fake``."""
    async with serve_app(fake.app) as upstream:
        app = create_app(
            CompletionSettings(openai_base_url=f"{upstream}/v1", openai_api_key=SecretStr(api_key), **settings)
        )
        async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [USER], **fields}


async def _complete(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """The response, and with ``stream: true`` its SSE events (each checked against its ``event:`` name)."""
    if not body.get("stream"):
        return await client.post("/api/v1/completions", json=body), []
    events: list[dict[str, Any]] = []
    async with client.stream("POST", "/api/v1/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return response, events
        name = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                assert event["type"] == name
                events.append(event)
    return response, events


def _answer(response: httpx.Response, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The neutral answer, whole or folded from the stream's events, the way a caller sees it."""
    assert response.status_code == 200, events or response.text
    if not events:
        answer: dict[str, Any] = response.json()
        return answer
    done = events[-1]
    assert done["type"] == "done", events
    message: dict[str, Any] = {"role": "assistant"}
    if text_deltas := "".join(e["delta"] for e in events if e["type"] == "text"):
        message["content"] = text_deltas
    if blocks := [e["block"] for e in events if e["type"] == "reasoning_block"]:
        message["reasoning"] = blocks
    if calls := [{k: v for k, v in e.items() if k != "type"} for e in events if e["type"] == "tool_call"]:
        message["toolCalls"] = calls
    return {"message": message, **{k: v for k, v in done.items() if k != "type"}}


async def test_openai_responses_names_and_catalog_entries_with_api_responses_route_to_this_provider() -> None:
    catalog = json.dumps(
        [
            {"name": "thinker", "provider": "openai", "model": "gpt-5", "api": "responses"},
            {"name": "chatty", "provider": "openai", "model": "gpt-4o"},
        ]
    )
    fake = ScriptedResponses([text("Through the catalog.")])
    async with completion_service(fake, models=catalog) as client:
        direct = (await client.get("/api/v1/models/openai-responses/gpt-5")).json()
        alias = (await client.get("/api/v1/models/thinker")).json()
        chat = (await client.get("/api/v1/models/chatty")).json()
        listed = {model["id"]: model for model in (await client.get("/api/v1/models")).json()["models"]}
        answer = _answer(*await _complete(client, {"model": "thinker", "messages": [USER]}))
    assert (direct["provider"], direct["upstreamModel"]) == ("openai-responses", "gpt-5")
    assert (alias["provider"], alias["upstreamModel"]) == ("openai-responses", "gpt-5")
    assert chat["provider"] == "openai"
    assert listed["openai-responses/*"]["provider"] == "openai-responses"
    assert answer["message"]["content"] == "Through the catalog."
    assert fake.requests[0]["model"] == "gpt-5"


async def test_a_catalog_entry_of_another_provider_cannot_ask_for_the_responses_api() -> None:
    catalog = json.dumps([{"name": "x", "provider": "anthropic", "model": "claude", "api": "responses"}])
    with pytest.raises(CatalogError, match="for provider 'openai' only"):
        create_app(CompletionSettings(models=catalog, anthropic_api_key=SecretStr("k")))


@pytest.mark.parametrize("stream", [False, True])
async def test_a_text_answer_comes_back_after_an_exact_request_with_the_generation_controls(stream: bool) -> None:
    fake = ScriptedResponses([text("The loop stops after 15 iterations.", reasoning=["Count the limits."])])
    controls = {"reasoning": {"effort": "high", "summary": "auto"}, "verbosity": "low", "maxTokens": 900}
    async with completion_service(fake) as client:
        response, events = await _complete(client, _body(messages=[SYSTEM, USER], stream=stream, **controls))
        answer = _answer(response, events)
    assert fake.requests == [
        {
            "model": "gpt-5",
            "input": [{"role": "user", "content": "How does the agent loop stop?"}],
            "stream": stream,
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "instructions": "Answer from the documents.",
            "max_output_tokens": 900,
            "reasoning": {"effort": "high", "summary": "auto"},
            "text": {"verbosity": "low"},
        }
    ]
    assert answer["message"]["content"] == "The loop stops after 15 iterations."
    assert answer["message"]["reasoning"][0]["text"] == "Count the limits."
    assert answer["finishReason"] == "stop"
    assert answer["provider"] == "openai-responses"
    assert answer["model"] == MODEL
    assert answer["usage"] == {"inputTokens": 14, "outputTokens": 12, "reasoningTokens": 6}
    if stream:
        assert len([e for e in events if e["type"] == "text"]) > 1
        assert "".join(e["delta"] for e in events if e["type"] == "reasoning") == "Count the limits."


@pytest.mark.parametrize("stream", [False, True])
async def test_parallel_function_calls_come_back_assembled_from_their_argument_deltas(stream: bool) -> None:
    long_query = "how the agent loop stops after the iteration limit is reached"
    fake = ScriptedResponses(
        [tool_calls(("call_a", "search_documents", {"query": long_query}), ("call_b", "read_document", {"path": "x"}))]
    )
    async with completion_service(fake) as client:
        answer = _answer(*await _complete(client, _body(tools=[SEARCH, READ], stream=stream, toolChoice="required")))
    assert answer["finishReason"] == "tool_calls"
    assert answer["message"]["toolCalls"] == [
        {"id": "call_a", "name": "search_documents", "arguments": {"query": long_query}},
        {"id": "call_b", "name": "read_document", "arguments": {"path": "x"}},
    ]
    sent = fake.requests[0]
    assert sent["tools"][0] == {
        "type": "function",
        "name": "search_documents",
        "description": "Search the documents.",
        "parameters": SEARCH["inputSchema"],
        "strict": False,
    }
    assert sent["tool_choice"] == "required"


FIRST_THOUGHT = ["The question is about the loop.", "Search the documents first."]
SECOND_THOUGHT = ["The search named a file.", "Read it."]


@pytest.mark.parametrize("stream", [False, True])
async def test_two_tool_rounds_carry_each_reasoning_item_back_encrypted_and_end_with_a_summarised_answer(
    stream: bool,
) -> None:
    fake = ScriptedResponses(
        [
            tool_calls(("call_1", "search_documents", {"query": "loop stop"}), reasoning=FIRST_THOUGHT),
            tool_calls(("call_2", "read_document", {"path": "docs/loop.md"}), reasoning=SECOND_THOUGHT),
            text("It stops after 15 iterations.", reasoning=["The file says 15."]),
        ]
    )
    reasoning = {"effort": "medium", "summary": "auto"}
    conversation: list[dict[str, Any]] = [SYSTEM, USER]
    results = {"call_1": "docs/loop.md mentions the limit.", "call_2": "The loop stops after 15 iterations."}
    all_events: list[list[dict[str, Any]]] = []
    async with completion_service(fake) as client:
        for _ in range(3):
            body = _body(messages=conversation, tools=[SEARCH, READ], stream=stream, reasoning=reasoning)
            response, events = await _complete(client, body)
            answer = _answer(response, events)
            all_events.append(events)
            conversation.append(answer["message"])  # the caller sends the message back as it got it
            for call in answer["message"].get("toolCalls", []):
                conversation.append({"role": "tool", "toolCallId": call["id"], "content": results[call["id"]]})
    assert answer["message"]["content"] == "It stops after 15 iterations."
    assert answer["usage"]["reasoningTokens"] == 8
    first_block = conversation[2]["reasoning"][0]
    assert first_block["text"] == "\n\n".join(FIRST_THOUGHT)
    assert first_block["provider"] == "openai-responses"
    assert first_block["signature"].startswith("rs_")
    # The third request: every earlier reasoning item went back, encrypted content included, before its call.
    third = fake.requests[2]["input"]
    assert [item.get("type", item.get("role")) for item in third] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert third[1] == {
        "type": "reasoning",
        "id": first_block["signature"],
        "summary": [{"type": "summary_text", "text": "\n\n".join(FIRST_THOUGHT)}],
        "encrypted_content": first_block["redactedData"],
    }
    assert third[2] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "search_documents",
        "arguments": '{"query": "loop stop"}',
    }
    assert third[3] == {"type": "function_call_output", "call_id": "call_1", "output": results["call_1"]}
    if stream:
        # The summary streamed as reasoning events, its parts apart as in the block.
        first_events = all_events[0]
        summary = "".join(e["delta"] for e in first_events if e["type"] == "reasoning")
        assert summary == "\n\n".join(FIRST_THOUGHT)
        assert [e["type"] for e in first_events][-3:] == ["reasoning_block", "tool_call", "done"]


async def test_a_conversation_without_its_reasoning_items_is_what_the_api_refuses() -> None:
    """The scripted server holds to the API's rule the adapter keeps: a call comes back with its reasoning."""
    fake = ScriptedResponses([tool_calls(("call_1", "search_documents", {"query": "q"}), reasoning=["Think."])])
    async with completion_service(fake) as client:
        first = _answer(*await _complete(client, _body(tools=[SEARCH])))
        first["message"].pop("reasoning")
        conversation = [USER, first["message"], {"role": "tool", "toolCallId": "call_1", "content": "found"}]
        refused = await client.post("/api/v1/completions", json=_body(messages=conversation, tools=[SEARCH]))
    assert refused.status_code == 400
    assert "without its required 'reasoning' item" in refused.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_an_answer_cut_at_max_output_tokens_finishes_with_length(stream: bool) -> None:
    fake = ScriptedResponses([text("The loop", incomplete="max_output_tokens")])
    async with completion_service(fake) as client:
        answer = _answer(*await _complete(client, _body(stream=stream, maxTokens=2)))
    assert answer["finishReason"] == "length"
    assert answer["message"]["content"] == "The loop"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_429_with_retry_after_is_retried_and_then_succeeds(stream: bool) -> None:
    fake = ScriptedResponses([error(429, headers={"retry-after": "0"}), text("Second time lucky.")])
    async with completion_service(fake) as client:
        with anyio.fail_after(5):
            answer = _answer(*await _complete(client, _body(stream=stream)))
    assert answer["message"]["content"] == "Second time lucky."
    assert len(fake.requests) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_a_429_asking_for_a_long_wait_reaches_the_caller_at_once_with_its_retry_after(stream: bool) -> None:
    fake = ScriptedResponses([error(429, headers={"retry-after": "60"}), text("Never asked for.")])
    async with completion_service(fake) as client:
        with anyio.fail_after(2):
            response, _ = await _complete(client, _body(stream=stream))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "60"
    assert response.json()["error"]["code"] == "rate_limited"
    assert len(fake.requests) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_400_is_passed_on_as_an_invalid_request_without_a_retry(stream: bool) -> None:
    refusal = {
        "error": {
            "message": "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
            "type": "invalid_request_error",
            "param": "reasoning.effort",
            "code": "unsupported_parameter",
        }
    }
    fake = ScriptedResponses([error(400, refusal), text("Never asked for.")])
    async with completion_service(fake) as client:
        response, _ = await _complete(client, _body(stream=stream, reasoning={"effort": "low"}))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert "reasoning.effort" in response.json()["error"]["message"]
    assert len(fake.requests) == 1


async def test_a_rejected_key_is_a_502_auth_failed_that_never_shows_the_key() -> None:
    fake = ScriptedResponses([text("never")], api_key="the-right-key")
    async with completion_service(fake, api_key="sk-wrong-secret") as client:
        response, _ = await _complete(client, _body())
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "auth_failed"
    assert "sk-wrong-secret" not in response.text
