"""Neutral <-> Anthropic Messages API, checked on exact request bodies and the API reference's payloads."""

# ruff: noqa: E501  (the reference's stream payloads are kept verbatim, one event per line)

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from completion_service.providers.anthropic import (
    EMPTY_TURN_TEXT,
    StreamAssembler,
    build_request_body,
    parse_response,
    stream_error,
    translate_error,
)
from completion_service.providers.tool_turns import NOT_RUN_RESULT, repaired
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionDone,
    CompletionEvent,
    CompletionRequest,
    Message,
    NamedToolChoice,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    Usage,
)
from support.fake_anthropic import ScriptedAnthropic, request_problem

MODEL = "claude-sonnet-4-5"

SEARCH_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5}},
    "required": ["query"],
}

TOOLS = [
    ToolSpec(name="search_documents", description="Search the docs.", input_schema=SEARCH_SCHEMA),
    ToolSpec(name="web_search", description="Search the web."),
]

CONVERSATION = [
    Message(role="system", content="You answer from the documents."),
    Message(role="user", content="How does the loop stop?"),
    Message(
        role="assistant",
        content="Let me search.",
        tool_calls=[
            ToolCall(id="toolu_1", name="search_documents", arguments={"query": "loop stop", "top_k": 3}),
            ToolCall(id="toolu_2", name="web_search", arguments={}, invalid_arguments='{"query": "loop'),
        ],
    ),
    Message(role="tool", tool_call_id="toolu_1", content="It stops after 15 iterations."),
    Message(role="tool", tool_call_id="toolu_2", content="Invalid arguments", is_error=True),
]


def _request(messages: list[Message] | None = None, **fields: Any) -> CompletionRequest:
    fields.setdefault("tools", TOOLS)
    return CompletionRequest(model=f"anthropic/{MODEL}", messages=messages or CONVERSATION, **fields)


def _body(request: CompletionRequest, *, stream: bool = False, thinking: int | None = None) -> dict[str, Any]:
    # What every adapter is given: the conversation ``tool_turns`` repaired.
    body = build_request_body(repaired(request), MODEL, stream=stream, thinking_budget_tokens=thinking)
    assert request_problem(json.loads(json.dumps(body))) is None  # what Anthropic would refuse, it never gets
    return body


def _text(content: str) -> dict[str, Any]:
    return {"type": "text", "text": content}


# --- neutral -> Messages -----------------------------------------------------------------------


def test_a_conversation_with_tool_calls_and_results_becomes_the_exact_messages_body() -> None:
    body = _body(_request(max_tokens=256, temperature=0.2))
    assert body == {
        "model": MODEL,
        "system": "You answer from the documents.",
        "messages": [
            {"role": "user", "content": [_text("How does the loop stop?")]},
            {
                "role": "assistant",
                "content": [
                    _text("Let me search."),
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "search_documents",
                        "input": {"query": "loop stop", "top_k": 3},
                    },
                    # Anthropic needs an object: {} goes instead, and the result says why.
                    {"type": "tool_use", "id": "toolu_2", "name": "web_search", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "It stops after 15 iterations."},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": "Your arguments for this call were not a JSON object, so the call was sent with {} "
                        'instead. You wrote: {"query": "loop\n\nInvalid arguments',
                        "is_error": True,
                    },
                ],
            },
        ],
        "stream": False,
        "tools": [
            {"name": "search_documents", "description": "Search the docs.", "input_schema": SEARCH_SCHEMA},
            {
                "name": "web_search",
                "description": "Search the web.",
                "input_schema": {"type": "object", "properties": {}},
            },
        ],
        "tool_choice": {"type": "auto"},
        "max_tokens": 256,
        "temperature": 0.2,
    }


def test_system_messages_wherever_they_are_become_the_top_level_system() -> None:
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Hi"),
        Message(role="system", content="Answer in French."),
        Message(role="user", content="What time is it?"),
    ]
    body = _body(_request(messages, tools=[]))
    assert body["system"] == "Be brief.\n\nAnswer in French."
    assert body["messages"] == [{"role": "user", "content": [_text("Hi"), _text("What time is it?")]}]


