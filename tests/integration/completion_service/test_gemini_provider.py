"""completion-service served for real, routing ``gemini/...`` and ``vertex/...`` to a scripted server
that speaks the Gemini API and Vertex AI wire formats."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from completion_service.app import create_app
from completion_service.settings import CompletionSettings
from support.fake_gemini import (
    ScriptedGemini,
    blocked,
    error,
    function_calls,
    json_even_when_streamed,
    raw,
    retry_info,
    text,
)
from support.servers import serve_app

pytestmark = pytest.mark.anyio

MODEL = "gemini/gemini-2.5-flash"
USER = [{"role": "user", "content": "How does the agent loop stop?"}]
SEARCH = {
    "name": "search_documents",
    "description": "Search the documents.",
    "inputSchema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "top_k": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}
WEB = {
    "name": "web_search",
    "description": "Search the web.",
    "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}


@asynccontextmanager
async def completion_service(
    fake: ScriptedGemini, *, api_key: str | None = None, **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The service with its Gemini API (and, given ``vertex_*`` settings, Vertex AI) pointed at ``fake``."""
    async with serve_app(fake.app) as upstream:
        configured: dict[str, Any] = {
            "gemini_api_key": api_key or fake.api_key,
            "gemini_base_url": upstream,
            "demo_enabled": False,
        }
        if "vertex_project" in settings:
            configured["vertex_base_url"] = upstream
        app = create_app(CompletionSettings(**{**configured, **settings}))
        async with serve_app(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": USER, **fields}


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


async def test_the_models_route_to_the_gemini_and_vertex_providers() -> None:
    async with completion_service(ScriptedGemini(), vertex_project="my-project", vertex_access_token="t") as client:
        gemini = await client.get(f"/api/v1/models/{MODEL}")
        vertex = await client.get("/api/v1/models/vertex/gemini-2.5-pro")
    known = {"contextTokens": 1_048_576, "images": True}
    assert gemini.json() == {"id": MODEL, "provider": "gemini", "upstreamModel": "gemini-2.5-flash", **known}
    assert vertex.json() == {
        "id": "vertex/gemini-2.5-pro",
        "provider": "vertex",
        "upstreamModel": "gemini-2.5-pro",
        **known,
    }


async def test_a_text_answer_comes_back_whole() -> None:
    fake = ScriptedGemini([text("The loop stops after 15 iterations.")])
    async with completion_service(fake) as client:
        response = await client.post(
            "/api/v1/completions",
            json=_body(messages=[{"role": "system", "content": "Be brief."}, *USER], maxTokens=100, temperature=0),
        )
    assert response.status_code == 200
    assert response.json() == {
        "message": {"role": "assistant", "content": "The loop stops after 15 iterations."},
        "finishReason": "stop",
        "usage": {"inputTokens": 12, "outputTokens": 6},  # as the scripted server counted them
        "model": MODEL,
        "provider": "gemini",
    }
    [sent] = fake.requests
    assert (sent.api, sent.model, sent.method) == ("gemini", "gemini-2.5-flash", "generateContent")
    assert sent.headers["x-goog-api-key"] == fake.api_key
    assert sent.body == {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [{"role": "user", "parts": [{"text": "How does the agent loop stop?"}]}],
        "generationConfig": {"maxOutputTokens": 100, "temperature": 0.0},
    }


async def test_a_text_answer_streams_as_several_deltas_then_done() -> None:
    fake = ScriptedGemini([text("The loop stops after 15 iterations.", signature="sig-text")])
    async with completion_service(fake) as client:
        response, events = await _stream(client, _body())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    deltas = [event["delta"] for event in events if event["type"] == "text"]
    assert len(deltas) > 1
    assert "".join(deltas) == "The loop stops after 15 iterations."
    # The answer's signature, to send back on the next turn.
    assert events[-2] == {
        "type": "reasoning_block",
        "block": {"text": "", "signature": "sig-text", "provider": "gemini"},
    }
    assert events[-1] == {
        "type": "done",
        "finishReason": "stop",
        "usage": {"inputTokens": 8, "outputTokens": 6},
        "model": MODEL,
        "provider": "gemini",
    }
    [sent] = fake.requests
    assert (sent.method, sent.query) == ("streamGenerateContent", {"alt": "sse"})


@pytest.mark.parametrize("stream", [False, True])
async def test_one_tool_call_comes_back_with_its_arguments_and_signature(stream: bool) -> None:
    fake = ScriptedGemini([function_calls(("search_documents", {"query": "loop stop"}), with_ids=True)])
    async with completion_service(fake) as client:
        body = _body(tools=[SEARCH])
        if stream:
            response, events = await _stream(client, body)
            calls = [{k: v for k, v in e.items() if k != "type"} for e in events if e["type"] == "tool_call"]
            finish = events[-1]["finishReason"]
        else:
            response = await client.post("/api/v1/completions", json=body)
            calls, finish = response.json()["message"]["toolCalls"], response.json()["finishReason"]
    assert response.status_code == 200
    assert calls == [
        {
            "id": "fc-resp-1-0",
            "name": "search_documents",
            "arguments": {"query": "loop stop"},
            "signature": "sig-resp-1",
        }
    ]
    assert finish == "tool_calls"
    declaration = fake.requests[0].body["tools"][0]["functionDeclarations"][0]
    # The scripted server refuses what Gemini refuses ($schema, additionalProperties, anyOf with null).
    assert declaration["parameters"] == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "nullable": True}},
        "required": ["query"],
    }
    assert fake.requests[0].body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


