"""completion-service served for real, in front of a scripted server speaking OpenAI's wire format."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from completion_service.app import create_app
from completion_service.settings import CompletionSettings
from suite_common import wire
from suite_common.echo import MAX_ECHO_CHARS
from suite_common.wire import DEADLINE_HEADER
from support.fake_openai import (
    Reply,
    ScriptedOpenAI,
    error,
    hang,
    json_even_when_streamed,
    raw,
    text,
    text_then_hang,
    tool_calls,
)
from support.servers import serve_app

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "How does the agent loop stop?"}]
SEARCH = {
    "name": "search_documents",
    "description": "Search the documents.",
    "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}


@asynccontextmanager
async def completion_service(
    fake: ScriptedOpenAI | None = None, *, api_key: str | None = "test-key", **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The service, its OpenAI endpoint pointed at ``fake`` when one is given."""
    async with serve_app(fake.app if fake else ScriptedOpenAI().app) as upstream:
        if fake is not None:
            settings = {"openai_base_url": f"{upstream}/v1", "openai_api_key": api_key, **settings}
        app = create_app(CompletionSettings(**settings))
        async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": USER, **fields}


async def _stream(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """The response and its SSE events; each event's JSON is checked against its ``event:`` name."""
    events: list[dict[str, Any]] = []
    async with client.stream("POST", "/api/v1/completions", json={**body, "stream": True}) as response:
        name = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                assert event["type"] == name
                events.append(event)
        if response.status_code != 200:
            await response.aread()
    return response, events


async def test_a_text_answer_comes_back_whole() -> None:
    fake = ScriptedOpenAI([text("The loop stops after 15 iterations.")])
    async with completion_service(fake) as client:
        response = await client.post("/api/v1/completions", json=_body(maxTokens=100, temperature=0))
    assert response.status_code == 200
    assert response.json() == {
        "message": {"role": "assistant", "content": "The loop stops after 15 iterations."},
        "finishReason": "stop",
        "usage": {"inputTokens": 10, "outputTokens": 6},  # as the scripted server counted them
        "model": "gpt-4o",
        "provider": "openai",
    }
    assert fake.requests == [
        {"model": "gpt-4o", "messages": USER, "stream": False, "max_tokens": 100, "temperature": 0.0}
    ]


async def test_a_text_answer_streams_as_several_deltas_then_done() -> None:
    fake = ScriptedOpenAI([text("The loop stops after 15 iterations.")])
    async with completion_service(fake) as client:
        response, events = await _stream(client, _body())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    deltas = [e["delta"] for e in events if e["type"] == "text"]
    assert len(deltas) > 1
    assert "".join(deltas) == "The loop stops after 15 iterations."
    assert events[-1] == {
        "type": "done",
        "finishReason": "stop",
        "usage": {"inputTokens": 10, "outputTokens": 6},
        "model": "gpt-4o",
        "provider": "openai",
    }
    assert fake.requests[0]["stream_options"] == {"include_usage": True}


async def test_one_tool_call_comes_back_with_its_arguments() -> None:
    fake = ScriptedOpenAI([tool_calls(("call_1", "search_documents", {"query": "loop stop"}))])
    async with completion_service(fake) as client:
        response = await client.post("/api/v1/completions", json=_body(model="openai/gpt-4o", tools=[SEARCH]))
    assert response.status_code == 200
    answer = response.json()
    assert answer["finishReason"] == "tool_calls"
    assert answer["message"]["toolCalls"] == [
        {"id": "call_1", "name": "search_documents", "arguments": {"query": "loop stop"}}
    ]
    assert answer["model"] == "openai/gpt-4o"
    assert fake.requests[0]["model"] == "gpt-4o"
    assert fake.requests[0]["tools"][0]["function"]["name"] == "search_documents"
    assert fake.requests[0]["tool_choice"] == "auto"


async def test_parallel_tool_calls_streamed_in_split_deltas_arrive_as_complete_tool_call_events() -> None:
    long_query = "how does the agent loop stop when the deadline passes"
    fake = ScriptedOpenAI(
        [
            tool_calls(
                ("call_a", "search_documents", {"query": long_query, "top_k": 3}),
                ("call_b", "web_search", {"query": "agent loop deadline", "fresh": True}),
            )
        ]
    )
    async with completion_service(fake) as client:
        response, events = await _stream(client, _body(tools=[SEARCH, {**SEARCH, "name": "web_search"}]))
    assert response.status_code == 200
    assert events[:2] == [
        {
            "type": "tool_call",
            "id": "call_a",
            "name": "search_documents",
            "arguments": {"query": long_query, "top_k": 3},
        },
        {
            "type": "tool_call",
            "id": "call_b",
            "name": "web_search",
            "arguments": {"query": "agent loop deadline", "fresh": True},
        },
    ]
    assert events[2]["type"] == "done"
    assert events[2]["finishReason"] == "tool_calls"
    assert events[2]["usage"]["outputTokens"] > 0
    assert len(events) == 3


@pytest.mark.parametrize("stream", [False, True])
async def test_a_rejected_key_is_a_502_auth_failed_that_never_shows_the_key(stream: bool) -> None:
    fake = ScriptedOpenAI([text("never")], api_key="the-right-key")
    async with completion_service(fake, api_key="sk-wrong-and-secret") as client:
        response = await client.post("/api/v1/completions", json=_body(stream=stream))
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "auth_failed"
    assert "sk-wrong-and-secret" not in response.text
    assert len(fake.requests) == 1  # never retried


async def test_a_429_with_retry_after_is_retried_and_then_succeeds() -> None:
    fake = ScriptedOpenAI([error(429, headers={"Retry-After": "0"}), text("Second time lucky.")])
    async with completion_service(fake) as client:
        with anyio.fail_after(5):
            response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 200
    assert response.json()["message"]["content"] == "Second time lucky."
    assert len(fake.requests) == 2


async def test_a_429_that_outlasts_the_retries_reaches_the_caller_with_retry_after() -> None:
    limited = error(429, headers={"Retry-After": "0"})
    fake = ScriptedOpenAI([limited, limited])
    async with completion_service(fake, max_retries=1) as client:
        response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert response.headers["retry-after"] == "0"
    assert len(fake.requests) == 2


@pytest.mark.parametrize(("retries", "retry_after"), [(0, "1"), (1, "2")])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_429_without_retry_after_reaches_the_caller_with_the_wait_the_retry_policy_would_have_made(
    retries: int, retry_after: str, stream: bool
) -> None:
    # The backoff waits 0.5 s (+ up to 0.5 s jitter) after the first attempt, 1 s (+ jitter) after the second.
    fake = ScriptedOpenAI([error(429)] * (retries + 1))
    async with completion_service(fake, max_retries=retries) as client:
        with anyio.fail_after(5):
            response = await client.post("/api/v1/completions", json=_body(stream=stream))
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert response.headers["retry-after"] == retry_after
    assert len(fake.requests) == retries + 1


async def test_an_overloaded_provider_without_retry_after_is_a_503_with_one() -> None:
    fake = ScriptedOpenAI([error(503)])
    async with completion_service(fake, max_retries=0) as client:
        response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "overloaded"
    assert response.headers["retry-after"] == "1"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_429_asking_for_a_long_wait_reaches_the_caller_at_once_with_its_retry_after(stream: bool) -> None:
    fake = ScriptedOpenAI([error(429, headers={"Retry-After": "60"}), text("Never asked for.")])
    async with completion_service(fake) as client:
        with anyio.fail_after(2):
            response = await client.post("/api/v1/completions", json=_body(stream=stream))
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert response.headers["retry-after"] == "60"
    assert len(fake.requests) == 1


async def test_a_429_with_retry_after_ms_is_retried_and_then_succeeds() -> None:
    fake = ScriptedOpenAI([error(429, headers={"retry-after-ms": "10"}), text("Second time lucky.")])
    async with completion_service(fake) as client:
        with anyio.fail_after(5):
            response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 200
    assert response.json()["message"]["content"] == "Second time lucky."
    assert len(fake.requests) == 2


@pytest.mark.parametrize(
    "reply",
    [raw(b'{"id": "chatcmpl-1", "object": "chat.completion"}'), raw(b"<html>gateway</html>", content_type="text/html")],
)
async def test_an_upstream_body_that_is_not_a_chat_completion_is_a_502(reply: Any) -> None:
    async with completion_service(ScriptedOpenAI([reply])) as client:
        response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "bad_upstream_response"


async def test_a_stream_that_breaks_after_the_first_event_ends_with_an_error_event() -> None:
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "It"}, "finish_reason": None}],
    }
    cut_short = raw(f"data: {json.dumps(chunk)}\n\n".encode(), content_type="text/event-stream")
    async with completion_service(ScriptedOpenAI([cut_short])) as client:
        response, events = await _stream(client, _body())
    assert response.status_code == 200
    assert events[0] == {"type": "text", "delta": "It"}
    assert events[-1]["type"] == "error"
    assert events[-1]["code"] == "bad_upstream_response"