def test_consecutive_turns_of_one_role_merge_into_one_message_with_several_blocks() -> None:
    messages = [
        Message(role="user", content="First."),
        Message(role="user", content="Second."),
        Message(role="assistant", content="One."),
        Message(role="assistant", content="Two."),
        Message(role="user", content="   "),  # Anthropic refuses blank text: the turn still needs content
    ]
    assert _body(_request(messages, tools=[]))["messages"] == [
        {"role": "user", "content": [_text("First."), _text("Second.")]},
        {"role": "assistant", "content": [_text("One."), _text("Two.")]},
        {"role": "user", "content": [_text(EMPTY_TURN_TEXT)]},
    ]


def test_the_results_of_one_turn_go_first_in_one_user_message_before_any_user_text() -> None:
    messages = [
        Message(role="user", content="Compare them."),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="toolu_a", name="web_search"), ToolCall(id="toolu_b", name="web_search")],
        ),
        Message(role="tool", tool_call_id="toolu_b", content="B"),
        Message(role="user", content="Hurry up."),
        Message(role="tool", tool_call_id="toolu_a", content="A"),
    ]
    assert _body(_request(messages))["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": "A"},  # in the order they were called
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "B"},
            _text("Hurry up."),
        ],
    }


def test_a_tool_call_never_answered_gets_an_error_result_and_a_stray_result_becomes_text() -> None:
    messages = [
        Message(role="user", content="Go."),
        Message(role="assistant", tool_calls=[ToolCall(id="toolu_a", name="web_search", arguments={"q": "x"})]),
        Message(role="tool", tool_call_id="toolu_zzz", content="from nowhere", is_error=True),
    ]
    assert _body(_request(messages))["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": NOT_RUN_RESULT, "is_error": True},
            _text("Result of tool call toolu_zzz (the tool failed):\nfrom nowhere"),
        ],
    }


def test_a_conversation_that_does_not_start_with_the_user_gets_a_user_turn_first() -> None:
    messages = [Message(role="system", content="Be brief."), Message(role="assistant", content="Hello! ")]
    body = _body(_request(messages, tools=[]))
    assert body["messages"] == [
        {"role": "user", "content": [_text(EMPTY_TURN_TEXT)]},
        # A final assistant turn is a prefill, which Anthropic refuses with trailing whitespace.
        {"role": "assistant", "content": [_text("Hello!")]},
    ]


def test_tool_call_ids_anthropic_refuses_are_rewritten_the_same_way_in_call_and_result() -> None:
    messages = [
        Message(role="user", content="Go."),
        Message(role="assistant", tool_calls=[ToolCall(id="functions.search:0", name="web_search")]),
        Message(role="tool", tool_call_id="functions.search:0", content="done"),
        Message(role="assistant", tool_calls=[ToolCall(id="toolu_same", name="web_search")]),
        Message(role="tool", tool_call_id="toolu_same", content="one"),
        Message(role="assistant", tool_calls=[ToolCall(id="toolu_same", name="web_search")]),  # an id used twice
        Message(role="tool", tool_call_id="toolu_same", content="two"),
    ]
    sent = _body(_request(messages))["messages"]
    first_id = sent[1]["content"][0]["id"]
    assert first_id.startswith("functions_search_0_")
    assert sent[2]["content"][0]["tool_use_id"] == first_id
    assert [sent[3]["content"][0]["id"], sent[4]["content"][0]["tool_use_id"]] == ["toolu_same", "toolu_same"]
    assert [sent[5]["content"][0]["id"], sent[6]["content"][0]["tool_use_id"]] == ["toolu_same_2", "toolu_same_2"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        (NamedToolChoice(name="web_search"), {"type": "tool", "name": "web_search"}),
    ],
)
def test_each_tool_choice_has_its_anthropic_form(choice: ToolChoice, expected: dict[str, Any]) -> None:
    assert _body(_request(tool_choice=choice))["tool_choice"] == expected


def test_without_tools_neither_tools_nor_tool_choice_is_sent_and_max_tokens_has_a_default() -> None:
    request = CompletionRequest(model=MODEL, messages=[Message(role="user", content="hi")], tool_choice="required")
    assert _body(request) == {
        "model": MODEL,
        "messages": [{"role": "user", "content": [_text("hi")]}],
        "stream": False,
        "max_tokens": 4096,
    }


