"""Neutral conversations to Converse bodies and back, on exact JSON, event-stream frames included."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given, settings
from hypothesis import strategies as st

from completion_service.providers.bedrock import (
    ConverseStreamAssembler,
    build_request_body,
    parse_response,
    translate_error,
    translate_stream_exception,
)
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionDone,
    CompletionRequest,
    Message,
    NamedToolChoice,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
)
from support.fake_bedrock import encode_frame

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
SEARCH = ToolSpec(name="search_documents", description="Search the documents.", input_schema=SCHEMA)


def _request(messages: list[Message], **fields: Any) -> CompletionRequest:
    return CompletionRequest(model="bedrock/m", messages=messages, **fields)


def test_a_conversation_with_a_tool_round_becomes_alternating_converse_turns() -> None:
    request = _request(
        [
            Message(role="system", content="Answer from the documents."),
            Message(role="user", content="What stops a run?"),
            Message(
                role="assistant",
                content="Let me look.",
                tool_calls=[
                    ToolCall(id="t1", name="search_documents", arguments={"query": "stop"}),
                    ToolCall(id="t2", name="search_documents", arguments={"query": "deadline"}),
                ],
            ),
            Message(role="tool", tool_call_id="t1", content="It stops at 15 iterations."),
            Message(role="tool", tool_call_id="t2", content="no index", is_error=True),
            Message(role="user", content="And then?"),
        ],
        tools=[SEARCH],
        max_tokens=256,
        temperature=0.2,
    )
    assert build_request_body(request) == {
        "system": [{"text": "Answer from the documents."}],
        "messages": [
            {"role": "user", "content": [{"text": "What stops a run?"}]},
            {
                "role": "assistant",
                "content": [
                    {"text": "Let me look."},
                    {"toolUse": {"toolUseId": "t1", "name": "search_documents", "input": {"query": "stop"}}},
                    {"toolUse": {"toolUseId": "t2", "name": "search_documents", "input": {"query": "deadline"}}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": "t1",
                            "content": [{"text": "It stops at 15 iterations."}],
                            "status": "success",
                        }
                    },
                    {"toolResult": {"toolUseId": "t2", "content": [{"text": "no index"}], "status": "error"}},
                    {"text": "And then?"},
                ],
            },
        ],
        "inferenceConfig": {"maxTokens": 256, "temperature": 0.2},
        "toolConfig": {
            "tools": [
                {
                    "toolSpec": {
                        "name": "search_documents",
                        "description": "Search the documents.",
                        "inputSchema": {"json": SCHEMA},
                    }
                }
            ]
        },
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", None),
        ("required", {"any": {}}),
        (NamedToolChoice(name="search_documents"), {"tool": {"name": "search_documents"}}),
    ],
)
def test_each_tool_choice_has_its_converse_form(choice: Any, expected: dict[str, Any] | None) -> None:
    body = build_request_body(_request([Message(role="user", content="q")], tools=[SEARCH], tool_choice=choice))
    assert body["toolConfig"].get("toolChoice") == expected


def test_tools_the_history_used_are_declared_even_when_the_request_offers_none() -> None:
    history = [
        Message(role="user", content="q"),
        Message(role="assistant", tool_calls=[ToolCall(id="t1", name="search_documents", arguments={"query": "x"})]),
        Message(role="tool", tool_call_id="t1", content="r"),
        Message(role="user", content="thanks, now answer"),
    ]
    body = build_request_body(_request(history))
    assert body["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "search_documents",
                    "description": "search_documents (used earlier)",
                    "inputSchema": {"json": {"type": "object", "properties": {}}},
                }
            }
        ]
    }


def test_tool_choice_none_leaves_the_tools_out_unless_the_history_uses_them() -> None:
    fresh = build_request_body(_request([Message(role="user", content="q")], tools=[SEARCH], tool_choice="none"))
    assert "toolConfig" not in fresh
    history = [
        Message(role="user", content="q"),
        Message(role="assistant", tool_calls=[ToolCall(id="t1", name="search_documents", arguments={"query": "x"})]),
        Message(role="tool", tool_call_id="t1", content="r"),
    ]
    used = build_request_body(_request(history, tools=[SEARCH], tool_choice="none"))
    assert used["toolConfig"]["tools"][0]["toolSpec"]["name"] == "search_documents"


def test_only_bedrocks_own_signed_reasoning_goes_back_first_in_the_assistant_turn() -> None:
    mine = ReasoningBlock(text="Search first.", signature="sig", provider="bedrock")
    theirs = ReasoningBlock(text="other", signature="x", provider="anthropic")
    history = [
        Message(role="user", content="q"),
        Message(role="assistant", reasoning=[theirs, mine], tool_calls=[ToolCall(id="t1", name="s", arguments={})]),
        Message(role="tool", tool_call_id="t1", content="r"),
    ]
    turn = build_request_body(_request(history))["messages"][1]
    assert turn["content"][0] == {"reasoningContent": {"reasoningText": {"text": "Search first.", "signature": "sig"}}}
    assert len(turn["content"]) == 2


def test_a_conversation_that_opens_with_the_assistant_gets_a_user_turn_first() -> None:
    body = build_request_body(
        _request([Message(role="assistant", content="Hello."), Message(role="user", content="Hi")])
    )
    assert [turn["role"] for turn in body["messages"]] == ["user", "assistant", "user"]


def test_a_converse_response_with_reasoning_and_tool_uses_becomes_the_neutral_answer() -> None:
    body = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "Need docs.", "signature": "c2ln"}}},
                    {"text": "Searching."},
                    {"toolUse": {"toolUseId": "tooluse_1", "name": "search_documents", "input": {"query": "q"}}},
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 30, "outputTokens": 10, "totalTokens": 40, "cacheReadInputTokens": 5},
        "metrics": {"latencyMs": 100},
    }
    response = parse_response(body, "bedrock/m")
    assert response.message.content == "Searching."
    assert response.message.reasoning == [ReasoningBlock(text="Need docs.", signature="c2ln", provider="bedrock")]
    assert response.message.tool_calls == [ToolCall(id="tooluse_1", name="search_documents", arguments={"query": "q"})]
    assert (response.finish_reason, response.usage.input_tokens, response.usage.output_tokens) == ("tool_calls", 35, 10)


@pytest.mark.parametrize(
    ("stop", "finish"),
    [("end_turn", "stop"), ("max_tokens", "length"), ("guardrail_intervened", "content_filter"), ("odd", "stop")],
)
def test_stop_reasons_map_to_neutral_finish_reasons(stop: str, finish: str) -> None:
    body = {"output": {"message": {"role": "assistant", "content": [{"text": "x"}]}}, "stopReason": stop}
    assert parse_response(body, "m").finish_reason == finish


@pytest.mark.parametrize("body", [[], {"output": {}}, {"output": {"message": {"content": "x"}}}])
def test_a_body_that_is_not_a_converse_response_is_a_502(body: Any) -> None:
    with pytest.raises(ApiError) as caught:
        parse_response(body, "m")
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


def _decode(frames: bytes) -> list[tuple[str, Any]]:
    buffer = EventStreamBuffer()
    buffer.add_data(frames)
    return [(str(m.headers[":event-type"]), json.loads(m.payload)) for m in buffer]


def _frame(kind: str, payload: dict[str, Any]) -> bytes:
    return encode_frame({":event-type": kind, ":message-type": "event"}, json.dumps(payload).encode())


def test_a_stream_of_frames_folds_into_deltas_blocks_whole_tool_calls_and_done() -> None:
    frames = b"".join(
        [
            _frame("messageStart", {"role": "assistant"}),
            _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Think"}}}),
            _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "s1"}}}),
            _frame("contentBlockStop", {"contentBlockIndex": 0}),
            _frame("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "Hel"}}),
            _frame("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "lo"}}),
            _frame("contentBlockStop", {"contentBlockIndex": 1}),
            _frame(
                "contentBlockStart", {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t9", "name": "s"}}}
            ),
            _frame("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": '{"que'}}}),
            _frame("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": 'ry": "x"}'}}}),
            _frame("contentBlockStop", {"contentBlockIndex": 2}),
            _frame("messageStop", {"stopReason": "tool_use"}),
            _frame("metadata", {"usage": {"inputTokens": 3, "outputTokens": 4}}),
        ]
    )
    assembler = ConverseStreamAssembler(model="bedrock/m")
    events = [event for kind, payload in _decode(frames) for event in assembler.feed(kind, payload)]
    events += assembler.finish()
    assert events == [
        ReasoningDelta(delta="Think"),
        ReasoningBlockEvent(block=ReasoningBlock(text="Think", signature="s1", provider="bedrock")),
        TextDelta(delta="Hel"),
        TextDelta(delta="lo"),
        ToolCallEvent(id="t9", name="s", arguments={"query": "x"}),
        CompletionDone(
            finish_reason="tool_calls",
            usage={"inputTokens": 3, "outputTokens": 4},  # type: ignore[arg-type]
            model="bedrock/m",
            provider="bedrock",
        ),
    ]


def test_a_stream_that_ends_before_message_stop_is_a_502() -> None:
    assembler = ConverseStreamAssembler(model="m")
    assembler.feed("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "cut"}})
    with pytest.raises(ApiError) as caught:
        assembler.finish()
    assert caught.value.code == "bad_upstream_response"


@pytest.mark.parametrize(
    ("status", "kind", "message", "expected"),
    [
        (
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
            (502, "auth_failed", False),
        ),
        (400, "AccessDeniedException", "You don't have access to the model.", (502, "auth_failed", False)),
        (
            429,
            "ThrottlingException",
            "Too many requests, please wait before trying again.",
            (429, "rate_limited", True),
        ),
        (503, "ServiceUnavailableException", "Bedrock is unable to process your request.", (503, "overloaded", True)),
        (500, "InternalServerException", "An internal server error occurred.", (503, "upstream_unavailable", True)),
        (408, "ModelTimeoutException", "Model timed out.", (504, "upstream_timeout", True)),
        (429, "ModelNotReadyException", "Model is not ready.", (503, "overloaded", True)),
        (400, "ValidationException", "Input is too long for requested model.", (400, "context_length_exceeded", False)),
        (400, "ValidationException", "messages: field required", (400, "invalid_request", False)),
        (404, "ResourceNotFoundException", "Model not found.", (400, "model_not_found", False)),
    ],
)
def test_bedrock_errors_become_neutral_ones(
    status: int, kind: str, message: str, expected: tuple[int, str, bool]
) -> None:
    headers = {"x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    error = translate_error(status, json.dumps({"message": message}).encode(), headers, upstream_model="m")
    assert (error.status, error.code, error.retryable) == expected
    if expected[1] == "auth_failed":
        assert message not in error.message  # the provider's words about credentials are not passed on


def test_an_exception_frame_mid_stream_is_a_neutral_error() -> None:
    error = translate_stream_exception("throttlingException", b'{"message": "Too many tokens"}')
    assert (error.status, error.code, error.retryable) == (429, "rate_limited", True)
    overloaded = translate_stream_exception("serviceUnavailableException", b"{}")
    assert (overloaded.status, overloaded.code) == (503, "overloaded")


# --- properties --------------------------------------------------------------------------------

_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
_names = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,20}", fullmatch=True)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
_arguments = st.dictionaries(st.text(min_size=1, max_size=8), _json_values, max_size=4)


@st.composite
def _conversations(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message(role="system", content=draw(st.text(min_size=1, max_size=20))))
    for _ in range(draw(st.integers(1, 4))):
        messages.append(Message(role="user", content=draw(st.text(min_size=1, max_size=20))))
        if draw(st.booleans()):
            calls = [
                ToolCall(id=f"{draw(_ids)}_{n}", name=draw(_names), arguments=draw(_arguments))
                for n in range(draw(st.integers(1, 3)))
            ]
            messages.append(
                Message(role="assistant", content=draw(st.none() | st.text(min_size=1, max_size=10)), tool_calls=calls)
            )
            for call in calls:
                messages.append(Message(role="tool", tool_call_id=call.id, content=draw(st.text(max_size=10))))
        else:
            messages.append(Message(role="assistant", content=draw(st.text(min_size=1, max_size=20))))
    return messages


@settings(max_examples=150, deadline=None)
@given(_conversations())
def test_any_conversation_becomes_turns_bedrock_accepts(messages: list[Message]) -> None:
    body = build_request_body(_request(messages))
    turns = body["messages"]
    assert turns[0]["role"] == "user"
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(turns))
    assert all(turn["content"] for turn in turns)
    # Every toolUse is answered by a toolResult in the very next turn, results before any text.
    for position, turn in enumerate(turns):
        uses = [b["toolUse"]["toolUseId"] for b in turn["content"] if "toolUse" in b]
        if uses:
            following = turns[position + 1]["content"]
            results = [b["toolResult"]["toolUseId"] for b in following if "toolResult" in b]
            assert results == uses
            assert all("toolResult" in b for b in following[: len(results)])
    # Bedrock refuses tool blocks unless every tool they name is declared.
    used = {b["toolUse"]["name"] for turn in turns for b in turn["content"] if "toolUse" in b}
    declared = {tool["toolSpec"]["name"] for tool in body.get("toolConfig", {}).get("tools", [])}
    assert used <= declared
    json.dumps(body)  # it is JSON, whatever the arguments held


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_ids, _names, _arguments), min_size=1, max_size=4, unique_by=lambda c: c[0]))
def test_tool_uses_come_back_without_losing_ids_names_or_arguments(
    calls: list[tuple[str, str, dict[str, Any]]],
) -> None:
    content = [{"toolUse": {"toolUseId": i, "name": n, "input": a}} for i, n, a in calls]
    body = {"output": {"message": {"role": "assistant", "content": content}}, "stopReason": "tool_use"}
    parsed = parse_response(body, "m").message.tool_calls or []
    assert [(c.id, c.name, c.arguments) for c in parsed] == calls
    # And streamed, as split fragments of each input.
    assembler = ConverseStreamAssembler(model="m")
    events = []
    for index, (call_id, name, arguments) in enumerate(calls):
        assembler.feed(
            "contentBlockStart",
            {"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": call_id, "name": name}}},
        )
        text = json.dumps(arguments)
        for cut in range(0, len(text), 5):
            assembler.feed(
                "contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": text[cut : cut + 5]}}}
            )
        events += assembler.feed("contentBlockStop", {"contentBlockIndex": index})
    assembler.feed("messageStop", {"stopReason": "tool_use"})
    streamed = [e for e in assembler.finish() if isinstance(e, ToolCallEvent)]
    assert [(e.id, e.name, e.arguments) for e in streamed] == calls


@pytest.mark.parametrize(
    ("model", "sent"),
    [
        ("anthropic.claude-3-5-haiku-20241022-v1:0", 1.0),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", 1.0),
        ("arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-haiku-20240307-v1:0", 1.0),
        ("meta.llama3-1-70b-instruct-v1:0", 1.5),
    ],
)
def test_a_temperature_above_one_is_clamped_only_for_claude_models(model: str, sent: float) -> None:
    request = _request([Message(role="user", content="q")]).model_copy(update={"temperature": 1.5})
    assert build_request_body(request, upstream_model=model)["inferenceConfig"] == {"temperature": sent}