async def test_an_upstream_past_the_callers_deadline_is_a_504_at_that_deadline() -> None:
    fake = ScriptedOpenAI([hang()])
    async with completion_service(fake) as client:
        with anyio.fail_after(5):
            response = await client.post("/api/v1/completions", json=_body(), headers={DEADLINE_HEADER: "300"})
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_caller_that_goes_away_cancels_the_upstream_call(stream: bool) -> None:
    reached = anyio.Event()

    def hang_when_reached(_: dict[str, Any]) -> Reply:
        reached.set()
        return hang()

    fake = ScriptedOpenAI([hang_when_reached])
    async with completion_service(fake) as client:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: client.post("/api/v1/completions", json=_body(stream=stream)))
                await reached.wait()
                tg.cancel_scope.cancel()  # the caller hangs up
            await fake.wait_for_hangup()


async def test_a_caller_that_goes_away_in_the_middle_of_a_stream_cancels_the_upstream_call() -> None:
    fake = ScriptedOpenAI([text_then_hang("It")])
    async with completion_service(fake) as client:
        with anyio.fail_after(5):
            async with client.stream("POST", "/api/v1/completions", json=_body(stream=True)) as response:
                assert response.status_code == 200
                lines = response.aiter_lines()
                while not (line := await anext(lines)).startswith("data: "):
                    pass
                assert json.loads(line.removeprefix("data: ")) == {"type": "text", "delta": "It"}
            # Leaving the block closes the connection mid-stream: the caller hangs up.
            await fake.wait_for_hangup()
    assert len(fake.requests) == 1