def test_a_history_with_tool_calls_but_no_tools_offered_declares_them_and_forbids_calling_them() -> None:
    body = _body(_request(tools=[]))
    assert body["tools"] == [
        {"name": "search_documents", "input_schema": {"type": "object", "properties": {}}},
        {"name": "web_search", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert body["tool_choice"] == {"type": "none"}


def test_a_temperature_above_anthropics_range_is_capped_at_one() -> None:
    assert _body(_request(temperature=1.7))["temperature"] == 1.0


# --- thinking ----------------------------------------------------------------------------------

THOUGHT = ReasoningBlock(text="The user asks about stopping.", signature="EqQBCkYIsig", provider="anthropic")
SECRET_THOUGHT = ReasoningBlock(redacted_data="EmwKAhgBEgy3va3pzix", provider="anthropic")


def test_a_thinking_budget_turns_thinking_on_on_top_of_the_answer_tokens_and_drops_the_temperature() -> None:
    request = _request([Message(role="user", content="Why?")], max_tokens=1000, temperature=0.5)
    body = _body(request, thinking=2048)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 3048
    assert "temperature" not in body


def test_thinking_blocks_of_this_provider_come_back_first_unchanged_and_others_are_left_out() -> None:
    foreign = ReasoningBlock(text="Gemini thought", signature="c2ln", provider="gemini")
    messages = [
        Message(role="user", content="How does the loop stop?"),
        Message(
            role="assistant",
            content="Searching.",
            reasoning=[THOUGHT, SECRET_THOUGHT, foreign],
            tool_calls=[ToolCall(id="toolu_1", name="web_search", arguments={"query": "loop"})],
        ),
        Message(role="tool", tool_call_id="toolu_1", content="15 iterations"),
    ]
    body = _body(_request(messages), thinking=2048)
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "The user asks about stopping.", "signature": "EqQBCkYIsig"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        _text("Searching."),
        {"type": "tool_use", "id": "toolu_1", "name": "web_search", "input": {"query": "loop"}},
    ]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_a_tool_use_turn_that_began_without_thinking_continues_without_it() -> None:
    # Anthropic refuses to switch thinking on in the middle of a turn (a tool-use loop is one turn).
    body = _body(_request(), thinking=2048)
    assert "thinking" not in body
    assert body["max_tokens"] == 4096


def test_a_new_user_question_after_a_turn_without_thinking_may_think_again() -> None:
    messages = [*CONVERSATION, Message(role="assistant", content="15."), Message(role="user", content="Sure?")]
    assert _body(_request(messages), thinking=2048)["thinking"]["budget_tokens"] == 2048


@pytest.mark.parametrize("choice", ["required", NamedToolChoice(name="web_search")])
def test_a_forced_tool_turns_thinking_off_for_that_request(choice: ToolChoice) -> None:
    body = _body(
        _request([Message(role="user", content="Search.")], tool_choice=choice, temperature=0.3), thinking=2048
    )
    assert "thinking" not in body
    assert body["temperature"] == 0.3


# --- Messages -> neutral -----------------------------------------------------------------------


def _message(content: list[dict[str, Any]], stop_reason: str = "end_turn", **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 2095, "output_tokens": 503},
    }


def test_a_text_answer_parses_with_its_usage_counting_cached_prompt_tokens() -> None:
    body = _message(
        [_text("Hi! My name is Claude.")],
        input_tokens=12,
        cache_creation_input_tokens=100,
        cache_read_input_tokens=1000,
        output_tokens=6,
    )
    response = parse_response(body, "anthropic/claude-sonnet-4-5")
    assert response.message == Message(role="assistant", content="Hi! My name is Claude.")
    assert response.finish_reason == "stop"
    assert response.usage == Usage(input_tokens=1112, output_tokens=6)
    assert (response.model, response.provider) == ("anthropic/claude-sonnet-4-5", "anthropic")


