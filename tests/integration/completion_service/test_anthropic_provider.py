"""completion-service served for real, configured through its settings to reach a scripted Anthropic Messages API."""

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
from completion_service.settings import CompletionSettings
from support import fake_anthropic
from support.fake_anthropic import ScriptedAnthropic, error, raw, stream_error, text, thinking, tool_calls
from support.servers import serve_app

pytestmark = pytest.mark.anyio

MODEL = "anthropic/claude-sonnet-4-5"
UPSTREAM = "claude-sonnet-4-5"
USER = [{"role": "user", "content": "How does the agent loop stop?"}]
SEARCH = {
    "name": "search_documents",
    "description": "Search the documents.",
    "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}
WEB = {**SEARCH, "name": "web_search", "description": "Search the web."}


@asynccontextmanager
async def completion_service(
    fake: ScriptedAnthropic, *, api_key: str = "test-key", **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The service with its Anthropic settings pointed at ``fake``."""
    async with serve_app(fake.app) as upstream:
        key = SecretStr(api_key)
        app = create_app(CompletionSettings(anthropic_base_url=upstream, anthropic_api_key=key, **settings))
        async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": USER, **fields}


async def _complete(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """The response, and with ``stream: true`` its SSE events (each checked against its ``event:`` name)."""
    if not body.get("stream"):
        return await client.post("/api/v1/completions", json=body), []
    events: list[dict[str, Any]] = []
    async with client.stream("POST", "/api/v1/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()  # an ordinary JSON error: the stream never started
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
    text_deltas = "".join(e["delta"] for e in events if e["type"] == "text")
    if text_deltas:
        message["content"] = text_deltas
    blocks = [e["block"] for e in events if e["type"] == "reasoning_block"]
    if blocks:
        message["reasoning"] = blocks
    calls = [{k: v for k, v in e.items() if k != "type"} for e in events if e["type"] == "tool_call"]
    if calls:
        message["toolCalls"] = calls
    return {"message": message, **{k: v for k, v in done.items() if k != "type"}}


async def test_the_models_endpoint_routes_anthropic_names_to_this_provider() -> None:
    async with completion_service(ScriptedAnthropic()) as client:
        response = await client.get(f"/api/v1/models/{MODEL}")
    assert response.status_code == 200
    assert response.json() == {
        "id": MODEL,
        "provider": "anthropic",
        "upstreamModel": UPSTREAM,
        "contextTokens": 200_000,
        "images": True,
    }


async def test_a_text_answer_comes_back_whole_after_an_exact_request() -> None:
    fake = ScriptedAnthropic([text("The loop stops after 15 iterations.")])
    system = {"role": "system", "content": "Answer briefly."}
    async with completion_service(fake) as client:
        response, _ = await _complete(client, _body(messages=[system, *USER], maxTokens=100, temperature=0))
    assert response.status_code == 200
    assert response.json() == {
        "message": {"role": "assistant", "content": "The loop stops after 15 iterations."},
        "finishReason": "stop",
        "usage": {"inputTokens": 12, "outputTokens": 6},  # as the scripted server counted them
        "model": MODEL,
        "provider": "anthropic",
    }
    assert fake.requests == [
        {
            "model": UPSTREAM,
            "system": "Answer briefly.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "How does the agent loop stop?"}]}],
            "stream": False,
            "max_tokens": 100,
            "temperature": 0.0,
        }
    ]
    [headers] = fake.headers
    assert (headers["x-api-key"], headers["anthropic-version"]) == ("test-key", "2023-06-01")
    assert headers["content-type"] == "application/json"


async def test_a_text_answer_streams_as_several_deltas_then_done() -> None:
    fake = ScriptedAnthropic([text("The loop stops after 15 iterations.")])
    async with completion_service(fake) as client:
        response, events = await _complete(client, _body(stream=True))
    assert response.headers["content-type"].startswith("text/event-stream")
    assert len([e for e in events if e["type"] == "text"]) > 1
    assert _answer(response, events) == {
        "message": {"role": "assistant", "content": "The loop stops after 15 iterations."},
        "finishReason": "stop",
        "usage": {"inputTokens": 10, "outputTokens": 6},
        "model": MODEL,
        "provider": "anthropic",
    }
    assert fake.requests[0]["stream"] is True
    assert fake.requests[0]["max_tokens"] == 4096


@pytest.mark.parametrize("stream", [False, True])
async def test_one_tool_call_comes_back_with_its_arguments(stream: bool) -> None:
    fake = ScriptedAnthropic(
        [tool_calls(("toolu_01A", "search_documents", {"query": "loop stop"}), preamble="Let me look.")]
    )
    async with completion_service(fake) as client:
        answer = _answer(*await _complete(client, _body(tools=[SEARCH], stream=stream)))
    assert answer["finishReason"] == "tool_calls"
    assert answer["message"] == {
        "role": "assistant",
        "content": "Let me look.",
        "toolCalls": [{"id": "toolu_01A", "name": "search_documents", "arguments": {"query": "loop stop"}}],
    }
    sent = fake.requests[0]
    assert sent["tools"] == [
        {"name": "search_documents", "description": "Search the documents.", "input_schema": SEARCH["inputSchema"]}
    ]
    assert sent["tool_choice"] == {"type": "auto"}


@pytest.mark.parametrize("stream", [False, True])
async def test_parallel_tool_calls_split_across_many_deltas_arrive_complete(stream: bool) -> None:
    long_query = "how does the agent loop stop when the deadline passes"
    fake = ScriptedAnthropic(
        [
            tool_calls(
                ("toolu_01A", "search_documents", {"query": long_query, "top_k": 3}),
                ("toolu_01B", "web_search", {"query": "agent loop deadline", "fresh": True}),
                ("toolu_01C", "web_search", {}),
            )
        ]
    )
    async with completion_service(fake) as client:
        response, events = await _complete(client, _body(tools=[SEARCH, WEB], toolChoice="required", stream=stream))
    answer = _answer(response, events)
    assert answer["message"]["toolCalls"] == [
        {"id": "toolu_01A", "name": "search_documents", "arguments": {"query": long_query, "top_k": 3}},
        {"id": "toolu_01B", "name": "web_search", "arguments": {"query": "agent loop deadline", "fresh": True}},
        {"id": "toolu_01C", "name": "web_search", "arguments": {}},
    ]
    assert answer["finishReason"] == "tool_calls"
    assert answer["usage"]["outputTokens"] > 0
    assert fake.requests[0]["tool_choice"] == {"type": "any"}
    if stream:
        assert [e["type"] for e in events] == ["tool_call", "tool_call", "tool_call", "done"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_result_turn_goes_back_as_one_user_message_of_tool_results(stream: bool) -> None:
    fake = ScriptedAnthropic([text("It stops after 15 iterations or at its deadline.")])
    conversation = [
        *USER,
        {
            "role": "assistant",
            "toolCalls": [
                {"id": "toolu_01A", "name": "search_documents", "arguments": {"query": "loop stop"}},
                {"id": "toolu_01B", "name": "web_search", "arguments": {"query": "deadline"}},
            ],
        },
        {"role": "tool", "toolCallId": "toolu_01A", "content": "Max 15 iterations."},
        {"role": "tool", "toolCallId": "toolu_01B", "content": "HTTP 500", "isError": True},
    ]
    async with completion_service(fake) as client:
        answer = _answer(*await _complete(client, _body(messages=conversation, tools=[SEARCH, WEB], stream=stream)))
    assert answer["message"]["content"] == "It stops after 15 iterations or at its deadline."
    assert fake.requests[0]["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_01A", "name": "search_documents", "input": {"query": "loop stop"}},
                {"type": "tool_use", "id": "toolu_01B", "name": "web_search", "input": {"query": "deadline"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "Max 15 iterations."},
                {"type": "tool_result", "tool_use_id": "toolu_01B", "content": "HTTP 500", "is_error": True},
            ],
        },
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_429_with_retry_after_is_retried_and_then_succeeds(stream: bool) -> None:
    fake = ScriptedAnthropic([error(429, headers={"retry-after": "0"}), text("Second time lucky.")])
    async with completion_service(fake) as client:
        with anyio.fail_after(5):
            answer = _answer(*await _complete(client, _body(stream=stream)))
    assert answer["message"]["content"] == "Second time lucky."
    assert len(fake.requests) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_a_429_asking_for_a_long_wait_reaches_the_caller_at_once_with_its_retry_after(stream: bool) -> None:
    fake = ScriptedAnthropic([error(429, headers={"retry-after": "60"}), text("Never asked for.")])
    async with completion_service(fake) as client:
        with anyio.fail_after(2):
            response, _ = await _complete(client, _body(stream=stream))
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert response.headers["retry-after"] == "60"
    assert len(fake.requests) == 1


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [529, 503])
async def test_an_overloaded_api_twice_is_retried_and_then_succeeds(status: int, stream: bool) -> None:
    busy = error(status, headers={"retry-after": "0"})
    fake = ScriptedAnthropic([busy, busy, text("Third time lucky.")])
    async with completion_service(fake) as client:
        with anyio.fail_after(5):
            answer = _answer(*await _complete(client, _body(stream=stream)))
    assert answer["message"]["content"] == "Third time lucky."
    assert len(fake.requests) == 3


async def test_an_api_overloaded_past_the_retries_is_a_retryable_503() -> None:
    busy = error(529, headers={"retry-after": "0"})
    fake = ScriptedAnthropic([busy, busy])
    async with completion_service(fake, max_retries=1) as client:
        response, _ = await _complete(client, _body())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "overloaded"
    assert len(fake.requests) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_a_rejected_key_is_a_502_auth_failed_at_once_that_never_shows_the_key(stream: bool) -> None:
    fake = ScriptedAnthropic([text("never")], api_key="the-right-key")
    async with completion_service(fake, api_key="sk-ant-wrong-and-secret") as client:
        response, _ = await _complete(client, _body(stream=stream))
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/json"
    error_body = response.json()["error"]
    assert error_body["code"] == "auth_failed"
    assert "COMPLETION_ANTHROPIC_API_KEY" in error_body["message"]
    assert "sk-ant-wrong-and-secret" not in response.text
    assert len(fake.requests) == 1  # never retried


async def test_a_prompt_too_long_is_a_400_context_length_exceeded() -> None:
    fake = ScriptedAnthropic([error(400, message="prompt is too long: 208310 tokens > 200000 maximum")])
    async with completion_service(fake) as client:
        response, _ = await _complete(client, _body())
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"
    assert "208310 tokens" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("reply", "stream"),
    [
        (raw(b'{"id": "msg_1", "type": "message", "role": "assistant"}'), False),
        (raw(b"<html>gateway</html>", content_type="text/html"), False),
        (raw(b"<html>gateway</html>", content_type="text/html"), True),
        (raw(b"event: message_start\ndata: {not json\n\n", content_type="text/event-stream"), True),
    ],
)
async def test_an_upstream_body_that_is_not_the_messages_format_is_a_502(reply: Any, stream: bool) -> None:
    async with completion_service(ScriptedAnthropic([reply])) as client:
        response, _ = await _complete(client, _body(stream=stream))
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "bad_upstream_response"


async def test_an_overloaded_error_event_after_some_text_ends_the_stream_with_a_retryable_error_event() -> None:
    fake = ScriptedAnthropic([stream_error("overloaded_error", "Overloaded", after_text="The loop")])
    async with completion_service(fake) as client:
        response, events = await _complete(client, _body(stream=True))
    assert response.status_code == 200
    assert "".join(e["delta"] for e in events if e["type"] == "text") == "The loop"
    assert events[-1]["type"] == "error"
    assert (events[-1]["code"], events[-1]["retryable"]) == ("overloaded", True)


async def test_an_overloaded_error_event_before_any_content_is_a_503_response() -> None:
    fake = ScriptedAnthropic([stream_error("overloaded_error", "Overloaded")])
    async with completion_service(fake) as client:
        response, _ = await _complete(client, _body(stream=True))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "overloaded"
    assert response.headers["retry-after"] == "1"  # the retry policy's wait after a first attempt, rounded up


# --- extended thinking -------------------------------------------------------------------------

THOUGHT = "The user asks how the loop stops; the docs will say."


@pytest.mark.parametrize("stream", [False, True])
async def test_with_a_thinking_budget_thinking_streams_and_its_signed_block_goes_back_unchanged(stream: bool) -> None:
    fake = ScriptedAnthropic(
        [
            tool_calls(("toolu_01A", "search_documents", {"query": "loop stop"}), reasoning=[thinking(THOUGHT)]),
            text("After 15 iterations."),
        ]
    )
    async with completion_service(fake, anthropic_thinking_budget_tokens=2048) as client:
        response, events = await _complete(client, _body(tools=[SEARCH], stream=stream, temperature=0.2))
        first = _answer(response, events)
        block = {"text": THOUGHT, "signature": fake_anthropic.signature_of(THOUGHT), "provider": "anthropic"}
        assert first["message"]["reasoning"] == [block]
        if stream:
            reasoning = [e["delta"] for e in events if e["type"] == "reasoning"]
            assert len(reasoning) > 1
            assert "".join(reasoning) == THOUGHT
            assert [e["type"] for e in events][-3:] == ["reasoning_block", "tool_call", "done"]
        # The next turn: the caller sends the message back as it got it, reasoning included.
        conversation = [
            *USER,
            first["message"],
            {"role": "tool", "toolCallId": "toolu_01A", "content": "Max 15 iterations."},
        ]
        second = _answer(*await _complete(client, _body(messages=conversation, tools=[SEARCH], stream=stream)))
    assert second["message"]["content"] == "After 15 iterations."
    sent = fake.requests[0]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent["max_tokens"] == 2048 + 4096
    assert "temperature" not in sent
    # The scripted server checked the signature, as Anthropic does; the block went first, unchanged.
    assert fake.requests[1]["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": THOUGHT,
        "signature": fake_anthropic.signature_of(THOUGHT),
    }
    assert fake.requests[1]["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_with_a_thinking_budget_a_forced_tool_is_asked_for_without_thinking() -> None:
    fake = ScriptedAnthropic([tool_calls(("toolu_01A", "web_search", {"query": "x"}))])
    async with completion_service(fake, anthropic_thinking_budget_tokens=2048) as client:
        answer = _answer(*await _complete(client, _body(tools=[WEB], toolChoice={"name": "web_search"})))
    assert answer["finishReason"] == "tool_calls"
    assert "thinking" not in fake.requests[0]
    assert fake.requests[0]["tool_choice"] == {"type": "tool", "name": "web_search"}


async def test_a_stream_answered_with_one_message_object_gives_the_events_of_that_message() -> None:
    # An Anthropic-compatible server that answers a streamed request with the whole message, as JSON.
    message = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": UPSTREAM,
        "content": [
            {"type": "thinking", "thinking": "The docs will say.", "signature": "sig-1"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01", "name": "search_documents", "input": {"query": "stop"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 30},
    }
    fake = ScriptedAnthropic([raw(json.dumps(message).encode())])
    async with completion_service(fake) as client:
        response, events = await _complete(client, _body(stream=True, tools=[SEARCH]))
    assert response.status_code == 200
    assert events == [
        {"type": "reasoning", "delta": "The docs will say."},
        {
            "type": "reasoning_block",
            "block": {"text": "The docs will say.", "signature": "sig-1", "provider": "anthropic"},
        },
        {"type": "text", "delta": "Let me look."},
        {"type": "tool_call", "id": "toolu_01", "name": "search_documents", "arguments": {"query": "stop"}},
        {
            "type": "done",
            "finishReason": "tool_calls",
            "usage": {"inputTokens": 12, "outputTokens": 30},
            "model": MODEL,
            "provider": "anthropic",
        },
    ]


# --- generation controls -------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_an_effort_thinks_with_its_budget_and_summary_none_sends_no_reasoning_text_but_the_signed_block(
    stream: bool,
) -> None:
    fake = ScriptedAnthropic(
        [
            tool_calls(("toolu_01A", "search_documents", {"query": "loop stop"}), reasoning=[thinking(THOUGHT)]),
            text("After 15 iterations."),
        ]
    )
    reasoning = {"effort": "medium", "summary": "none"}
    async with completion_service(fake) as client:
        response, events = await _complete(
            client, _body(tools=[SEARCH], stream=stream, temperature=0.5, reasoning=reasoning)
        )
        first = _answer(response, events)
        conversation = [
            *USER,
            first["message"],
            {"role": "tool", "toolCallId": "toolu_01A", "content": "Max 15 iterations."},
        ]
        second = _answer(
            *await _complete(client, _body(messages=conversation, tools=[SEARCH], stream=stream, reasoning=reasoning))
        )
    assert fake.requests[0]["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert fake.requests[0]["max_tokens"] == 8192 + 4096
    assert "temperature" not in fake.requests[0]
    assert first["warnings"] == ["temperature ignored: Claude takes no temperature with extended thinking."]
    assert [e for e in events if e["type"] == "reasoning"] == []  # no reasoning text streamed
    # The signed block stays in the answer: Anthropic wants it back in the tool round, and got it unchanged.
    block = {"text": THOUGHT, "signature": fake_anthropic.signature_of(THOUGHT), "provider": "anthropic"}
    assert first["message"]["reasoning"] == [block]
    assert fake.requests[1]["messages"][1]["content"][0]["signature"] == block["signature"]
    assert second["message"]["content"] == "After 15 iterations."


@pytest.mark.parametrize("stream", [False, True])
async def test_a_claude_model_that_cannot_think_ignores_the_effort_and_says_so(stream: bool) -> None:
    fake = ScriptedAnthropic([text("After 15 iterations.")])
    body = _body(model="anthropic/claude-3-5-haiku-20241022", stream=stream, reasoning={"effort": "high"})
    async with completion_service(fake) as client:
        answer = _answer(*await _complete(client, body))
    assert answer["warnings"] == ["reasoning ignored: the model 'anthropic/claude-3-5-haiku-20241022' cannot reason."]
    assert "thinking" not in fake.requests[0]