@pytest.mark.parametrize("stream", [False, True])
async def test_parallel_tool_calls_without_ids_come_back_in_order_with_ids_of_their_own(stream: bool) -> None:
    long_query = "how does the agent loop stop when the deadline passes"
    fake = ScriptedGemini(
        [
            function_calls(
                ("search_documents", {"query": long_query, "top_k": 3}),
                ("web_search", {"query": "agent loop deadline"}),
                text="Searching both.",
            )
        ]
    )
    async with completion_service(fake) as client:
        body = _body(tools=[SEARCH, WEB], toolChoice="required")
        if stream:
            response, events = await _stream(client, body)
            calls = [{k: v for k, v in e.items() if k != "type"} for e in events if e["type"] == "tool_call"]
            text_so_far = "".join(e["delta"] for e in events if e["type"] == "text")
            assert [e["type"] for e in events][-3:] == ["tool_call", "tool_call", "done"]
        else:
            response = await client.post("/api/v1/completions", json=body)
            calls, text_so_far = response.json()["message"]["toolCalls"], response.json()["message"]["content"]
    assert response.status_code == 200
    assert text_so_far == "Searching both."
    assert calls == [
        {
            "id": "call_resp-1_0",
            "name": "search_documents",
            "arguments": {"query": long_query, "top_k": 3},
            "signature": "sig-resp-1",
        },
        {"id": "call_resp-1_1", "name": "web_search", "arguments": {"query": "agent loop deadline"}},
    ]
    assert fake.requests[0].body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_result_turn_sends_back_the_calls_with_their_signature_and_the_results_in_order(
    stream: bool,
) -> None:
    fake = ScriptedGemini(
        [
            function_calls(("search_documents", {"query": "deadline"}), ("web_search", {"query": "deadline"})),
            text("The run stops at its deadline."),
        ]
    )
    async with completion_service(fake) as client:
        first = await client.post("/api/v1/completions", json=_body(tools=[SEARCH, WEB]))
        assistant = first.json()["message"]
        calls = assistant["toolCalls"]
        conversation = [
            *USER,
            assistant,
            # Results in another order than the calls, one of them a failure.
            {
                "role": "tool",
                "toolCallId": calls[1]["id"],
                "content": "HTTP 500 from the search engine",
                "isError": True,
            },
            {"role": "tool", "toolCallId": calls[0]["id"], "content": "deadlines.md: it stops at 120 s."},
        ]
        if stream:
            response, events = await _stream(client, _body(tools=[SEARCH, WEB], messages=conversation))
            answer = "".join(e["delta"] for e in events if e["type"] == "text")
        else:
            response = await client.post("/api/v1/completions", json=_body(tools=[SEARCH, WEB], messages=conversation))
            answer = response.json()["message"]["content"]
    assert response.status_code == 200, response.text
    assert answer == "The run stops at its deadline."
    contents = fake.requests[1].body["contents"]
    assert contents[1:] == [
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "search_documents", "args": {"query": "deadline"}, "id": calls[0]["id"]},
                    "thoughtSignature": "sig-resp-1",
                },
                {"functionCall": {"name": "web_search", "args": {"query": "deadline"}, "id": calls[1]["id"]}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "search_documents",
                        "response": {"result": "deadlines.md: it stops at 120 s."},
                        "id": calls[0]["id"],
                    }
                },
                {
                    "functionResponse": {
                        "name": "web_search",
                        "response": {"error": "HTTP 500 from the search engine"},
                        "id": calls[1]["id"],
                    }
                },
            ],
        },
    ]