def test_parallel_tool_uses_parse_in_order_after_the_text() -> None:
    body = _message(
        [
            _text("I'll check both."),
            {
                "type": "tool_use",
                "id": "toolu_01A09q90qw90lq917835lq9",
                "name": "get_weather",
                "input": {"location": "San Francisco, CA", "unit": "celsius"},
            },
            {"type": "tool_use", "id": "toolu_01B", "name": "get_time", "input": {}},
        ],
        "tool_use",
    )
    response = parse_response(body, MODEL)
    assert response.finish_reason == "tool_calls"
    assert response.message.content == "I'll check both."
    assert response.message.tool_calls == [
        ToolCall(
            id="toolu_01A09q90qw90lq917835lq9",
            name="get_weather",
            arguments={"location": "San Francisco, CA", "unit": "celsius"},
        ),
        ToolCall(id="toolu_01B", name="get_time", arguments={}),
    ]


def test_thinking_and_redacted_thinking_become_reasoning_blocks_of_the_provider() -> None:
    body = _message(
        [
            {
                "type": "thinking",
                "thinking": "Let me analyze this step by step...",
                "signature": "WaUjzkypQ2mUEVM36O2T",
            },
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr"},
            _text("Based on my analysis..."),
        ]
    )
    response = parse_response(body, MODEL, provider="anthropic-eu")
    assert response.message.reasoning == [
        ReasoningBlock(
            text="Let me analyze this step by step...", signature="WaUjzkypQ2mUEVM36O2T", provider="anthropic-eu"
        ),
        ReasoningBlock(
            redacted_data="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr", provider="anthropic-eu"
        ),
    ]
    assert response.message.content == "Based on my analysis..."


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        (None, "stop"),
    ],
)
def test_each_stop_reason_has_its_neutral_finish_reason(stop_reason: str | None, expected: str) -> None:
    body = _message([_text("...")])
    body["stop_reason"] = stop_reason
    assert parse_response(body, MODEL).finish_reason == expected


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"type": "error", "error": {"type": "api_error", "message": "x"}},
        {"type": "message", "content": "text"},
        _message([{"text": "no type"}]),
        _message([{"type": "text", "text": 42}]),
        _message([{"type": "tool_use", "id": "toolu_1", "input": {}}]),
        _message([{"type": "thinking", "signature": "x"}]),
    ],
)
def test_a_body_that_is_not_a_message_is_a_502(body: Any) -> None:
    with pytest.raises(ApiError) as caught:
        parse_response(body, MODEL)
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


# --- streaming ---------------------------------------------------------------------------------

# The API reference's example of a streamed tool use, event for event.
TOOL_USE_STREAM = """\
event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":", let's check the weather."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"location\\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \\"San"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" Francisc"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"o,"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" CA\\""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":", "}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\\"unit\\": \\"fah"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"renheit\\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"""

# The extended-thinking guide's example of a streamed answer with thinking.
THINKING_STREAM = """\
event: message_start
data: {"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 40, "output_tokens": 1}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me solve this step by step:\\n\\n1. First break down 27 * 453"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "\\n2. 453 = 400 + 50 + 3"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: content_block_start
data: {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 1}

event: content_block_start
data: {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "27 * 453 = 12,231"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 2}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 210}}

event: message_stop
data: {"type": "message_stop"}

"""


def _events_of(stream: str) -> list[dict[str, Any]]:
    """The JSON of each SSE event, checking each ``event:`` name against its ``type``."""
    events = []
    for frame in stream.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        event = json.loads(lines["data"])
        assert event["type"] == lines["event"]
        events.append(event)
    return events


def _assemble(events: list[dict[str, Any]], model: str = MODEL) -> list[CompletionEvent]:
    assembler = StreamAssembler(model=model)
    out = [neutral for event in events for neutral in assembler.feed(event)]
    return out + assembler.finish()


def test_the_reference_tool_use_stream_gives_text_deltas_then_the_assembled_call_then_done() -> None:
    assert _assemble(_events_of(TOOL_USE_STREAM)) == [
        TextDelta(delta="Okay"),
        TextDelta(delta=", let's check the weather."),
        ToolCallEvent(
            id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            name="get_weather",
            arguments={"location": "San Francisco, CA", "unit": "fahrenheit"},
        ),
        CompletionDone(
            finish_reason="tool_calls",
            usage=Usage(input_tokens=472, output_tokens=89),
            model=MODEL,
            provider="anthropic",
        ),
    ]


