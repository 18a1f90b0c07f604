"""``suite_common.openai_chat``: the Chat Completions format both directions share.

What completion-service's ``openai`` provider writes, agent-service's OpenAI front reads, and the other way
round, without anything lost: a request the provider builds is the front's request of the same conversation,
tools and controls; an answer (whole or streamed) the front writes is the provider's answer of the same text,
reasoning, tool calls and tokens.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_service.api.openai_wire import (
    AgentInfo,
    ChatCompletionRequest,
    ChunkWriter,
    chat_completion,
    client_tool_specs,
    to_messages,
    to_tool_choice,
)
from completion_service.providers.openai import StreamAssembler, build_request_body, parse_response
from suite_common.openai_chat import (
    FunctionCall,
    ToolCallItem,
    arguments_text,
    completion_usage,
    parse_arguments,
    to_tool_call,
    usage_of,
)
from suite_common.wire import (
    CompletionDone,
    CompletionRequest,
    Message,
    NamedToolChoice,
    ReasoningBlockEvent,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    Usage,
)

CONVERSATION = [
    Message(role="system", content="Be brief."),
    Message(role="user", content="What time is it in Paris, and in Tokyo?"),
    Message(
        role="assistant",
        tool_calls=[
            ToolCall(id="call_1", name="clock", arguments={"city": "Paris", "précis": True}),
            ToolCall(id="call_2", name="clock", invalid_arguments='{"city": "Tokyo"'),
        ],
    ),
    Message(role="tool", tool_call_id="call_1", content="12:00"),
    Message(role="tool", tool_call_id="call_2", content="not JSON"),
    Message(role="assistant", content="Noon in Paris."),
    Message(role="user", content="Thanks."),
]
TOOLS = [
    ToolSpec(name="clock", description="The time in a city.", input_schema={"type": "object", "properties": {}}),
    ToolSpec(name="noop"),
]


@pytest.mark.parametrize("choice", ["auto", "none", "required", NamedToolChoice(name="clock")])
@pytest.mark.parametrize("stream", [False, True])
def test_a_request_the_provider_builds_is_the_same_request_to_the_front(choice: ToolChoice, stream: bool) -> None:
    request = CompletionRequest(
        model="gpt-4o", messages=CONVERSATION, tools=TOOLS, tool_choice=choice, max_tokens=50, temperature=0.5
    )
    body = json.loads(json.dumps(build_request_body(request, "gpt-4o", stream=stream)))
    received = ChatCompletionRequest.model_validate(body)
    assert to_messages(received) == CONVERSATION
    assert client_tool_specs(received) == TOOLS
    assert to_tool_choice(received) == choice
    assert (received.model, received.stream, received.max_tokens, received.temperature) == ("gpt-4o", stream, 50, 0.5)
    assert bool(received.stream_options and received.stream_options.include_usage) is stream


def test_a_failed_tool_result_reaches_the_front_as_text_that_says_so() -> None:
    failed = [*CONVERSATION[:4], Message(role="tool", tool_call_id="call_2", content="bad city", is_error=True)]
    body = build_request_body(CompletionRequest(model="gpt-4o", messages=failed), "gpt-4o", stream=False)
    # Chat Completions has no error flag: the provider says it in the content, which is what the front reads.
    assert to_messages(ChatCompletionRequest.model_validate(body))[-1] == Message(
        role="tool", tool_call_id="call_2", content="Error: bad city"
    )


ANSWER_CALLS = [
    ToolCall(id="call_9", name="clock", arguments={"city": "東京"}),
    ToolCall(id="call_10", name="clock", invalid_arguments="[1, 2]"),
]


@pytest.mark.parametrize(
    ("usage", "finish"),
    [
        (Usage(input_tokens=12, output_tokens=7), "stop"),
        (Usage(input_tokens=12, output_tokens=7, reasoning_tokens=3), "tool_calls"),
    ],
)
def test_an_answer_the_front_writes_is_the_same_answer_to_the_provider(usage: Usage, finish: str) -> None:
    calls = ANSWER_CALLS if finish == "tool_calls" else None
    completion = chat_completion(
        completion_id="chatcmpl-1",
        created=1,
        model="gpt-4o",
        content="It is noon.",
        tool_calls=calls,
        agent=AgentInfo(finish_reason=finish, iterations=1),
        usage=usage,
        reasoning="Paris is UTC+1.",
    )
    response = parse_response(json.loads(completion.model_dump_json()), "gpt-4o")
    assert response.message.content == "It is noon."
    assert response.message.tool_calls == calls
    assert [block.text for block in response.message.reasoning or []] == ["Paris is UTC+1."]
    assert response.finish_reason == finish
    assert response.usage == usage


def test_a_stream_the_front_writes_is_the_same_stream_to_the_provider() -> None:
    writer = ChunkWriter("chatcmpl-1", 1, "gpt-4o", include_usage=True)
    usage = Usage(input_tokens=5, output_tokens=9, reasoning_tokens=2)
    frames = [
        writer.role(),
        writer.reasoning("Thinking "),
        writer.reasoning("hard."),
        writer.text("Noon "),
        writer.text("in Paris."),
        writer.tool_calls(ANSWER_CALLS),
        writer.finish(AgentInfo(finish_reason="tool_calls", iterations=2)),
        writer.usage(usage),
    ]
    assembler = StreamAssembler(model="gpt-4o")
    events: list[Any] = [event for frame in frames for event in assembler.feed(json.loads(frame))]
    assembler.ended = True  # the front's "[DONE]"
    events.extend(assembler.finish())
    assert [e.delta for e in events if isinstance(e, ReasoningDelta)] == ["Thinking ", "hard."]
    assert "".join(e.delta for e in events if isinstance(e, TextDelta)) == "Noon in Paris."
    assert [e.block.text for e in events if isinstance(e, ReasoningBlockEvent)] == ["Thinking hard."]
    called = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [
        ToolCall(id=e.id, name=e.name, arguments=e.arguments, invalid_arguments=e.invalid_arguments) for e in called
    ] == (ANSWER_CALLS)
    done = events[-1]
    assert isinstance(done, CompletionDone)
    assert (done.finish_reason, done.usage) == ("tool_calls", usage)


@pytest.mark.parametrize(
    ("text", "arguments", "invalid"),
    [
        ('{"city": "Paris"}', {"city": "Paris"}, None),
        ("", {}, None),
        ("   ", {}, None),
        ('{"city": ', {}, '{"city": '),
        ("[1, 2]", {}, "[1, 2]"),
        ('"Paris"', {}, '"Paris"'),
    ],
)
def test_both_directions_read_arguments_alike(text: str, arguments: dict[str, Any], invalid: str | None) -> None:
    # The front used to keep invalid JSON as ``None`` before making the call; the call it made was this one.
    assert parse_arguments(text) == (arguments, invalid)
    call = to_tool_call(ToolCallItem(id="call_1", function=FunctionCall(name="clock", arguments=text)))
    assert (call.arguments, call.invalid_arguments) == (arguments, invalid)
    if invalid is not None or text.strip():
        assert arguments_text(call) == (invalid if invalid is not None else json.dumps(arguments))


def test_the_provider_also_takes_arguments_as_an_object_or_another_json_value() -> None:
    assert parse_arguments({"city": "Paris"}) == ({"city": "Paris"}, None)
    assert parse_arguments(None) == ({}, None)
    assert parse_arguments([1, 2]) == ({}, "[1, 2]")


@pytest.mark.parametrize("usage", [Usage(), Usage(input_tokens=3, output_tokens=4, reasoning_tokens=1)])
def test_usage_goes_both_ways(usage: Usage) -> None:
    written = completion_usage(usage)
    assert written.total_tokens == usage.total_tokens
    assert usage_of(json.loads(written.model_dump_json())) == usage


def test_usage_missing_or_malformed_counts_nothing() -> None:
    assert usage_of(None) == Usage()
    assert usage_of({"prompt_tokens": "3", "completion_tokens_details": {"reasoning_tokens": True}}) == Usage()
