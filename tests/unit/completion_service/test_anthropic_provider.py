"""AnthropicProvider's I/O edge on an in-memory transport: headers, retries, thinking, stream ends and errors."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from completion_service.providers.anthropic import AnthropicProvider
from suite_common.errors import ApiError
from suite_common.wire import CompletionEvent, CompletionRequest, Message, TextDelta

pytestmark = pytest.mark.anyio

REQUEST = CompletionRequest(model="anthropic/claude-sonnet-4-5", messages=[Message(role="user", content="hi")])
MODEL = "claude-sonnet-4-5"


def _message(text: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }


def _error(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"type": "error", "error": {"type": error_type, "message": message}, "request_id": "req_1"}
    return httpx.Response(status, headers=headers or {}, json=body)


class Upstream:
    """Answers each request with the next scripted response, recording what it received."""

    def __init__(self, *responses: httpx.Response) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.responses.pop(0)

    def provider(
        self, *, api_key: str | None = "sk-ant-test", max_retries: int = 2, thinking: int | None = None
    ) -> AnthropicProvider:
        http = httpx.AsyncClient(transport=httpx.MockTransport(self), timeout=httpx.Timeout(30, connect=5))
        return AnthropicProvider(
            http,
            base_url="https://claude.example/",
            api_key=api_key,
            max_retries=max_retries,
            thinking_budget_tokens=thinking,
        )


async def test_it_posts_to_v1_messages_with_the_key_and_the_api_version() -> None:
    upstream = Upstream(httpx.Response(200, json=_message("hello")))
    response = await upstream.provider().complete(REQUEST, MODEL, 5)
    assert (response.message.content, response.provider, response.model) == (
        "hello",
        "anthropic",
        "anthropic/claude-sonnet-4-5",
    )
    [sent] = upstream.requests
    assert str(sent.url) == "https://claude.example/v1/messages"
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    assert json.loads(sent.content) == {
        "model": MODEL,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "stream": False,
        "max_tokens": 4096,
    }


async def test_without_a_key_no_key_header_is_sent() -> None:
    upstream = Upstream(httpx.Response(200, json=_message("hello")))
    await upstream.provider(api_key=None).complete(REQUEST, MODEL, 5)
    assert "x-api-key" not in upstream.requests[0].headers


async def test_the_thinking_budget_of_the_provider_is_sent() -> None:
    upstream = Upstream(httpx.Response(200, json=_message("hello")))
    await upstream.provider(thinking=2048).complete(REQUEST, MODEL, 5)
    sent = json.loads(upstream.requests[0].content)
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent["max_tokens"] == 2048 + 4096


async def test_a_529_overloaded_is_retried_until_it_succeeds() -> None:
    busy = _error(529, "overloaded_error", "Overloaded", {"retry-after": "0"})
    upstream = Upstream(busy, busy, httpx.Response(200, json=_message("at last")))
    response = await upstream.provider(max_retries=2).complete(REQUEST, MODEL, 5)
    assert response.message.content == "at last"
    assert len(upstream.requests) == 3


async def test_retries_stop_at_max_retries_with_the_last_error() -> None:
    busy = _error(529, "overloaded_error", "Overloaded", {"retry-after": "0"})
    upstream = Upstream(busy, busy, httpx.Response(200, json=_message("too late")))
    with pytest.raises(ApiError) as caught:
        await upstream.provider(max_retries=1).complete(REQUEST, MODEL, 5)
    assert (caught.value.status, caught.value.code) == (503, "overloaded")
    assert len(upstream.requests) == 2


async def test_a_400_is_never_retried() -> None:
    upstream = Upstream(_error(400, "invalid_request_error", "max_tokens: Field required"), _message_response())
    with pytest.raises(ApiError) as caught:
        await upstream.provider().complete(REQUEST, MODEL, 5)
    assert caught.value.code == "invalid_request"
    assert "max_tokens: Field required" in caught.value.message
    assert len(upstream.requests) == 1


def _message_response() -> httpx.Response:
    return httpx.Response(200, json=_message("never"))


async def test_a_429_asking_for_a_long_wait_is_not_retried_and_passes_retry_after_on() -> None:
    limited = _error(429, "rate_limit_error", "rate limited", {"retry-after": "60"})
    upstream = Upstream(limited, _message_response())
    with anyio.fail_after(2):
        with pytest.raises(ApiError) as caught:
            await upstream.provider().complete(REQUEST, MODEL, 120)
    assert (caught.value.status, caught.value.code) == (429, "rate_limited")
    assert caught.value.headers == {"Retry-After": "60"}
    assert len(upstream.requests) == 1


async def test_the_key_is_scrubbed_from_any_upstream_message() -> None:
    upstream = Upstream(_error(400, "invalid_request_error", "bad header x-api-key: sk-ant-test"))
    with pytest.raises(ApiError) as caught:
        await upstream.provider().complete(REQUEST, MODEL, 5)
    assert "sk-ant-test" not in caught.value.message


# --- streaming ---------------------------------------------------------------------------------


def _sse(*events: dict[str, Any] | str) -> httpx.Response:
    frames = []
    for event in events:
        if isinstance(event, str):
            frames.append(f"data: {event}\n\n")
        else:
            frames.append(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n")
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content="".join(frames).encode())


START: dict[str, Any] = {
    "type": "message_start",
    "message": {"type": "message", "content": [], "usage": {"input_tokens": 3}},
}
TEXT_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}


def _text(piece: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}


END: list[dict[str, Any]] = [
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    {"type": "message_stop"},
]


async def _collect(provider: AnthropicProvider, events: list[CompletionEvent]) -> None:
    async for event in provider.stream(REQUEST, MODEL, 5):
        events.append(event)


async def test_a_stream_is_requested_as_an_event_stream_and_ends_at_message_stop() -> None:
    # Whatever follows message_stop is not part of the message (here: a line that is not JSON).
    upstream = Upstream(_sse(START, TEXT_START, _text("Hi"), _text(" there"), *END, "garbage after the end"))
    events: list[CompletionEvent] = []
    await _collect(upstream.provider(), events)
    assert events[:2] == [TextDelta(delta="Hi"), TextDelta(delta=" there")]
    assert events[-1].type == "done"
    sent = upstream.requests[0]
    assert sent.headers["accept"] == "text/event-stream"
    assert json.loads(sent.content)["stream"] is True


async def test_an_overloaded_error_event_mid_stream_ends_the_stream_with_a_retryable_503_after_the_text() -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded sk-ant-test"}}
    upstream = Upstream(_sse(START, TEXT_START, _text("It"), overloaded))
    events: list[CompletionEvent] = []
    with pytest.raises(ApiError) as caught:
        await _collect(upstream.provider(), events)
    assert events == [TextDelta(delta="It")]
    assert (caught.value.status, caught.value.code, caught.value.retryable) == (503, "overloaded", True)
    assert "sk-ant-test" not in caught.value.message
    assert len(upstream.requests) == 1


async def test_a_stream_cut_before_the_message_ended_is_a_502_after_the_text_so_far() -> None:
    upstream = Upstream(_sse(START, TEXT_START, _text("It")))
    events: list[CompletionEvent] = []
    with pytest.raises(ApiError) as caught:
        await _collect(upstream.provider(), events)
    assert events == [TextDelta(delta="It")]
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


async def test_a_stream_request_answered_with_a_json_message_gives_its_events() -> None:
    events: list[CompletionEvent] = []
    await _collect(Upstream(_message_response()).provider(), events)
    assert [event.type for event in events] == ["text", "done"]


async def test_a_stream_request_answered_with_json_that_is_no_message_is_a_502() -> None:
    events: list[CompletionEvent] = []
    with pytest.raises(ApiError) as caught:
        await _collect(Upstream(httpx.Response(200, json={"type": "error"})).provider(), events)
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")