def test_streamed_thinking_comes_out_as_deltas_then_whole_signed_blocks() -> None:
    events = _assemble(_events_of(THINKING_STREAM))
    assert events == [
        ReasoningDelta(delta="Let me solve this step by step:\n\n1. First break down 27 * 453"),
        ReasoningDelta(delta="\n2. 453 = 400 + 50 + 3"),
        ReasoningBlockEvent(
            block=ReasoningBlock(
                text="Let me solve this step by step:\n\n1. First break down 27 * 453\n2. 453 = 400 + 50 + 3",
                signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds",
                provider="anthropic",
            )
        ),
        ReasoningBlockEvent(block=ReasoningBlock(redacted_data="EmwKAhgBEgy3va3pzix", provider="anthropic")),
        TextDelta(delta="27 * 453 = 12,231"),
        CompletionDone(
            finish_reason="stop", usage=Usage(input_tokens=40, output_tokens=210), model=MODEL, provider="anthropic"
        ),
    ]


def _tool_block(index: int, call_id: str, name: str, *fragments: str) -> list[dict[str, Any]]:
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    deltas = [
        {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": f}}
        for f in fragments
    ]
    return [{"type": "content_block_start", "index": index, "content_block": start}, *deltas]


def _stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


START: dict[str, Any] = {
    "type": "message_start",
    "message": {"type": "message", "content": [], "usage": {"input_tokens": 9}},
}
END: list[dict[str, Any]] = [
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}},
    {"type": "message_stop"},
]


def test_a_tool_without_input_deltas_gets_an_empty_object_and_bad_json_is_kept_as_invalid() -> None:
    events = _assemble(
        [
            START,
            *_tool_block(0, "toolu_a", "now"),
            _stop(0),
            *_tool_block(1, "toolu_b", "now", ""),
            _stop(1),
            *_tool_block(2, "toolu_c", "web_search", '{"query": ', '"unterminated'),
            _stop(2),
            *_tool_block(3, "toolu_d", "web_search", "[1, 2]"),
            _stop(3),
            *END,
        ]
    )
    assert events[:4] == [
        ToolCallEvent(id="toolu_a", name="now", arguments={}),
        ToolCallEvent(id="toolu_b", name="now", arguments={}),
        ToolCallEvent(id="toolu_c", name="web_search", invalid_arguments='{"query": "unterminated'),
        ToolCallEvent(id="toolu_d", name="web_search", invalid_arguments="[1, 2]"),
    ]


def test_cumulative_usage_in_message_delta_replaces_the_counts_of_message_start() -> None:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": 9, "cache_read_input_tokens": 100, "output_tokens": 3},
    }
    [done] = _assemble([START, delta, {"type": "message_stop"}])
    assert isinstance(done, CompletionDone)
    assert done.usage == Usage(input_tokens=109, output_tokens=3)


def test_pings_and_event_types_this_adapter_does_not_know_are_ignored() -> None:
    events = _assemble(
        [
            START,
            {"type": "ping"},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "s"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": {}}},
            _stop(0),
            {"type": "brand_new_event"},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
            {"type": "message_stop"},
        ]
    )
    assert [event.type for event in events] == ["done"]


def test_an_overloaded_error_event_in_the_stream_is_a_retryable_503_overloaded() -> None:
    assembler = StreamAssembler(model=MODEL)
    assembler.feed(START)
    with pytest.raises(ApiError) as caught:
        assembler.feed({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert (caught.value.status, caught.value.code, caught.value.retryable) == (503, "overloaded", True)
    assert "Overloaded" in caught.value.message


@pytest.mark.parametrize(
    ("error_type", "status", "code", "retryable"),
    [
        ("api_error", 503, "upstream_unavailable", True),
        ("rate_limit_error", 429, "rate_limited", True),
        ("invalid_request_error", 400, "invalid_request", False),
        ("timeout_error", 504, "upstream_timeout", True),
        ("something_new", 503, "upstream_unavailable", True),
    ],
)
def test_other_stream_error_events_map_by_their_type(error_type: str, status: int, code: str, retryable: bool) -> None:
    error = stream_error({"type": "error", "error": {"type": error_type, "message": "oops"}})
    assert (error.status, error.code, error.retryable) == (status, code, retryable)


def test_a_stream_that_ends_before_the_message_does_is_a_502() -> None:
    assembler = StreamAssembler(model=MODEL)
    assembler.feed(START)
    with pytest.raises(ApiError) as caught:
        assembler.finish()
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


@pytest.mark.parametrize(
    "event",
    [
        "not an object",
        {"type": "content_block_delta", "index": 7, "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_start", "index": 0},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "input": {}}},
    ],
)
def test_a_malformed_stream_event_is_a_502(event: Any) -> None:
    with pytest.raises(ApiError) as caught:
        StreamAssembler(model=MODEL).feed(event)
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


