"""``response_format`` as each provider takes it, on exact request bodies: OpenAI's ``response_format`` and
Responses' ``text.format``, Gemini's JSON mode, a forced final tool for Anthropic and Bedrock (whose call comes back
as the answer's text), and the demo model's JSON answer."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest

from completion_service.providers import gemini, openai, openai_responses
from completion_service.providers.anthropic import AnthropicProvider
from completion_service.providers.bedrock import BedrockProvider
from completion_service.providers.demo import demo_completion, demo_events
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    JsonSchemaFormat,
    Message,
    NamedToolChoice,
    ResponseFormat,
    TextDelta,
    ToolCallEvent,
    ToolSpec,
)
from support.answer_formats import CITY_SCHEMA, PARIS

pytestmark = pytest.mark.anyio

SCHEMA_FORMAT = ResponseFormat(
    type="json_schema", json_schema=JsonSchemaFormat(name="city_facts", schema=CITY_SCHEMA, strict=True)
)
OBJECT_FORMAT = ResponseFormat(type="json_object")
SEARCH = ToolSpec(name="search", description="Search.", input_schema={"type": "object", "properties": {}})


def _request(response_format: ResponseFormat | None, **fields: Any) -> CompletionRequest:
    return CompletionRequest(
        model="m",
        messages=[Message(role="user", content="Biggest city of France, as JSON")],
        response_format=response_format,
        **fields,
    )


# --- OpenAI, Responses, Gemini: their own JSON modes --------------------------------------------


def test_openai_chat_sends_the_schema_as_response_format_json_schema_with_strict() -> None:
    body = openai.build_request_body(_request(SCHEMA_FORMAT), "gpt-4o", stream=False)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "city_facts", "schema": CITY_SCHEMA, "strict": True},
    }


def test_openai_chat_sends_json_object_and_nothing_for_text() -> None:
    assert openai.build_request_body(_request(OBJECT_FORMAT), "gpt-4o", stream=False)["response_format"] == {
        "type": "json_object"
    }
    assert "response_format" not in openai.build_request_body(
        _request(ResponseFormat(type="text")), "gpt-4o", stream=False
    )


def test_responses_sends_the_schema_flattened_in_text_format_beside_verbosity() -> None:
    body = openai_responses.build_request_body(_request(SCHEMA_FORMAT, verbosity="low"), "gpt-5", stream=False)
    assert body["text"] == {
        "verbosity": "low",
        "format": {"type": "json_schema", "name": "city_facts", "schema": CITY_SCHEMA, "strict": True},
    }
    body = openai_responses.build_request_body(_request(OBJECT_FORMAT), "gpt-5", stream=False)
    assert body["text"] == {"format": {"type": "json_object"}}


def test_gemini_asks_for_json_with_the_schema_as_json_schema() -> None:
    body = gemini.build_request_body(_request(SCHEMA_FORMAT), upstream_model="gemini-2.5-flash")
    assert body["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": CITY_SCHEMA}
    body = gemini.build_request_body(_request(OBJECT_FORMAT), upstream_model="gemini-2.5-flash")
    assert body["generationConfig"] == {"responseMimeType": "application/json"}


def test_gemini_before_3_gets_no_json_mode_beside_function_declarations_gemini_3_does() -> None:
    request = _request(SCHEMA_FORMAT, tools=[SEARCH])
    assert "generationConfig" not in gemini.build_request_body(request, upstream_model="gemini-2.5-pro")
    body = gemini.build_request_body(request, upstream_model="gemini-3-pro-preview")
    assert body["generationConfig"]["responseJsonSchema"] == CITY_SCHEMA


# --- Anthropic and Bedrock: a forced final tool ---------------------------------------------------


class Upstream:
    """Answers each request with the next scripted response, recording what it received."""

    def __init__(self, *responses: httpx.Response) -> None:
        self.responses = list(responses)
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return self.responses.pop(0)

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self), timeout=httpx.Timeout(30, connect=5))


def _anthropic(upstream: Upstream) -> AnthropicProvider:
    return AnthropicProvider(upstream.http(), base_url="https://claude.example", api_key="sk-ant-test")


def _claude_tool_use(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 12},
    }


ANSWER_DESCRIPTION = (
    "Give your final answer by calling this tool: its input is the answer. Call it once you need no other tool."
)


async def test_anthropic_gets_the_schema_as_a_forced_tool_and_its_call_back_as_json_text() -> None:
    upstream = Upstream(httpx.Response(200, json=_claude_tool_use("city_facts", PARIS)))
    response = await _anthropic(upstream).complete(_request(SCHEMA_FORMAT, tools=[SEARCH]), "claude-sonnet-4-5", 5)
    [body] = upstream.bodies
    assert body["tools"] == [
        {"name": "search", "description": "Search.", "input_schema": {"type": "object", "properties": {}}},
        {"name": "city_facts", "description": ANSWER_DESCRIPTION, "input_schema": CITY_SCHEMA},
    ]
    assert body["tool_choice"] == {"type": "any"}
    assert (response.finish_reason, response.message.tool_calls) == ("stop", None)
    assert json.loads(response.message.text or "") == PARIS


async def test_anthropic_calls_of_the_callers_tools_pass_through_unchanged() -> None:
    upstream = Upstream(httpx.Response(200, json=_claude_tool_use("search", {})))
    response = await _anthropic(upstream).complete(_request(SCHEMA_FORMAT, tools=[SEARCH]), "claude-sonnet-4-5", 5)
    assert response.finish_reason == "tool_calls"
    assert [call.name for call in response.message.tool_calls or []] == ["search"]


async def test_anthropic_with_tool_choice_none_is_offered_only_the_answer_tool_by_name() -> None:
    upstream = Upstream(httpx.Response(200, json=_claude_tool_use("json_answer", {"answer": 1})))
    request = _request(OBJECT_FORMAT, tools=[SEARCH], tool_choice="none")
    response = await _anthropic(upstream).complete(request, "claude-sonnet-4-5", 5)
    [body] = upstream.bodies
    assert [tool["name"] for tool in body["tools"]] == ["json_answer"]
    assert body["tools"][0]["input_schema"] == {"type": "object"}
    assert body["tool_choice"] == {"type": "tool", "name": "json_answer"}
    assert response.message.text == '{"answer": 1}'


async def test_a_named_tool_choice_stays_forced_beside_the_answer_tool() -> None:
    upstream = Upstream(httpx.Response(200, json=_claude_tool_use("search", {})))
    request = _request(SCHEMA_FORMAT, tools=[SEARCH], tool_choice=NamedToolChoice(name="search"))
    await _anthropic(upstream).complete(request, "claude-sonnet-4-5", 5)
    assert upstream.bodies[0]["tool_choice"] == {"type": "tool", "name": "search"}


def _sse(*events: dict[str, Any]) -> httpx.Response:
    frames = "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events)
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=frames.encode())


async def test_an_anthropic_stream_gives_the_answer_tool_as_one_text_delta_and_stop() -> None:
    message = {**_claude_tool_use("city_facts", {}), "content": [], "stop_reason": None}
    arguments = json.dumps(PARIS)
    upstream = Upstream(
        _sse(
            {"type": "message_start", "message": message},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "city_facts", "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": arguments},
            },
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}},
            {"type": "message_stop"},
        )
    )
    events: list[CompletionEvent] = [
        event
        async for event in _anthropic(upstream).stream(_request(SCHEMA_FORMAT, stream=True), "claude-sonnet-4-5", 5)
    ]
    assert not any(isinstance(event, ToolCallEvent) for event in events)
    [text] = [event for event in events if isinstance(event, TextDelta)]
    assert json.loads(text.delta) == PARIS
    done = events[-1]
    assert isinstance(done, CompletionDone)
    assert done.finish_reason == "stop"
    assert upstream.bodies[0]["tool_choice"] == {"type": "tool", "name": "city_facts"}


async def test_bedrock_gets_the_schema_as_a_forced_tool_spec_and_its_tool_use_back_as_json_text() -> None:
    answer = PARIS
    converse = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "city_facts", "input": answer}}],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 30, "outputTokens": 12, "totalTokens": 42},
    }
    upstream = Upstream(httpx.Response(200, json=converse))
    provider = BedrockProvider(
        upstream.http(), region="us-east-1", access_key_id="AKIDEXAMPLE", secret_access_key="secret"
    )
    response = await provider.complete(_request(SCHEMA_FORMAT, tools=[SEARCH]), "anthropic.claude-sonnet-4-5", 5)
    [body] = upstream.bodies
    assert body["toolConfig"] == {
        "tools": [
            {"toolSpec": {"name": "search", "description": "Search.", "inputSchema": {"json": SEARCH.input_schema}}},
            {
                "toolSpec": {
                    "name": "city_facts",
                    "description": ANSWER_DESCRIPTION,
                    "inputSchema": {"json": CITY_SCHEMA},
                }
            },
        ],
        "toolChoice": {"any": {}},
    }
    assert (response.finish_reason, json.loads(response.message.text or "")) == ("stop", answer)


# --- the demo model ----------------------------------------------------------------------------------


def test_the_demo_model_answers_a_value_valid_against_the_schema() -> None:
    response = demo_completion(_request(SCHEMA_FORMAT))
    jsonschema.validate(json.loads(response.message.text or ""), CITY_SCHEMA)
    streamed = "".join(event.delta for event in demo_events(_request(SCHEMA_FORMAT)) if isinstance(event, TextDelta))
    assert streamed == response.message.text


def test_the_demo_model_answers_json_object_with_its_text_as_answer() -> None:
    answer = json.loads(demo_completion(_request(OBJECT_FORMAT)).message.text or "")
    assert set(answer) == {"answer"}
    assert "demo model" in answer["answer"]