async def test_calls_that_lost_their_signature_are_still_accepted_by_a_gemini_3_style_server() -> None:
    fake = ScriptedGemini([text("Done.")])
    conversation = [
        *USER,
        {
            "role": "assistant",
            "toolCalls": [{"id": "call_from_openai", "name": "web_search", "arguments": {"query": "x"}}],
        },
        {"role": "tool", "toolCallId": "call_from_openai", "content": "results"},
    ]
    async with completion_service(fake) as client:
        response = await client.post("/api/v1/completions", json=_body(tools=[WEB], messages=conversation))
    assert response.status_code == 200, response.text
    assert fake.requests[0].body["contents"][1]["parts"][0]["thoughtSignature"] == "skip_thought_signature_validator"


async def test_thought_summaries_stream_as_reasoning_when_asked_for() -> None:
    fake = ScriptedGemini([text("It stops at 15.", thought="**Checking** the iteration cap.")])
    async with completion_service(fake, gemini_include_thoughts=True) as client:
        response, events = await _stream(client, _body())
    assert response.status_code == 200
    assert fake.requests[0].body["generationConfig"] == {"thinkingConfig": {"includeThoughts": True}}
    reasoning = [e["delta"] for e in events if e["type"] == "reasoning"]
    assert "".join(reasoning) == "**Checking** the iteration cap."
    assert {
        "type": "reasoning_block",
        "block": {"text": "**Checking** the iteration cap.", "provider": "gemini"},
    } in events
    assert "".join(e["delta"] for e in events if e["type"] == "text") == "It stops at 15."


async def test_thought_summaries_are_not_asked_for_by_default() -> None:
    fake = ScriptedGemini([text("It stops at 15.", thought="**Checking** the iteration cap.")])
    async with completion_service(fake) as client:
        response, events = await _stream(client, _body())
    assert response.status_code == 200
    assert "generationConfig" not in fake.requests[0].body
    assert [e for e in events if e["type"] in ("reasoning", "reasoning_block")] == []


@pytest.mark.parametrize("stream", [False, True])
async def test_a_blocked_prompt_is_an_empty_content_filter_answer(stream: bool) -> None:
    fake = ScriptedGemini([blocked("PROHIBITED_CONTENT")])
    async with completion_service(fake) as client:
        if stream:
            response, events = await _stream(client, _body())
            assert [e["type"] for e in events] == ["done"]
            finish = events[0]["finishReason"]
        else:
            response = await client.post("/api/v1/completions", json=_body())
            assert response.json()["message"] == {"role": "assistant"}
            finish = response.json()["finishReason"]
    assert response.status_code == 200
    assert finish == "content_filter"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_429_with_retry_after_is_retried_and_then_succeeds(stream: bool) -> None:
    limited = error(429, None, retry_info("0s"), headers={"Retry-After": "0"})
    fake = ScriptedGemini([limited, text("Second time lucky.")])
    async with completion_service(fake) as client:
        with anyio.fail_after(5):
            if stream:
                response, events = await _stream(client, _body())
                answer = "".join(e["delta"] for e in events if e["type"] == "text")
            else:
                response = await client.post("/api/v1/completions", json=_body())
                answer = response.json()["message"]["content"]
    assert response.status_code == 200
    assert answer == "Second time lucky."
    assert len(fake.requests) == 2