async def test_a_model_name_resolves_to_the_provider_and_upstream_model_that_would_answer_it() -> None:
    async with completion_service(ScriptedOpenAI()) as client:
        demo = await client.get("/api/v1/models/demo")
        prefixed = await client.get("/api/v1/models/openai/gpt-4o-mini")
        bare = await client.get("/api/v1/models/gpt-4o")
        nested = await client.get("/api/v1/models/openai/meta-llama/Llama-3.1-8B-Instruct")
        tagged = await client.get("/api/v1/models/llama3.1%3A8b")
    assert demo.status_code == 200
    assert demo.headers["content-type"] == "application/json"
    # Known models carry their context window and whether they take images (model_facts); others say nothing.
    known = {"contextTokens": 128_000, "images": True}
    assert demo.json() == {
        "id": "demo",
        "provider": "demo",
        "upstreamModel": "demo",
        "contextTokens": 32_768,
        "images": True,
    }
    assert prefixed.json() == {
        "id": "openai/gpt-4o-mini",
        "provider": "openai",
        "upstreamModel": "gpt-4o-mini",
        **known,
    }
    assert bare.json() == {"id": "gpt-4o", "provider": "openai", "upstreamModel": "gpt-4o", **known}
    assert nested.json() == {
        "id": "openai/meta-llama/Llama-3.1-8B-Instruct",
        "provider": "openai",
        "upstreamModel": "meta-llama/Llama-3.1-8B-Instruct",
    }
    assert tagged.json() == {"id": "llama3.1:8b", "provider": "openai", "upstreamModel": "llama3.1:8b"}


@pytest.mark.parametrize("model", ["openai/gpt-4o", "gpt-4o"])
async def test_a_model_that_would_not_route_is_a_404_with_the_message_the_completions_endpoint_gives(
    model: str,
) -> None:
    async with completion_service() as client:  # OpenAI not configured
        found = await client.get(f"/api/v1/models/{model}")
        completion = await client.post("/api/v1/completions", json=_body(model=model))
    assert found.status_code == 404
    assert found.headers["content-type"] == "application/json"
    assert found.json() == {"error": {"code": "model_not_found", "message": completion.json()["error"]["message"]}}
    assert "Available models: demo." in found.json()["error"]["message"]
    assert "COMPLETION_OPENAI_API_KEY" in found.json()["error"]["message"]


