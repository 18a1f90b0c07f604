"""OpenAIProvider's I/O edge on an in-memory transport: retries, deadlines, headers, stream ends."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from completion_service.providers.openai import OpenAIProvider
from suite_common.errors import ApiError
from suite_common.wire import CompletionEvent, CompletionRequest, Message, TextDelta, ToolCall

pytestmark = pytest.mark.anyio

REQUEST = CompletionRequest(model="openai/gpt-4o", messages=[Message(role="user", content="hi")])

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]


def _completion(content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class Upstream:
    """Answers each request with the next scripted response, recording what it received."""

    def __init__(self, *responses: httpx.Response | Handler) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = self.responses.pop(0)
        return response if isinstance(response, httpx.Response) else await response(request)

    def provider(self, *, api_key: str | None = "sk-test", max_retries: int = 2) -> OpenAIProvider:
        http = httpx.AsyncClient(transport=httpx.MockTransport(self), timeout=httpx.Timeout(30, connect=5))
        return OpenAIProvider(http, "https://llm.example/v1/", api_key, max_retries=max_retries)


def _busy(retry_after: str = "0") -> httpx.Response:
    return httpx.Response(503, headers={"retry-after": retry_after}, json={"error": {"message": "overloaded"}})


async def test_it_posts_to_chat_completions_with_the_bearer_key() -> None:
    upstream = Upstream(httpx.Response(200, json=_completion("hello")))
    response = await upstream.provider().complete(REQUEST, "gpt-4o", 5)
    assert response.message.content == "hello"
    [sent] = upstream.requests
    assert str(sent.url) == "https://llm.example/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert json.loads(sent.content)["model"] == "gpt-4o"


async def test_an_azure_style_key_goes_bare_in_its_own_header() -> None:
    upstream = Upstream(httpx.Response(200, json=_completion("hello")))
    http = httpx.AsyncClient(transport=httpx.MockTransport(upstream), timeout=5)
    provider = OpenAIProvider(http, "https://res.openai.azure.com/openai/v1", "azure-key", auth_header="api-key")
    await provider.complete(REQUEST, "gpt-4o", 5)
    [sent] = upstream.requests
    assert sent.headers["api-key"] == "azure-key"
    assert "authorization" not in sent.headers


async def test_without_a_key_no_authorization_header_is_sent() -> None:
    upstream = Upstream(httpx.Response(200, json=_completion("hello")))
    await upstream.provider(api_key=None).complete(REQUEST, "llama3.1", 5)
    assert "authorization" not in upstream.requests[0].headers


async def test_5xx_is_retried_until_it_succeeds() -> None:
    upstream = Upstream(_busy(), _busy(), httpx.Response(200, json=_completion("at last")))
    response = await upstream.provider(max_retries=2).complete(REQUEST, "gpt-4o", 5)
    assert response.message.content == "at last"
    assert len(upstream.requests) == 3


async def test_retries_stop_at_max_retries_with_the_last_error() -> None:
    upstream = Upstream(_busy(), _busy(), httpx.Response(200, json=_completion("too late")))
    with pytest.raises(ApiError) as caught:
        await upstream.provider(max_retries=1).complete(REQUEST, "gpt-4o", 5)
    assert (caught.value.status, caught.value.code) == (503, "overloaded")
    assert len(upstream.requests) == 2


async def test_a_400_is_never_retried() -> None:
    upstream = Upstream(httpx.Response(400, json={"error": {"message": "bad 'messages'"}}), _busy())
    with pytest.raises(ApiError) as caught:
        await upstream.provider().complete(REQUEST, "gpt-4o", 5)
    assert caught.value.code == "invalid_request"
    assert len(upstream.requests) == 1


async def test_a_connection_failure_is_retried_then_reported_as_unavailable_naming_the_provider_not_its_address() -> (
    None
):
    async def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused to llm.example:443", request=request)

    upstream = Upstream(refuse, refuse, refuse)
    with capture_logs() as logs, pytest.raises(ApiError) as caught:
        await upstream.provider(max_retries=2).complete(REQUEST, "gpt-4o", 30)
    assert (caught.value.status, caught.value.code) == (503, "upstream_unavailable")
    assert len(upstream.requests) == 3
    # The caller learns which provider failed; the internal address is for the operator's log only.
    assert caught.value.message == "Could not connect to the provider openai: the connection was refused or failed."
    assert "llm.example" not in caught.value.message
    unreachable = [entry for entry in logs if entry["event"] == "provider_unreachable"]
    assert len(unreachable) == 3
    assert unreachable[0]["endpoint"] == "https://llm.example"
    assert "llm.example:443" in unreachable[0]["reason"]


async def test_a_retry_after_beyond_the_deadline_is_not_waited_for() -> None:
    limited = httpx.Response(429, headers={"retry-after": "3"}, json={"error": {"message": "slow down"}})
    upstream = Upstream(limited, httpx.Response(200, json=_completion("never")))
    with anyio.fail_after(2):
        with pytest.raises(ApiError) as caught:
            await upstream.provider().complete(REQUEST, "gpt-4o", 1)
    assert (caught.value.status, caught.value.code) == (429, "rate_limited")
    assert caught.value.headers == {"Retry-After": "3"}
    assert len(upstream.requests) == 1


async def test_a_retry_after_longer_than_the_cap_is_a_429_at_once_with_that_retry_after() -> None:
    limited = httpx.Response(429, headers={"retry-after": "60"}, json={"error": {"message": "slow down"}})
    upstream = Upstream(limited, httpx.Response(200, json=_completion("never")))
    with anyio.fail_after(2):
        with pytest.raises(ApiError) as caught:
            await upstream.provider().complete(REQUEST, "gpt-4o", 120)
    assert (caught.value.status, caught.value.code) == (429, "rate_limited")
    assert caught.value.headers == {"Retry-After": "60"}
    assert len(upstream.requests) == 1


async def test_a_long_retry_after_ms_on_a_503_is_passed_on_in_whole_seconds_without_a_retry() -> None:
    busy = httpx.Response(503, headers={"retry-after-ms": "59500"}, json={"error": {"message": "overloaded"}})
    upstream = Upstream(busy, httpx.Response(200, json=_completion("never")))
    with anyio.fail_after(2):
        with pytest.raises(ApiError) as caught:
            await upstream.provider().complete(REQUEST, "gpt-4o", 120)
    assert (caught.value.status, caught.value.code) == (503, "overloaded")
    assert caught.value.headers == {"Retry-After": "60"}
    assert len(upstream.requests) == 1


async def test_a_short_retry_after_ms_is_waited_for_instead_of_the_backoff() -> None:
    # The first backoff is at least 0.5 s: with a 0.4 s budget only the 10 ms asked for fits.
    limited = httpx.Response(429, headers={"retry-after-ms": "10"}, json={"error": {"message": "slow down"}})
    upstream = Upstream(limited, httpx.Response(200, json=_completion("second time")))
    response = await upstream.provider().complete(REQUEST, "gpt-4o", 0.4)
    assert response.message.content == "second time"
    assert len(upstream.requests) == 2


async def test_an_upstream_that_never_answers_is_a_504_at_the_budget() -> None:
    async def never(request: httpx.Request) -> httpx.Response:
        await anyio.sleep_forever()
        raise AssertionError

    with anyio.fail_after(3):
        with pytest.raises(ApiError) as caught:
            await Upstream(never).provider().complete(REQUEST, "gpt-4o", 0.2)
    assert (caught.value.status, caught.value.code) == (504, "upstream_timeout")


async def test_the_key_is_scrubbed_from_any_upstream_message() -> None:
    upstream = Upstream(httpx.Response(400, json={"error": {"message": "bad header Bearer sk-test"}}))
    with pytest.raises(ApiError) as caught:
        await upstream.provider().complete(REQUEST, "gpt-4o", 5)
    assert "sk-test" not in caught.value.message


def _sse(*payloads: dict[str, Any] | str) -> httpx.Response:
    body = "".join(f"data: {p if isinstance(p, str) else json.dumps(p)}\n\n" for p in payloads)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


def _delta(content: str, finish: str | None = None) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
    }


async def _collect(provider: OpenAIProvider) -> list[CompletionEvent]:
    return [event async for event in provider.stream(REQUEST, "gpt-4o", 5)]


async def test_a_stream_cut_before_the_model_finished_is_a_502_after_the_text_so_far() -> None:
    events: list[CompletionEvent] = []

    async def consume() -> None:
        async for event in Upstream(_sse(_delta("It"), _delta(" stops"))).provider().stream(REQUEST, "gpt-4o", 5):
            events.append(event)

    with pytest.raises(ApiError) as caught:
        await consume()
    assert events == [TextDelta(delta="It"), TextDelta(delta=" stops")]
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


async def test_a_stream_request_answered_with_a_json_completion_gives_its_events() -> None:
    events = await _collect(Upstream(httpx.Response(200, json=_completion("hi"))).provider())
    assert [type(event).__name__ for event in events] == ["TextDelta", "CompletionDone"]
    assert events[0] == TextDelta(delta="hi")


async def test_a_stream_request_answered_with_neither_json_nor_an_event_stream_is_a_502_naming_the_type() -> None:
    page = httpx.Response(200, text="<html>proxy login</html>", headers={"content-type": "text/html"})
    with pytest.raises(ApiError) as caught:
        await _collect(Upstream(page).provider())
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")
    assert "'text/html'" in caught.value.message


async def test_a_stream_is_requested_as_an_event_stream_with_usage() -> None:
    upstream = Upstream(_sse(_delta("Hi", "stop"), "[DONE]"))
    events = await _collect(upstream.provider())
    assert events[0] == TextDelta(delta="Hi")
    assert events[-1].type == "done"
    sent = upstream.requests[0]
    assert sent.headers["accept"] == "text/event-stream"
    assert json.loads(sent.content)["stream_options"] == {"include_usage": True}


async def test_a_connection_the_server_dropped_before_answering_is_retried() -> None:
    async def dropped(request: httpx.Request) -> httpx.Response:
        # What a stale pooled keep-alive connection gives: closed before any response byte.
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)

    upstream = Upstream(dropped, httpx.Response(200, json=_completion("second try")))
    response = await upstream.provider().complete(REQUEST, "gpt-4o", 5)
    assert response.message.content == "second try"
    assert len(upstream.requests) == 2


async def test_a_failed_tool_result_says_so_in_its_text() -> None:
    upstream = Upstream(httpx.Response(200, json=_completion("ok")))
    request = CompletionRequest(
        model="gpt-4o",
        messages=[
            Message(role="user", content="hi"),
            Message(role="assistant", tool_calls=[ToolCall(id="c1", name="search", arguments={})]),
            Message(role="tool", tool_call_id="c1", content="the index is not ready", is_error=True),
        ],
    )
    await upstream.provider().complete(request, "gpt-4o", 5)
    sent = json.loads(upstream.requests[0].content)["messages"][2]
    assert sent == {"role": "tool", "tool_call_id": "c1", "content": "Error: the index is not ready"}