# --- errors ------------------------------------------------------------------------------------


def _error(error_type: str, message: str, **extra: Any) -> bytes:
    return json.dumps({"type": "error", "error": {"type": error_type, "message": message, **extra}}).encode()


def test_a_rejected_key_is_a_502_auth_failed_that_never_repeats_the_providers_message() -> None:
    error = translate_error(
        401, _error("authentication_error", "invalid x-api-key sk-ant-secret"), {}, upstream_model="m"
    )
    assert (error.status, error.code) == (502, "auth_failed")
    assert "sk-ant-secret" not in error.message
    assert "COMPLETION_ANTHROPIC_API_KEY" in error.message


def test_a_prompt_too_long_is_a_400_context_length_exceeded_with_the_providers_words() -> None:
    body = _error("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum")
    error = translate_error(400, body, {}, upstream_model=MODEL)
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert "208310 tokens > 200000 maximum" in error.message


def test_other_400s_carry_the_providers_message() -> None:
    error = translate_error(
        400, _error("invalid_request_error", "messages.1.content: Field required"), {}, upstream_model="m"
    )
    assert (error.status, error.code) == (400, "invalid_request")
    assert "messages.1.content: Field required" in error.message


def test_an_unknown_model_is_a_400_model_not_found() -> None:
    error = translate_error(404, _error("not_found_error", "model: claude-9"), {}, upstream_model="claude-9")
    assert (error.status, error.code) == (400, "model_not_found")
    assert "claude-9" in error.message