async def test_the_demo_model_is_not_found_once_disabled_nor_an_empty_openai_name() -> None:
    async with completion_service(ScriptedOpenAI(), demo_enabled=False) as client:
        demo = await client.get("/api/v1/models/demo")
        empty = await client.get("/api/v1/models/openai/")
    assert demo.json() == {"id": "demo", "provider": "openai", "upstreamModel": "demo"}  # a bare name, now
    assert empty.status_code == 404
    assert empty.json()["error"]["code"] == "model_not_found"
    async with completion_service(demo_enabled=False) as client:
        nothing = await client.get("/api/v1/models/demo")
    assert nothing.status_code == 404
    assert "Available models: none." in nothing.json()["error"]["message"]


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b'{"model": "demo", "messages": []}', "invalid_request"),
        (b'{"model": "demo", "messages": [{"role": "wizard", "content": "hi"}]}', "invalid_request"),
        (b'{"model": "demo", "messages": [', "invalid_json"),
    ],
)
async def test_an_invalid_request_body_is_a_400_json_error(content: bytes, code: str) -> None:
    async with completion_service() as client:
        response = await client.post(
            "/api/v1/completions", content=content, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


async def test_a_model_name_over_the_limit_is_a_400_naming_the_limit_both_to_complete_and_to_look_up() -> None:
    too_long = "gpt-" + "x" * wire.MAX_MODEL_NAME_CHARS
    async with completion_service(ScriptedOpenAI()) as client:
        completion = await client.post("/api/v1/completions", json=_body(model=too_long))
        looked_up = await client.get(f"/api/v1/models/{too_long}")
    expected = {
        "error": {
            "code": "invalid_request",
            "message": f"model: String should have at most {wire.MAX_MODEL_NAME_CHARS} characters",
        }
    }
    assert (completion.status_code, completion.json()) == (400, expected)
    assert (looked_up.status_code, looked_up.json()) == (400, expected)


async def test_an_unknown_model_name_is_echoed_clipped() -> None:
    name = "no-such-model-" + "y" * 200
    async with completion_service() as client:  # only demo: every other name is unknown
        response = await client.post("/api/v1/completions", json=_body(model=name))
    message = response.json()["error"]["message"]
    assert message.startswith(f"Unknown model '{name[: MAX_ECHO_CHARS - 1]}…'. Available models: demo.")
    assert name not in message


async def test_an_unknown_model_without_openai_is_a_400_that_says_how_to_configure_one() -> None:
    async with completion_service() as client:
        response = await client.post("/api/v1/completions", json=_body(model="gpt-4o"))
        models = await client.get("/api/v1/models")
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert response.json()["error"]["code"] == "model_not_found"
    assert "Available models: demo." in message
    assert "COMPLETION_OPENAI_API_KEY" in message
    assert [m["id"] for m in models.json()["models"]] == ["demo"]


async def test_models_and_readiness_reflect_the_configured_providers() -> None:
    async with completion_service(ScriptedOpenAI()) as client:
        models = await client.get("/api/v1/models")
        ready = await client.get("/readyz")
    assert [(m["id"], m["provider"]) for m in models.json()["models"]] == [
        ("demo", "demo"),
        ("openai/*", "openai"),
        ("openai-responses/*", "openai-responses"),
    ]
    assert ready.status_code == 200
    async with completion_service(demo_enabled=False) as client:
        not_ready = await client.get("/readyz")
    assert not_ready.status_code == 503


async def test_the_demo_model_calls_a_fitting_tool_then_cites_its_result_without_any_upstream() -> None:
    question = [{"role": "user", "content": "Search the documents: how does the loop stop?"}]
    async with completion_service() as client:
        calling = await client.post("/api/v1/completions", json=_body(model="demo", messages=question, tools=[SEARCH]))
        calls = calling.json()["message"]["toolCalls"]
        answering = await client.post(
            "/api/v1/completions",
            json=_body(
                model="demo",
                tools=[SEARCH],
                messages=[
                    *question,
                    {"role": "assistant", "toolCalls": calls},
                    {"role": "tool", "toolCallId": calls[0]["id"], "content": "architecture.md: it stops at 15."},
                ],
            ),
        )
    assert calls == [{"id": "call_demo_1", "name": "search_documents", "arguments": {"query": question[0]["content"]}}]
    assert calling.json()["finishReason"] == "tool_calls"
    assert answering.status_code == 200
    assert answering.json()["finishReason"] == "stop"
    assert "[1] search_documents: architecture.md: it stops at 15." in answering.json()["message"]["content"]
    assert answering.json()["provider"] == "demo"


async def test_the_demo_model_streams_without_any_upstream() -> None:
    async with completion_service() as client:
        response, events = await _stream(client, _body(model="demo", messages=[{"role": "user", "content": "hello"}]))
    assert response.status_code == 200
    text_events = [e for e in events if e["type"] == "text"]
    assert len(text_events) > 1
    assert "not an LLM" in "".join(e["delta"] for e in text_events)
    assert events[-1]["type"] == "done"
    assert events[-1]["provider"] == "demo"


async def test_a_stream_answered_with_one_json_completion_becomes_its_tool_calls_and_done() -> None:
    # Some OpenAI-compatible servers answer a streamed request that offers tools with one chat.completion.
    fake = ScriptedOpenAI([json_even_when_streamed(tool_calls(("call_1", "search_documents", {"query": "stop"})))])
    async with completion_service(fake) as client:
        response, events = await _stream(client, _body(tools=[SEARCH]))
    assert response.status_code == 200
    assert fake.requests[0]["stream"] is True
    assert events[0] == {
        "type": "tool_call",
        "id": "call_1",
        "name": "search_documents",
        "arguments": {"query": "stop"},
    }
    assert events[1]["type"] == "done"
    assert events[1]["finishReason"] == "tool_calls"
    assert events[1]["usage"]["inputTokens"] > 0


async def test_a_stream_answered_with_one_json_completion_of_text_streams_that_text() -> None:
    fake = ScriptedOpenAI([json_even_when_streamed(text("It stops at 15."))])
    async with completion_service(fake) as client:
        response, events = await _stream(client, _body())
    assert response.status_code == 200
    assert [(e["type"], e.get("delta")) for e in events] == [("text", "It stops at 15."), ("done", None)]


# --- generation controls ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_reasoning_model_gets_the_effort_and_verbosity_and_reports_its_reasoning_tokens(stream: bool) -> None:
    fake = ScriptedOpenAI([text("The loop stops after 15 iterations.")])
    body = _body(model="gpt-5", reasoning={"effort": "high", "summary": "auto"}, verbosity="low")
    async with completion_service(fake) as client:
        if stream:
            response, events = await _stream(client, body)
            done = events[-1]
        else:
            response = await client.post("/api/v1/completions", json=body)
            done = response.json()
    assert response.status_code == 200
    sent = fake.requests[0]
    assert (sent["reasoning_effort"], sent["verbosity"]) == ("high", "low")
    # 6 words of answer and the scripted server's 1024 reasoning tokens for "high": all billed as output.
    assert done["usage"] == {"inputTokens": 10, "outputTokens": 6 + 1024, "reasoningTokens": 1024}
    assert "warnings" not in done


@pytest.mark.parametrize("stream", [False, True])
async def test_a_model_that_cannot_reason_ignores_the_controls_and_says_so_in_the_answer(stream: bool) -> None:
    fake = ScriptedOpenAI([text("The loop stops after 15 iterations.")])
    body = _body(model="gpt-4o", reasoning={"effort": "low"}, verbosity="high")
    async with completion_service(fake) as client:
        if stream:
            response, events = await _stream(client, body)
            done = events[-1]
        else:
            response = await client.post("/api/v1/completions", json=body)
            done = response.json()
    assert response.status_code == 200
    assert done["warnings"] == [
        "reasoning ignored: the model 'gpt-4o' cannot reason.",
        "verbosity ignored: the model 'gpt-4o' does not take it.",
    ]
    assert "reasoning_effort" not in fake.requests[0]
    assert "verbosity" not in fake.requests[0]
    assert "reasoningTokens" not in done["usage"]


@pytest.mark.parametrize("stream", [False, True])
async def test_the_demo_model_ignores_the_controls_and_says_so_in_the_answer(stream: bool) -> None:
    body = {"model": "demo", "messages": USER, "reasoning": {"effort": "medium"}}
    async with completion_service(demo_enabled=True) as client:
        if stream:
            response, events = await _stream(client, body)
            done = events[-1]
        else:
            response = await client.post("/api/v1/completions", json=body)
            done = response.json()
    assert response.status_code == 200
    assert done["warnings"] == ["reasoning ignored: the model 'demo' cannot reason."]
