"""The OpenAI-compatible front, with the official ``openai`` SDK as the client, against the real services.

agent-service, completion-service and mcp-client-service run on loopback; the tools are a real MCP
server (the echo server, over streamable HTTP). The LLM is ``demo`` or a scripted server speaking
OpenAI's Chat Completions wire format.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam

from completion_service.app import create_app as create_completion_app
from completion_service.settings import DEFAULT_OPENAI_BASE_URL, CompletionSettings
from support import fake_openai
from support.fake_openai import ScriptedOpenAI
from support.mcp_gateway import running_gateway
from support.servers import serve_app
from support.stacks import running_agent, running_upstreams

pytestmark = pytest.mark.anyio

WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city, from the client's own service.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@dataclass
class Stack:
    agent_url: str
    """agent-service over the echo tools; models ``demo`` and, through the scripted LLM, any other name."""
    limited_url: str
    """The same services, with AGENT_MAX_ITERATIONS=2 and AGENT_OPENAI_STREAM_MODE=final_only."""
    toolless_url: str
    """agent-service over an mcp-client-service that has no tool."""
    demo_only_url: str
    """agent-service over a completion-service that knows only ``demo``."""
    llm: ScriptedOpenAI
    clients: list[openai.AsyncOpenAI] = field(default_factory=list)
    """Opened by the current test; closed after it, in its event loop."""

    def client(self, url: str | None = None) -> openai.AsyncOpenAI:
        # An open API (no AGENT_CALLERS_FILE, see test_callers.py): any key is accepted. No retries: each test sees
        # the first answer.
        client = openai.AsyncOpenAI(base_url=f"{url or self.agent_url}/v1", api_key="any", max_retries=0)
        self.clients.append(client)
        return client


@pytest.fixture(scope="module")
async def stack() -> AsyncIterator[Stack]:
    demo_only = CompletionSettings(openai_api_key=None, openai_base_url=DEFAULT_OPENAI_BASE_URL)
    limited = {"max_iterations": 2, "openai_stream_mode": "final_only"}
    async with (
        running_upstreams(echo={"echo": ""}) as upstreams,
        running_gateway({}) as empty_gateway,
        serve_app(create_completion_app(demo_only)) as demo_completion_url,
        running_agent(upstreams.completion_url, upstreams.gateway) as agent_url,
        running_agent(upstreams.completion_url, upstreams.gateway, **limited) as limited_url,
        running_agent(upstreams.completion_url, empty_gateway) as toolless_url,
        running_agent(demo_completion_url, upstreams.gateway) as demo_only_url,
    ):
        yield Stack(agent_url, limited_url, toolless_url, demo_only_url, upstreams.llm)


@pytest.fixture
async def fresh(stack: Stack) -> AsyncIterator[Stack]:
    stack.llm.requests.clear()
    yield stack
    for client in stack.clients:
        await client.close()
    stack.clients.clear()


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def echo_then_answer(answer: str) -> list[fake_openai.Reply]:
    return [fake_openai.tool_calls(("call_echo", "echo", {"text": "ping"})), fake_openai.text(answer)]


async def test_a_non_streamed_request_runs_the_tools_and_answers_with_a_chat_completion(fresh: Stack) -> None:
    fresh.llm.push(*echo_then_answer("The echo said ping."))
    completion = await fresh.client().chat.completions.create(model="gpt-4o", messages=user("echo ping"))
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    [choice] = completion.choices
    assert choice.message.content == "The echo said ping."
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    # The tool ran on the server side: its result went back to the model.
    second = fresh.llm.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    assert second[2] == {"role": "tool", "tool_call_id": "call_echo", "content": "ping"}
    # Usage is the sum over both LLM calls.
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 6 + 15  # the fake counts words, plus 4 per message
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    agent = (completion.model_extra or {})["agent"]
    assert (agent["finish_reason"], agent["iterations"]) == ("stop", 2)
    assert agent["run_id"].startswith("run_")


async def test_a_streamed_request_streams_the_answer_live_with_usage(fresh: Stack) -> None:
    fresh.llm.push(*echo_then_answer("The echo said ping, and nothing else."))
    stream = await fresh.client().chat.completions.create(
        model="gpt-4o", messages=user("echo ping"), stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(texts) == "The echo said ping, and nothing else."
    assert len(texts) > 1  # as the model generated it, not in one piece
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 6 + 15
    assert fresh.llm.requests[1]["stream"] is True


async def test_the_demo_model_runs_a_real_tool_streamed_or_not(fresh: Stack) -> None:
    client = fresh.client()
    completion = await client.chat.completions.create(model="demo", messages=user("Please echo this sentence"))
    content = completion.choices[0].message.content or ""
    assert "echo" in content
    assert (completion.model_extra or {})["agent"]["iterations"] == 2
    stream = await client.chat.completions.create(model="demo", messages=user("Please echo this sentence"), stream=True)
    streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert streamed == content


async def test_a_client_side_tool_call_is_handed_back_and_the_conversation_continues(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.tool_calls(("call_w", "get_weather", {"city": "Paris"})))
    client = fresh.client()
    messages: list[Any] = user("Weather in Paris?")
    completion = await client.chat.completions.create(model="gpt-4o", messages=messages, tools=[WEATHER_TOOL])
    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_w",
        "get_weather",
        {"city": "Paris"},
    )
    # The model was offered both the suite's tools and the client's.
    offered = {tool["function"]["name"] for tool in fresh.llm.requests[0]["tools"]}
    assert {"get_weather", "echo"} <= offered
    # The client runs it and continues, as with OpenAI.
    fresh.llm.push(fake_openai.text("Sunny in Paris."))
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 24 C"},
    ]
    followed = await client.chat.completions.create(model="gpt-4o", messages=messages, tools=[WEATHER_TOOL])
    assert followed.choices[0].message.content == "Sunny in Paris."
    replayed = fresh.llm.requests[1]["messages"]
    assert replayed[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert replayed[2] == {"role": "tool", "tool_call_id": "call_w", "content": "sunny, 24 C"}


async def test_a_streamed_client_side_tool_call_arrives_as_tool_call_deltas(fresh: Stack) -> None:
    fresh.llm.push(
        fake_openai.tool_calls(("call_e", "echo", {"text": "x"}), ("call_w", "get_weather", {"city": "Oslo"}))
    )
    stream = await fresh.client().chat.completions.create(
        model="gpt-4o", messages=user("Weather in Oslo?"), tools=[WEATHER_TOOL], stream=True
    )
    chunks = [chunk async for chunk in stream]
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    # Only the client's call comes back; the suite's call of the same turn is not run.
    assert [(call.id, call.function and call.function.name) for call in calls] == [("call_w", "get_weather")]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert len(fresh.llm.requests) == 1


async def test_the_opt_out_header_sends_one_plain_completion(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.text("Plain."))
    raw = await fresh.client().chat.completions.with_raw_response.create(
        model="gpt-4o", messages=user("echo ping"), extra_headers={"X-Agent-Disabled": "Yes"}
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "Plain."
    assert "tools" not in fresh.llm.requests[0]  # none of the suite's tools offered
    assert "x-agent-run-id" not in raw.headers
    assert (completion.model_extra or {})["agent"] == {"finish_reason": "stop", "iterations": 1}  # no run


async def test_without_available_tools_a_request_is_one_completion_with_the_clients_tools(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.tool_calls(("call_w", "get_weather", {"city": "Rome"})))
    completion = await fresh.client(fresh.toolless_url).chat.completions.create(
        model="gpt-4o", messages=user("Weather in Rome?"), tools=[WEATHER_TOOL]
    )
    assert completion.choices[0].finish_reason == "tool_calls"
    assert [t["function"]["name"] for t in fresh.llm.requests[0]["tools"]] == ["get_weather"]
    assert "run_id" not in (completion.model_extra or {})["agent"]


async def test_final_only_sends_the_final_message_in_pieces_of_at_most_64_bytes(fresh: Stack) -> None:
    text = "Grüße aus Köln — 東京の天気は晴れ 🌤️, naïve café. " * 4
    fresh.llm.push(*echo_then_answer(text.strip()))
    stream = await fresh.client().chat.completions.create(
        model="gpt-4o",
        messages=user("echo ping"),
        stream=True,
        extra_headers={"X-Agent-Stream-Mode": "final_only"},
    )
    pieces = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == text.strip()
    assert all(len(piece.encode()) <= 64 for piece in pieces)
    assert len(pieces) >= len(text.strip().encode()) // 64
    assert fresh.llm.requests[1]["stream"] is False  # the run did not ask for a stream it would not forward


async def test_stream_mode_disabled_answers_one_json_object_even_when_a_stream_was_asked(fresh: Stack) -> None:
    fresh.llm.push(*echo_then_answer("One object."))
    raw = await fresh.client().chat.completions.with_raw_response.create(
        model="gpt-4o", messages=user("echo ping"), stream=True, extra_headers={"X-Agent-Stream-Mode": "disabled"}
    )
    assert raw.headers["content-type"] == "application/json"
    body = json.loads(await raw.http_response.aread())
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "One object."


async def test_the_stream_mode_setting_applies_unless_a_request_overrides_it(fresh: Stack) -> None:
    text = "A final answer long enough to need two pieces of sixty-four bytes at the most each."
    fresh.llm.push(fake_openai.text(text), fake_openai.text(text))
    client = fresh.client(fresh.limited_url)
    stream = await client.chat.completions.create(model="gpt-4o", messages=user("hi"), stream=True)
    pieces = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    assert [len(p.encode()) for p in pieces] == [64, len(text) - 64]
    stream = await client.chat.completions.create(
        model="gpt-4o", messages=user("hi"), stream=True, extra_headers={"X-Agent-Stream-Mode": "live"}
    )
    pieces = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == text
    assert len(pieces) == len(text.split())  # word by word, as the scripted model streams


async def test_a_run_that_reaches_its_limit_ends_with_length_and_the_partial_answer(fresh: Stack) -> None:
    fresh.llm.push(
        fake_openai.raw(json.dumps(_text_and_tool_call("Looking it up.", "call_1")).encode()),
        fake_openai.tool_calls(("call_2", "echo", {"text": "b"})),
    )
    completion = await fresh.client(fresh.limited_url).chat.completions.create(
        model="gpt-4o", messages=user("echo forever")
    )
    [choice] = completion.choices
    assert choice.finish_reason == "length"
    agent = (completion.model_extra or {})["agent"]
    assert (agent["finish_reason"], agent["iterations"]) == ("max_iterations", 2)
    assert choice.message.content == "Looking it up."  # what the run said before the limit
    assert len(fresh.llm.requests) == 2


def _text_and_tool_call(text: str, call_id: str) -> dict[str, Any]:
    """A non-streamed OpenAI completion whose message has both text and a call of ``echo``."""
    call = {"id": call_id, "type": "function", "function": {"name": "echo", "arguments": '{"text": "a"}'}}
    return {
        "id": "chatcmpl-mixed",
        "object": "chat.completion",
        "created": fake_openai.CREATED,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


async def test_the_events_header_adds_the_runs_tool_events_as_frames_clients_skip(fresh: Stack) -> None:
    fresh.llm.push(*echo_then_answer("Done."))
    stream = await fresh.client().chat.completions.create(
        model="gpt-4o", messages=user("echo ping"), stream=True, extra_headers={"X-Agent-Events": "true"}
    )
    chunks = [chunk async for chunk in stream]
    events = [(c.model_extra or {}).get("agent_event") for c in chunks if not c.choices]
    assert [event["type"] for event in events if event] == ["tool_call", "tool_result"]
    call, result = (event for event in events if event)
    assert (call["name"], call["arguments"], call["id"]) == ("echo", {"text": "ping"}, "call_echo")
    assert (result["toolCallId"], result["content"], result["isError"]) == ("call_echo", "ping", False)
    assert call["runId"] == result["runId"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Done."


async def test_without_the_events_header_no_extra_frame_is_sent(fresh: Stack) -> None:
    fresh.llm.push(*echo_then_answer("Done."))
    stream = await fresh.client().chat.completions.create(model="gpt-4o", messages=user("echo ping"), stream=True)
    assert all(chunk.choices for chunk in [chunk async for chunk in stream])


# --- errors: the SDK's own exception classes ----------------------------------------------------------


async def test_a_bad_request_is_a_bad_request_error_in_openais_shape(fresh: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await fresh.client().chat.completions.create(model="gpt-4o", messages=[])
    assert raised.value.status_code == 400
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["type"] == "invalid_request_error"
    assert "messages" in raised.value.body["message"]


async def test_a_model_name_over_the_bound_is_a_bad_request_error_not_a_server_error(fresh: Stack) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await fresh.client().chat.completions.create(model="m" * 70_000, messages=user("hi"))
    assert isinstance(raised.value.body, dict)
    assert "at most 256 characters" in raised.value.body["message"]
    assert len(raised.value.body["message"]) < 1_000


async def test_an_unknown_model_is_a_not_found_error(fresh: Stack) -> None:
    for stream in (False, True):
        with pytest.raises(openai.NotFoundError) as raised:
            await fresh.client(fresh.demo_only_url).chat.completions.create(
                model="gpt-4o", messages=user("hi"), stream=stream
            )
        assert isinstance(raised.value.body, dict)
        assert raised.value.body["code"] == "model_not_found"
        assert "demo" in raised.value.body["message"]


async def test_a_rate_limited_model_is_a_rate_limit_error_with_its_retry_after(fresh: Stack) -> None:
    for stream in (False, True):
        fresh.llm.push(fake_openai.error(429, headers={"Retry-After": "7"}))
        with pytest.raises(openai.RateLimitError) as raised:
            await fresh.client().chat.completions.create(model="gpt-4o", messages=user("hi"), stream=stream)
        assert raised.value.response.headers["retry-after"] == "7"
        assert isinstance(raised.value.body, dict)
        assert raised.value.body["type"] == "rate_limit_error"


async def test_a_failing_model_is_an_internal_server_error_with_status_503(fresh: Stack) -> None:
    for stream in (False, True):
        fresh.llm.push(fake_openai.error(500))
        with pytest.raises(openai.InternalServerError) as raised:
            await fresh.client().chat.completions.create(model="gpt-4o", messages=user("hi"), stream=stream)
        assert raised.value.status_code == 503
        assert isinstance(raised.value.body, dict)
        assert raised.value.body["type"] == "server_error"


async def test_a_failure_after_the_stream_started_is_an_error_frame_the_sdk_raises(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.tool_calls(("call_echo", "echo", {"text": "ping"})), fake_openai.error(500))
    stream = await fresh.client().chat.completions.create(model="gpt-4o", messages=user("echo ping"), stream=True)
    with pytest.raises(openai.APIError) as raised:
        async for _ in stream:
            pass
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["code"] == "upstream_unavailable"


async def test_models_lists_what_completion_service_routes(fresh: Stack) -> None:
    page = await fresh.client(fresh.demo_only_url).models.list()
    assert [(model.id, model.object) for model in page.data] == [("demo", "model")]


async def test_other_openai_endpoints_are_not_found_in_openais_shape(fresh: Stack) -> None:
    with pytest.raises(openai.NotFoundError):
        await fresh.client().embeddings.create(model="demo", input="hi")


async def test_invalid_agent_headers_are_a_400(fresh: Stack) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        for header, value in (("X-Agent-Stream-Mode", "sometimes"), ("X-Agent-Disabled", "maybe")):
            response = await http.post(
                f"{fresh.agent_url}/v1/chat/completions",
                json={"model": "gpt-4o", "messages": user("hi")},
                headers={header: value},
            )
            assert response.status_code == 400
            assert header in response.json()["error"]["message"]
    assert fresh.llm.requests == []


async def test_a_run_names_itself_in_a_header_and_in_the_agent_field(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.text("Hi."))
    raw = await fresh.client().chat.completions.with_raw_response.create(model="gpt-4o", messages=user("hi"))
    completion = raw.parse()
    run_id = raw.headers["x-agent-run-id"]
    assert (completion.model_extra or {})["agent"]["run_id"] == run_id
    assert completion.id == "chatcmpl-" + run_id.removeprefix("run_")