async def test_a_429_whose_retry_info_asks_for_a_long_wait_reaches_the_caller_with_that_retry_after() -> None:
    fake = ScriptedGemini([error(429, None, retry_info("59.2s"))])
    async with completion_service(fake, max_retries=0) as client:
        response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert response.headers["retry-after"] == "60"


@pytest.mark.parametrize("stream", [False, True])
async def test_an_overloaded_model_is_retried_twice_and_then_answers(stream: bool) -> None:
    fake = ScriptedGemini([error(503), error(503), text("Finally.")])
    async with completion_service(fake, max_retries=2) as client:
        with anyio.fail_after(10):
            if stream:
                response, events = await _stream(client, _body())
                answer = "".join(e["delta"] for e in events if e["type"] == "text")
            else:
                response = await client.post("/api/v1/completions", json=_body())
                answer = response.json()["message"]["content"]
    assert response.status_code == 200
    assert answer == "Finally."
    assert len(fake.requests) == 3


async def test_an_overloaded_model_that_stays_so_is_a_retryable_503() -> None:
    fake = ScriptedGemini([error(503), error(503)])
    async with completion_service(fake, max_retries=1) as client:
        response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "overloaded"
    assert len(fake.requests) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_a_wrong_api_key_is_a_502_auth_failed_that_never_shows_the_key(stream: bool) -> None:
    fake = ScriptedGemini([text("never")])
    async with completion_service(fake, api_key="AIza-wrong-and-secret") as client:
        response = await client.post("/api/v1/completions", json=_body(stream=stream))
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == "auth_failed"
    assert "COMPLETION_GEMINI_API_KEY" in response.json()["error"]["message"]
    assert "AIza-wrong-and-secret" not in response.text
    assert len(fake.requests) == 1  # never retried


@pytest.mark.parametrize("stream", [False, True])
async def test_a_401_from_vertex_is_a_502_auth_failed_without_retry(stream: bool) -> None:
    fake = ScriptedGemini([text("never")], vertex_token="ya29.the-right-token")
    async with completion_service(
        fake, vertex_project="my-project", vertex_location="us-central1", vertex_access_token="ya29.expired"
    ) as client:
        response = await client.post("/api/v1/completions", json=_body(model="vertex/gemini-2.5-pro", stream=stream))
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "auth_failed"
    assert "COMPLETION_VERTEX_ACCESS_TOKEN" in response.json()["error"]["message"]
    assert "ya29" not in response.text
    assert len(fake.requests) == 1