def test_a_429_passes_retry_after_on_and_is_retryable() -> None:
    body = _error("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
    error = translate_error(429, body, {"retry-after": "7"}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (429, "rate_limited", True)
    assert error.headers == {"Retry-After": "7"}


def test_a_429_for_a_spent_monthly_limit_is_not_retryable() -> None:
    body = _error(
        "rate_limit_error", "You have reached your spend limit.", details={"error_code": "enforced_spend_limit_reached"}
    )
    error = translate_error(429, body, {"retry-after": "1"}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (429, "quota_exhausted", False)


@pytest.mark.parametrize(("status", "code"), [(529, "overloaded"), (503, "overloaded"), (500, "upstream_unavailable")])
def test_an_overloaded_or_failing_api_is_a_retryable_503(status: int, code: str) -> None:
    error = translate_error(status, _error("overloaded_error", "Overloaded"), {}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (503, code, True)


def test_a_request_too_large_is_a_400() -> None:
    error = translate_error(
        413, _error("request_too_large", "Request exceeds the maximum size"), {}, upstream_model="m"
    )
    assert (error.status, error.code, error.retryable) == (400, "invalid_request", False)


# --- properties --------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
_arguments = st.dictionaries(st.text(max_size=10), _json_values, max_size=4)
_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_-]{0,20}", fullmatch=True)
_texts = st.none() | st.text(max_size=20) | st.sampled_from(["", "  ", "\n"])
# Ids from several providers (some with characters Anthropic refuses), reused on purpose.
_any_ids = st.sampled_from(["toolu_01A", "toolu_01B", "call_abc", "functions.get:0", "a b", "toolu_01A"])
_reasoning = st.builds(
    ReasoningBlock,
    text=st.text(max_size=10),
    signature=st.none() | st.just("sig"),
    redacted_data=st.none() | st.just("cmVkYWN0ZWQ="),
    provider=st.sampled_from(["anthropic", "gemini", None]),
)


@st.composite
def _any_message(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    if role == "tool":
        return Message(role="tool", tool_call_id=draw(_any_ids), content=draw(_texts), is_error=draw(st.booleans()))
    if role == "system":
        return Message(role="system", content=draw(_texts))
    if role == "user":
        return Message(role="user", content=draw(_texts))
    calls = draw(
        st.lists(
            st.builds(
                ToolCall,
                id=_any_ids,
                name=_names,
                arguments=_arguments,
                invalid_arguments=st.none() | st.just("{oops"),
            ),
            max_size=3,
        )
    )
    return Message(
        role="assistant",
        content=draw(_texts),
        reasoning=draw(st.lists(_reasoning, max_size=2)) or None,
        tool_calls=calls or None,
    )


@st.composite
def _any_request(draw: st.DrawFn) -> CompletionRequest:
    names = draw(st.lists(_names, max_size=3, unique=True))
    tools = [ToolSpec(name=name) for name in names]
    choices: list[ToolChoice] = ["auto", "none", "required", *(NamedToolChoice(name=name) for name in names)]
    return CompletionRequest(
        model=MODEL,
        messages=draw(st.lists(_any_message(), min_size=1, max_size=8)),
        tools=tools,
        tool_choice=draw(st.sampled_from(choices)),
        max_tokens=draw(st.none() | st.integers(min_value=1, max_value=10_000)),
        temperature=draw(st.none() | st.floats(min_value=0, max_value=2)),
    )


@settings(max_examples=300, deadline=None)
@given(_any_request(), st.none() | st.integers(min_value=1024, max_value=32_000), st.booleans())
def test_any_neutral_conversation_becomes_a_request_anthropic_accepts(
    request: CompletionRequest, budget: int | None, stream: bool
) -> None:
    sent_request = repaired(request)
    body = json.loads(json.dumps(build_request_body(sent_request, MODEL, stream=stream, thinking_budget_tokens=budget)))
    assert request_problem(body) is None
    # Nothing the caller said is lost: every text and tool result is somewhere in what is sent.
    sent = [body.get("system", "")] + [
        block.get("text") or block.get("content") or "" for m in body["messages"] for block in m["content"]
    ]
    for message in request.messages:
        if message.role != "assistant" and message.text and message.text.strip():
            assert any(message.text.strip() in text for text in sent)


_ids = st.from_regex(r"toolu_[A-Za-z0-9]{1,12}", fullmatch=True)


@st.composite
def _tool_conversations(draw: st.DrawFn) -> list[Message]:
    ids = iter(draw(st.lists(_ids, min_size=12, max_size=12, unique=True)))
    messages = [Message(role="user", content=draw(st.text(max_size=30)))]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        calls = [
            ToolCall(id=next(ids), name=draw(_names), arguments=draw(_arguments))
            for _ in range(draw(st.integers(min_value=1, max_value=4)))
        ]
        messages.append(Message(role="assistant", content=draw(st.none() | st.text(max_size=20)), tool_calls=calls))
        messages.extend(
            Message(role="tool", tool_call_id=call.id, content=draw(st.text(max_size=20))) for call in calls
        )
    return messages


@settings(max_examples=60, deadline=None)
@given(_tool_conversations())
def test_tool_calls_survive_the_round_trip_through_the_anthropic_format_whole_and_streamed(
    messages: list[Message],
) -> None:
    request = CompletionRequest(model=MODEL, messages=messages)
    body = json.loads(json.dumps(build_request_body(request, MODEL, stream=False)))
    sent = [block for message in body["messages"] for block in message["content"] if block["type"] == "tool_use"]
    original = [(c.id, c.name, c.arguments, None) for m in messages for c in m.tool_calls or []]

    parsed = parse_response(json.loads(json.dumps(_message(sent, "tool_use"))), MODEL).message.tool_calls or []
    assert [(c.id, c.name, c.arguments, c.invalid_arguments) for c in parsed] == original

    # The same blocks streamed the way Anthropic streams them: input in input_json_delta fragments.
    events = [START]
    for index, block in enumerate(sent):
        events.extend(ScriptedAnthropic._block_events(index, block))
    streamed = [e for e in _assemble([*json.loads(json.dumps(events)), *END]) if isinstance(e, ToolCallEvent)]
    assert [(e.id, e.name, e.arguments, e.invalid_arguments) for e in streamed] == original
