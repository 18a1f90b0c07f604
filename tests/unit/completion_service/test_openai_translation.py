"""Neutral <-> OpenAI Chat Completions, checked on exact request bodies and realistic responses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from completion_service.providers.openai import (
    StreamAssembler,
    build_request_body,
    parse_response,
    translate_error,
)
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionDone,
    CompletionRequest,
    Message,
    NamedToolChoice,
    ReasoningBlock,
    ReasoningBlockEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    Usage,
)

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5}},
    "required": ["query"],
}

CONVERSATION = [
    Message(role="system", content="You answer from the documents."),
    Message(role="user", content="How does the loop stop?"),
    Message(
        role="assistant",
        content=None,
        tool_calls=[
            ToolCall(id="call_1", name="search_documents", arguments={"query": "loop stop", "top_k": 3}),
            ToolCall(id="call_2", name="web_search", arguments={}, invalid_arguments='{"query": "loop'),
        ],
    ),
    Message(role="tool", tool_call_id="call_1", content="It stops after 15 iterations."),
    Message(role="tool", tool_call_id="call_2", content="Invalid arguments", is_error=True),
]

TOOLS = [
    ToolSpec(name="search_documents", description="Search the docs.", input_schema=SEARCH_SCHEMA),
    ToolSpec(name="web_search", description="Search the web."),
]


def _request(**fields: Any) -> CompletionRequest:
    return CompletionRequest(model="openai/gpt-4o", messages=CONVERSATION, tools=TOOLS, **fields)


def test_a_conversation_with_tool_calls_and_results_becomes_the_exact_chat_completions_body() -> None:
    body = build_request_body(_request(max_tokens=256, temperature=0.2), "gpt-4o", stream=False)
    assert body == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You answer from the documents."},
            {"role": "user", "content": "How does the loop stop?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "search_documents", "arguments": '{"query": "loop stop", "top_k": 3}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        # What the model really wrote is replayed, so it can see its own mistake.
                        "function": {"name": "web_search", "arguments": '{"query": "loop'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "It stops after 15 iterations."},
            {"role": "tool", "tool_call_id": "call_2", "content": "Error: Invalid arguments"},
        ],
        "stream": False,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "search_documents",
                    "description": "Search the docs.",
                    "parameters": SEARCH_SCHEMA,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "web_search",
                    "description": "Search the web.",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        ],
        "tool_choice": "auto",
        "max_tokens": 256,
        "temperature": 0.2,
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (NamedToolChoice(name="web_search"), {"type": "function", "function": {"name": "web_search"}}),
    ],
)
def test_each_tool_choice_has_its_openai_form(choice: ToolChoice, expected: object) -> None:
    assert build_request_body(_request(tool_choice=choice), "gpt-4o", stream=False)["tool_choice"] == expected


def test_without_tools_neither_tools_nor_tool_choice_is_sent() -> None:
    request = CompletionRequest(model="gpt-4o", messages=[Message(role="user", content="hi")], tool_choice="required")
    assert build_request_body(request, "gpt-4o", stream=False) == {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
    }


def test_a_streamed_request_asks_for_usage_in_the_stream() -> None:
    body = build_request_body(_request(), "gpt-4o", stream=True)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "max_tokens" not in body
    assert "temperature" not in body


def _completion(message: dict[str, Any], finish_reason: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "refusal": None, "annotations": [], **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage or {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29},
        "system_fingerprint": "fp_1",
    }


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_a_text_answer_parses_with_its_usage() -> None:
    response = parse_response(_completion({"content": "It stops at 15."}, "stop"), "gpt-4o")
    assert response.message == Message(role="assistant", content="It stops at 15.")
    assert response.finish_reason == "stop"
    assert response.usage == Usage(input_tokens=19, output_tokens=10)
    assert (response.model, response.provider) == ("gpt-4o", "openai")


def test_one_tool_call_parses_with_its_arguments_as_an_object() -> None:
    body = _completion({"content": None, "tool_calls": [_call("call_a", "web_search", '{"query": "x"}')]}, "tool_calls")
    response = parse_response(body, "gpt-4o")
    assert response.finish_reason == "tool_calls"
    assert response.message.content is None
    assert response.message.tool_calls == [ToolCall(id="call_a", name="web_search", arguments={"query": "x"})]


def test_parallel_tool_calls_keep_their_order_and_ids() -> None:
    calls = [_call("call_a", "web_search", '{"query": "a"}'), _call("call_b", "search_documents", '{"query": "b"}')]
    response = parse_response(_completion({"content": None, "tool_calls": calls}, "tool_calls"), "gpt-4o")
    assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls or []] == [
        ("call_a", "web_search", {"query": "a"}),
        ("call_b", "search_documents", {"query": "b"}),
    ]


@pytest.mark.parametrize("raw", ['{"query": "unterminated', "[1, 2]", '"just a string"'])
def test_arguments_that_are_not_a_json_object_are_kept_verbatim_as_invalid(raw: str) -> None:
    body = _completion({"content": None, "tool_calls": [_call("call_a", "web_search", raw)]}, "tool_calls")
    [call] = parse_response(body, "gpt-4o").message.tool_calls or []
    assert call.arguments == {}
    assert call.invalid_arguments == raw


def test_empty_arguments_of_a_tool_without_parameters_are_an_empty_object() -> None:
    body = _completion({"content": None, "tool_calls": [_call("call_a", "now", "")]}, "tool_calls")
    [call] = parse_response(body, "gpt-4o").message.tool_calls or []
    assert (call.arguments, call.invalid_arguments) == ({}, None)


def test_a_length_finish_is_reported_as_length() -> None:
    response = parse_response(_completion({"content": "It stops wh"}, "length"), "gpt-4o")
    assert response.finish_reason == "length"
    assert response.message.content == "It stops wh"


def test_a_content_filter_finish_is_reported_as_such() -> None:
    assert parse_response(_completion({"content": None}, "content_filter"), "m").finish_reason == "content_filter"


@pytest.mark.parametrize(
    "body",
    [[], {"error": "x"}, {"choices": []}, {"choices": [{"index": 0}]}, _completion({"content": 42}, "stop")],
)
def test_a_body_that_is_not_a_chat_completion_is_a_502(body: Any) -> None:
    with pytest.raises(ApiError) as caught:
        parse_response(body, "gpt-4o")
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


# --- streaming ---------------------------------------------------------------------------------


def _chunk(delta: dict[str, Any] | None, finish_reason: str | None = None) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o",
        "choices": choices,
        "usage": None,
    }


def _usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    return {**_chunk(None), "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": 0}}


def _feed_all(chunks: list[dict[str, Any]]) -> list[Any]:
    assembler = StreamAssembler(model="gpt-4o")
    events = [event for chunk in chunks for event in assembler.feed(chunk)]
    return events + assembler.finish()


def test_streamed_text_comes_out_as_deltas_then_done_with_the_usage_of_the_last_chunk() -> None:
    events = _feed_all(
        [
            _chunk({"role": "assistant", "content": "", "refusal": None}),
            _chunk({"content": "It"}),
            _chunk({"content": " stops."}),
            _chunk({}, "stop"),
            _usage_chunk(12, 3),
        ]
    )
    assert events == [
        TextDelta(delta="It"),
        TextDelta(delta=" stops."),
        CompletionDone(
            finish_reason="stop", usage=Usage(input_tokens=12, output_tokens=3), model="gpt-4o", provider="openai"
        ),
    ]


def test_a_streamed_refusal_is_text_after_the_content_of_its_chunk() -> None:
    events = _feed_all([_chunk({"content": "I", "refusal": " can't."}), _chunk({"refusal": " Sorry."}, "stop")])
    assert [event for event in events if isinstance(event, TextDelta)] == [
        TextDelta(delta="I"),
        TextDelta(delta=" can't."),
        TextDelta(delta=" Sorry."),
    ]


def test_a_streamed_delta_of_the_wrong_type_is_a_bad_upstream_response() -> None:
    for delta in ({"content": 3}, {"refusal": ["no"]}, {"reasoning_content": {"a": 1}}):
        with pytest.raises(ApiError) as caught:
            StreamAssembler(model="gpt-4o").feed(_chunk(delta))
        assert caught.value.code == "bad_upstream_response"


def test_a_tool_call_split_across_many_deltas_is_emitted_once_complete() -> None:
    fragments = ['{"que', 'ry": "lo', "op sto", 'p", "top_k"', ": 3}"]
    events = _feed_all(
        [
            _chunk(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "search", "arguments": ""},
                        }
                    ],
                }
            ),
            *[_chunk({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}) for f in fragments],
            _chunk({}, "tool_calls"),
            _usage_chunk(50, 20),
        ]
    )
    assert events == [
        ToolCallEvent(id="call_1", name="search", arguments={"query": "loop stop", "top_k": 3}),
        CompletionDone(
            finish_reason="tool_calls",
            usage=Usage(input_tokens=50, output_tokens=20),
            model="gpt-4o",
            provider="openai",
        ),
    ]


def test_two_parallel_calls_interleaved_by_index_are_assembled_apart() -> None:
    def opening(index: int, call_id: str, name: str) -> dict[str, Any]:
        return {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}

    def args(index: int, fragment: str) -> dict[str, Any]:
        return {"index": index, "function": {"arguments": fragment}}

    events = _feed_all(
        [
            _chunk({"role": "assistant", "tool_calls": [opening(0, "call_a", "web_search")]}),
            _chunk({"tool_calls": [opening(1, "call_b", "search_documents")]}),
            _chunk({"tool_calls": [args(1, '{"query":')]}),
            _chunk({"tool_calls": [args(0, '{"query": "we')]}),
            _chunk({"tool_calls": [args(1, ' "docs"}')]}),
            _chunk({"tool_calls": [args(0, 'b"}')]}),
            _chunk({}, "tool_calls"),
        ]
    )
    assert events[:2] == [
        ToolCallEvent(id="call_a", name="web_search", arguments={"query": "web"}),
        ToolCallEvent(id="call_b", name="search_documents", arguments={"query": "docs"}),
    ]
    assert isinstance(events[2], CompletionDone)
    assert events[2].finish_reason == "tool_calls"
    assert events[2].usage == Usage()  # no usage chunk was sent


def test_streamed_arguments_that_are_not_json_are_kept_as_invalid() -> None:
    events = _feed_all(
        [
            _chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{oops"}}]}),
            _chunk({}, "tool_calls"),
        ]
    )
    assert events[0] == ToolCallEvent(id="c", name="f", arguments={}, invalid_arguments="{oops")


def test_an_error_object_in_the_middle_of_a_stream_is_a_retryable_503() -> None:
    assembler = StreamAssembler(model="gpt-4o")
    assembler.feed(_chunk({"content": "It"}))
    with pytest.raises(ApiError) as caught:
        assembler.feed({"error": {"message": "The server had an error", "type": "server_error"}})
    assert (caught.value.status, caught.value.code, caught.value.retryable) == (503, "upstream_unavailable", True)
    assert "The server had an error" in caught.value.message


# --- errors ------------------------------------------------------------------------------------


def _error_body(message: str, code: str | None = None) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    ).encode()


def test_a_rejected_key_is_a_502_auth_failed_that_never_repeats_the_providers_message() -> None:
    error = translate_error(401, _error_body("Incorrect API key provided: sk-secret"), {}, upstream_model="gpt-4o")
    assert (error.status, error.code) == (502, "auth_failed")
    assert "sk-secret" not in error.message
    assert "COMPLETION_OPENAI_API_KEY" in error.message


def test_a_too_long_conversation_is_a_400_context_length_exceeded_with_the_providers_words() -> None:
    body = _error_body("This model's maximum context length is 128000 tokens.", "context_length_exceeded")
    error = translate_error(400, body, {}, upstream_model="gpt-4o")
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert "128000 tokens" in error.message


def test_other_400s_carry_the_providers_message() -> None:
    error = translate_error(400, _error_body("Invalid 'messages[1].content'"), {}, upstream_model="gpt-4o")
    assert (error.status, error.code) == (400, "invalid_request")
    assert "Invalid 'messages[1].content'" in error.message


def test_an_unknown_upstream_model_is_a_400_model_not_found() -> None:
    error = translate_error(404, b"404 page not found", {}, upstream_model="gpt-9")
    assert (error.status, error.code) == (400, "model_not_found")
    assert "gpt-9" in error.message


def test_a_429_passes_retry_after_on() -> None:
    error = translate_error(429, _error_body("Rate limit reached"), {"retry-after": "7"}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (429, "rate_limited", True)
    assert error.headers == {"Retry-After": "7"}


@pytest.mark.parametrize(
    ("headers", "retry_after"),
    [
        ({"retry-after-ms": "10"}, "1"),
        ({"retry-after-ms": "60000", "retry-after": "60"}, "60"),
        ({"retry-after": "2.5"}, "3"),
        ({"retry-after": "soon"}, None),
    ],
)
def test_the_callers_retry_after_is_whole_seconds_rounded_up(headers: dict[str, str], retry_after: str | None) -> None:
    for status in (429, 503):
        error = translate_error(status, _error_body("Slow down"), headers, upstream_model="m")
        assert error.headers == ({"Retry-After": retry_after} if retry_after else {})


@pytest.mark.parametrize("status", [500, 502])
def test_a_5xx_is_a_retryable_503(status: int) -> None:
    error = translate_error(status, b"<html>oops</html>", {}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (503, "upstream_unavailable", True)


@pytest.mark.parametrize("status", [503, 529])
def test_an_overloaded_provider_is_a_retryable_503(status: int) -> None:
    error = translate_error(status, b"<html>busy</html>", {}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (503, "overloaded", True)


@pytest.mark.parametrize(("status", "code"), [(408, "upstream_timeout"), (504, "upstream_timeout")])
def test_a_provider_timeout_is_a_retryable_504(status: int, code: str) -> None:
    error = translate_error(status, b"", {}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (504, code, True)


def test_a_429_for_a_spent_quota_is_not_retryable() -> None:
    body = json.dumps({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}})
    error = translate_error(429, body.encode(), {"retry-after": "1"}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (429, "quota_exhausted", False)


# --- round trip --------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
_arguments = st.dictionaries(st.text(max_size=10), _json_values, max_size=4)
_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_-]{0,20}", fullmatch=True)
_ids = st.from_regex(r"call_[A-Za-z0-9]{1,12}", fullmatch=True)
_tool_calls = st.lists(st.builds(ToolCall, id=_ids, name=_names, arguments=_arguments), min_size=1, max_size=4)


@st.composite
def _conversations(draw: st.DrawFn) -> list[Message]:
    messages = [Message(role="user", content=draw(st.text(max_size=30)))]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        calls = draw(_tool_calls)
        messages.append(Message(role="assistant", content=draw(st.none() | st.text(max_size=20)), tool_calls=calls))
        messages.extend(
            Message(role="tool", tool_call_id=call.id, content=draw(st.text(max_size=20))) for call in calls
        )
    return messages


@settings(max_examples=60, deadline=None)
@given(_conversations())
def test_tool_calls_survive_the_round_trip_through_the_openai_format(messages: list[Message]) -> None:
    request = CompletionRequest(model="gpt-4o", messages=messages)
    body = json.loads(json.dumps(build_request_body(request, "gpt-4o", stream=False)))  # as sent on the wire
    sent_calls = [call for message in body["messages"] for call in message.get("tool_calls", [])]
    echoed = _completion({"content": None, "tool_calls": sent_calls}, "tool_calls")
    parsed = parse_response(json.loads(json.dumps(echoed)), "gpt-4o").message.tool_calls or []
    original = [call for message in messages for call in message.tool_calls or []]
    assert [(c.id, c.name, c.arguments, c.invalid_arguments) for c in parsed] == [
        (c.id, c.name, c.arguments, None) for c in original
    ]


def test_reasoning_content_of_a_compatible_server_comes_back_as_a_reasoning_block() -> None:
    body = {
        "id": "chatcmpl-r",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "42", "reasoning_content": "6 times 7 is 42."},
                "finish_reason": "stop",
            }
        ],
    }
    response = parse_response(body, "deepseek-reasoner")
    assert response.message.reasoning == [ReasoningBlock(text="6 times 7 is 42.", provider="openai")]
    assert response.message.content == "42"


def test_streamed_reasoning_arrives_as_deltas_then_one_block_before_done() -> None:
    assembler = StreamAssembler(model="qwq")
    events = [
        *assembler.feed(_chunk({"role": "assistant", "reasoning_content": "First, "})),
        *assembler.feed(_chunk({"reasoning": "think."})),  # OpenRouter and Ollama call it "reasoning"
        *assembler.feed(_chunk({"content": "Done."}, "stop")),
        *assembler.finish(),
    ]
    assert [type(event).__name__ for event in events] == [
        "ReasoningDelta",
        "ReasoningDelta",
        "TextDelta",
        "ReasoningBlockEvent",
        "CompletionDone",
    ]
    assert isinstance(events[3], ReasoningBlockEvent)
    assert events[3].block == ReasoningBlock(text="First, think.", provider="openai")


def test_reasoning_is_never_sent_back_to_a_chat_completions_server() -> None:
    thought = ReasoningBlock(text="hidden", provider="openai")
    request = CompletionRequest(
        model="m",
        messages=[
            Message(role="user", content="q"),
            Message(role="assistant", content="a", reasoning=[thought]),
            Message(role="user", content="q2"),
        ],
    )
    body = build_request_body(request, "m", stream=False)
    assert body["messages"][1] == {"role": "assistant", "content": "a"}


@settings(max_examples=60, deadline=None)
@given(_conversations(), st.sampled_from(["auto", "none", "required"]), st.booleans())
def test_any_conversation_becomes_a_request_chat_completions_accepts(
    messages: list[Message], choice: str, stream: bool
) -> None:
    tools = [ToolSpec(name="search", input_schema=SEARCH_SCHEMA)]
    request = CompletionRequest(model="gpt-4o", messages=messages, tools=tools, tool_choice=choice)  # type: ignore[arg-type]
    body = json.loads(json.dumps(build_request_body(request, "gpt-4o", stream=stream)))
    sent = body["messages"]
    assert all(m["role"] in ("system", "user", "assistant", "tool") for m in sent)
    # Each assistant tool call is answered by a tool message right after it, before any other turn.
    for position, message in enumerate(sent):
        ids = [call["id"] for call in message.get("tool_calls", [])]
        answers = [m["tool_call_id"] for m in sent[position + 1 : position + 1 + len(ids)] if m["role"] == "tool"]
        assert answers == ids
        for call in message.get("tool_calls", []):
            assert call["type"] == "function"
            assert isinstance(json.loads(call["function"]["arguments"]), dict)
        if message["role"] == "tool":
            assert isinstance(message["content"], str)
    assert body["tool_choice"] == choice
    assert body.get("stream_options") == ({"include_usage": True} if stream else None)