async def test_vertex_rereads_its_token_file_at_every_call(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("ya29.first\n")
    fake = ScriptedGemini([text("One."), text("Two.")], vertex_token="ya29.first")
    async with completion_service(
        fake, vertex_project="my-project", vertex_location="europe-west4", vertex_access_token_file=token_file
    ) as client:
        first = await client.post("/api/v1/completions", json=_body(model="vertex/gemini-2.5-pro"))
        token_file.write_text("ya29.second\n")  # what a token refresher does
        fake.vertex_token = "ya29.second"
        second = await client.post("/api/v1/completions", json=_body(model="vertex/gemini-2.5-pro", stream=True))
    assert first.status_code == 200
    assert first.json()["provider"] == "vertex"
    assert first.json()["model"] == "vertex/gemini-2.5-pro"
    assert second.status_code == 200
    assert [(r.api, r.project, r.location, r.model, r.headers["authorization"]) for r in fake.requests] == [
        ("vertex", "my-project", "europe-west4", "gemini-2.5-pro", "Bearer ya29.first"),
        ("vertex", "my-project", "europe-west4", "gemini-2.5-pro", "Bearer ya29.second"),
    ]


@pytest.mark.parametrize(
    "reply",
    [
        raw(b'{"modelVersion": "gemini-2.5-flash", "responseId": "x"}'),
        raw(b'{"candidates": [{"content": {"parts": "text"}}]}'),
        raw(b"<html>gateway</html>", content_type="text/html"),
    ],
)
async def test_an_upstream_body_that_is_not_a_generate_content_response_is_a_502(reply: Any) -> None:
    async with completion_service(ScriptedGemini([reply])) as client:
        response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "bad_upstream_response"


async def test_a_stream_that_breaks_after_the_first_event_ends_with_an_error_event() -> None:
    chunk = {"candidates": [{"content": {"parts": [{"text": "It"}], "role": "model"}, "index": 0}]}
    cut_short = raw(
        f"data: {json.dumps(chunk)}\r\n\r\ndata: {{not json\r\n\r\n".encode(), content_type="text/event-stream"
    )
    async with completion_service(ScriptedGemini([cut_short])) as client:
        response, events = await _stream(client, _body())
    assert response.status_code == 200
    assert events[0] == {"type": "text", "delta": "It"}
    assert events[-1]["type"] == "error"
    assert events[-1]["code"] == "bad_upstream_response"


async def test_a_malformed_function_call_is_a_502_the_caller_may_retry() -> None:
    broken = raw(
        json.dumps(
            {
                "candidates": [
                    {
                        "finishReason": "MALFORMED_FUNCTION_CALL",
                        "finishMessage": "Malformed function call: print(default_api.web_search(query=",
                        "index": 0,
                    }
                ],
                "usageMetadata": {"promptTokenCount": 20, "totalTokenCount": 20},
            }
        ).encode()
    )
    async with completion_service(ScriptedGemini([broken])) as client:
        response = await client.post("/api/v1/completions", json=_body(tools=[WEB]))
    assert response.status_code == 502
    assert "MALFORMED_FUNCTION_CALL" in response.json()["error"]["message"]


@pytest.mark.parametrize("as_array", [False, True])
async def test_a_stream_answered_with_json_becomes_the_events_of_that_answer(as_array: bool) -> None:
    fake = ScriptedGemini(
        [
            json_even_when_streamed(
                function_calls(("search_documents", {"query": "stop"}), text="Let me look."), as_array=as_array
            )
        ]
    )
    async with completion_service(fake) as client:
        response, events = await _stream(client, _body(tools=[SEARCH]))
    assert response.status_code == 200
    assert fake.requests[0].method == "streamGenerateContent"
    assert [e["type"] for e in events] == ["text", "tool_call", "done"]
    assert events[0]["delta"] == "Let me look."
    assert (events[1]["name"], events[1]["arguments"]) == ("search_documents", {"query": "stop"})
    assert events[2]["finishReason"] == "tool_calls"


# --- generation controls -------------------------------------------------------------------------

THOUGHT = "The docs say the loop has an iteration cap."


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("summary", ["auto", "none"])
async def test_an_effort_becomes_a_thinking_budget_and_the_thoughts_are_counted_as_reasoning_tokens(
    stream: bool, summary: str
) -> None:
    fake = ScriptedGemini([text("After 15 iterations.", thought=THOUGHT)])
    body = _body(reasoning={"effort": "low", "summary": summary}, maxTokens=200)
    async with completion_service(fake) as client:
        if stream:
            response, events = await _stream(client, body)
            done = events[-1]
            thoughts = "".join(e["delta"] for e in events if e["type"] == "reasoning")
        else:
            response = await client.post("/api/v1/completions", json=body)
            done = response.json()
            thoughts = "".join(block["text"] for block in done["message"].get("reasoning", []))
    assert response.status_code == 200
    assert fake.requests[0].body["generationConfig"] == {
        "maxOutputTokens": 200 + 2048,
        "thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": summary == "auto"},
    }
    assert thoughts == (THOUGHT if summary == "auto" else "")
    # The model thought either way: its 9 words of thinking are billed, as output, beside the 3 of the answer.
    assert done["usage"] == {"inputTokens": 8, "outputTokens": 3 + 9, "reasoningTokens": 9}
