"""Translation between OpenAI's Chat Completions wire format and the suite's runs.

The answers are checked against the official SDK's own types (``openai.types.chat``), which nobody here wrote.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion as SdkChatCompletion
from openai.types.chat import ChatCompletionChunk as SdkChatCompletionChunk

from agent_service.api.openai_wire import (
    AgentInfo,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkWriter,
    WireError,
    chat_completion,
    client_tool_specs,
    error_body,
    error_status,
    final_reasoning,
    final_text,
    model_list,
    openai_finish_reason,
    to_messages,
    to_reasoning,
    to_tool_choice,
    utf8_pieces,
)
from suite_common.wire import (
    ImagePart,
    ImageUrl,
    Message,
    NamedToolChoice,
    ReasoningBlock,
    ReasoningControl,
    TextPart,
    ToolCall,
    Usage,
)


def request(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    )


@given(st.text(), st.integers(min_value=4, max_value=80))
def test_utf8_pieces_reassemble_exactly_and_stay_within_the_byte_limit(text: str, max_bytes: int) -> None:
    pieces = utf8_pieces(text, max_bytes)
    assert "".join(pieces) == text
    assert all(0 < len(piece.encode()) <= max_bytes for piece in pieces)


def test_utf8_pieces_never_cut_a_multi_byte_character() -> None:
    # 63 ASCII bytes, then a 4-byte emoji: a cut at byte 64 would fall inside it.
    text = "a" * 63 + "🎉" + "é" * 40 + "東京"
    pieces = utf8_pieces(text)
    assert pieces[0] == "a" * 63
    assert pieces[1].startswith("🎉")
    assert "".join(pieces) == text
    assert all(len(piece.encode()) <= 64 for piece in pieces)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", "stop"),
        ("tool_calls", "tool_calls"),
        ("max_iterations", "length"),
        ("deadline", "length"),
        ("budget", "length"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("cancelled", "stop"),
        ("error", "stop"),
        ("a_reason_added_later", "stop"),
    ],
)
def test_every_finish_reason_maps_to_one_openai_knows_and_an_unknown_one_cannot_fail(
    reason: str, expected: str
) -> None:
    assert openai_finish_reason(reason) == expected


def test_messages_translate_with_developer_as_system_text_parts_joined_and_tool_calls_parsed() -> None:
    body = request(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather "}, {"type": "text", "text": "in Oslo?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                    },
                    {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{oops"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
    )
    messages = to_messages(body)
    assert messages[0] == Message(role="system", content="Be brief.")
    assert messages[1] == Message(role="user", content="Weather in Oslo?")
    assert messages[2].tool_calls == [
        ToolCall(id="c1", name="get_weather", arguments={"city": "Oslo"}),
        ToolCall(id="c2", name="get_weather", invalid_arguments="{oops"),
    ]
    assert messages[3] == Message(role="tool", tool_call_id="c1", content="sunny")


def test_image_url_parts_become_the_suites_content_parts() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K", "detail": "low"}}
    body = request(messages=[{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}])
    [message] = to_messages(body)
    assert message.content == [
        TextPart(text="What is it?"),
        ImagePart(image_url=ImageUrl(url="data:image/png;base64,iVBORw0K", detail="low")),
    ]


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}, "input_audio"),
        ({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://a.test/"}}]}, "images"),
        ({"role": "tool", "content": "result"}, "toolCallId"),
    ],
)
def test_messages_that_cannot_be_translated_say_why(message: dict[str, Any], problem: str) -> None:
    with pytest.raises(WireError, match=problem):
        to_messages(request(messages=[message]))


def test_client_tools_and_tool_choice_translate() -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    body = request(tools=[tool], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    [spec] = client_tool_specs(body)
    assert (spec.name, spec.input_schema) == ("get_weather", {"type": "object"})
    assert to_tool_choice(body) == NamedToolChoice(name="get_weather")
    assert to_tool_choice(request()) == "auto"
    with pytest.raises(WireError, match="same name"):
        client_tool_specs(request(tools=[tool, tool]))


def test_more_than_one_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="n"):
        request(n=2)


def test_the_answer_joins_the_text_of_every_round() -> None:
    appended = [
        Message(role="assistant", content="Looking it up.", tool_calls=[ToolCall(id="c", name="t")]),
        Message(role="tool", tool_call_id="c", content="result"),
        Message(role="assistant", content="Found it."),
    ]
    assert final_text(appended) == "Looking it up.\n\nFound it."
    assert final_text([Message(role="assistant", tool_calls=[ToolCall(id="c", name="t")])]) is None


def test_a_completion_is_what_the_sdk_parses() -> None:
    completion = chat_completion(
        completion_id="chatcmpl-1",
        created=1,
        model="gpt-4o",
        content=None,
        tool_calls=[ToolCall(id="c1", name="get_weather", arguments={"city": "Zürich"})],
        agent=AgentInfo(run_id="run_1", finish_reason="tool_calls", iterations=2),
        usage=Usage(input_tokens=10, output_tokens=4),
    )
    parsed = SdkChatCompletion.model_validate_json(completion.model_dump_json(exclude_none=True))
    assert parsed.choices[0].finish_reason == "tool_calls"
    [call] = parsed.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Zürich"}  # type: ignore[union-attr]
    assert parsed.usage is not None
    assert (parsed.usage.prompt_tokens, parsed.usage.completion_tokens, parsed.usage.total_tokens) == (10, 4, 14)
    assert (parsed.model_extra or {})["agent"]["finish_reason"] == "tool_calls"


def test_every_chunk_the_writer_makes_is_a_chunk_for_the_sdk_and_for_our_model() -> None:
    writer = ChunkWriter("chatcmpl-1", 1, "gpt-4o", include_usage=True)
    payloads = [
        writer.role(),
        writer.text('quotes " and\nnewlines, 日本'),
        writer.tool_calls([ToolCall(id="c1", name="t", invalid_arguments="{oops")]),
        writer.finish(AgentInfo(run_id="run_1", finish_reason="max_iterations", iterations=15)),
        writer.usage(Usage(input_tokens=3, output_tokens=2)),
        writer.agent_event('{"type":"tool_call","runId":"run_1"}'),
    ]
    for payload in payloads:
        assert "\n" not in payload  # one SSE data line each
        ChatCompletionChunk.model_validate_json(payload)
    chunks = [SdkChatCompletionChunk.model_validate_json(payload) for payload in payloads]
    assert chunks[1].choices[0].delta.content == 'quotes " and\nnewlines, 日本'
    assert chunks[2].choices[0].delta.tool_calls[0].function.arguments == "{oops"  # type: ignore[index, union-attr]
    assert chunks[3].choices[0].finish_reason == "length"
    assert (chunks[3].model_extra or {})["agent"]["finish_reason"] == "max_iterations"
    assert chunks[4].usage is not None
    assert chunks[4].usage.total_tokens == 5
    assert (chunks[5].choices, (chunks[5].model_extra or {})["agent_event"]["type"]) == ([], "tool_call")


@pytest.mark.parametrize(
    ("status", "code", "kind", "answered"),
    [
        (400, "invalid_request", "invalid_request_error", 400),
        (400, "model_not_found", "invalid_request_error", 404),
        (401, "unauthorized", "authentication_error", 401),
        (403, "forbidden", "permission_error", 403),
        (413, "payload_too_large", "invalid_request_error", 413),
        (429, "rate_limited", "rate_limit_error", 429),
        (502, "tools_unauthorized", "server_error", 502),
        (503, "upstream_unavailable", "server_error", 503),
    ],
)
def test_errors_take_openais_shape_and_keep_the_suites_code(status: int, code: str, kind: str, answered: int) -> None:
    assert error_status(status, code) == answered
    assert error_body(answered, code, "why") == {"error": {"message": "why", "type": kind, "param": None, "code": code}}


def test_the_model_list_leaves_out_provider_patterns() -> None:
    models = model_list(
        [
            {"id": "fast", "provider": "openai"},
            {"id": "demo", "provider": "demo"},
            {"id": "openai/*", "provider": "openai"},
        ]
    )
    assert [(card.id, card.owned_by) for card in models.data] == [("fast", "openai"), ("demo", "demo")]


def test_chunks_are_compact_json_throughout() -> None:
    payload = ChunkWriter("chatcmpl-1", 1, "gpt-4o", include_usage=False).text("hi")
    assert payload == json.dumps(json.loads(payload), ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(
    ("effort", "expected"),
    [
        ("none", "minimal"),
        ("minimal", "minimal"),
        ("low", "low"),
        ("medium", "medium"),
        ("high", "high"),
        ("xhigh", "high"),
        ("max", "high"),
    ],
)
def test_openais_reasoning_effort_is_the_runs_nearest_effort(effort: str, expected: str) -> None:
    assert to_reasoning(request(reasoning_effort=effort), summary=False) == ReasoningControl(effort=expected)  # type: ignore[arg-type]
    asked = to_reasoning(request(reasoning_effort=effort), summary=True)
    assert asked == ReasoningControl(effort=expected, summary="auto")  # type: ignore[arg-type]


def test_without_reasoning_effort_the_run_asks_for_reasoning_only_when_the_client_wants_to_see_it() -> None:
    assert to_reasoning(request(), summary=False) is None
    assert to_reasoning(request(), summary=True) == ReasoningControl(summary="auto")
    assert request(verbosity="low").verbosity == "low"
    with pytest.raises(ValueError, match="reasoning_effort"):
        request(reasoning_effort="extreme")


def test_reasoning_and_its_tokens_are_what_the_sdk_parses_whole_and_streamed() -> None:
    appended = [
        Message(
            role="assistant", reasoning=[ReasoningBlock(text="Look it up.")], tool_calls=[ToolCall(id="c", name="t")]
        ),
        Message(role="tool", tool_call_id="c", content="42"),
        Message(role="assistant", reasoning=[ReasoningBlock(text="It is "), ReasoningBlock(text="42.")], content="42"),
    ]
    reasoning = final_reasoning(appended)
    assert reasoning == "Look it up.\n\nIt is 42."
    assert final_reasoning([Message(role="assistant", content="no thinking")]) is None
    usage = Usage(input_tokens=3, output_tokens=20, reasoning_tokens=12)
    agent = AgentInfo(finish_reason="stop", iterations=2, warnings=["verbosity was ignored."])
    whole = chat_completion(
        completion_id="c",
        created=1,
        model="m",
        content="42",
        tool_calls=None,
        agent=agent,
        usage=usage,
        reasoning=reasoning,
    )
    parsed = SdkChatCompletion.model_validate_json(whole.model_dump_json(exclude_none=True))
    assert (parsed.choices[0].message.model_extra or {})["reasoning_content"] == reasoning
    assert parsed.usage is not None
    assert parsed.usage.completion_tokens_details is not None
    assert parsed.usage.completion_tokens_details.reasoning_tokens == 12
    assert (parsed.model_extra or {})["agent"]["warnings"] == ["verbosity was ignored."]
    writer = ChunkWriter("chatcmpl-1", 1, "m", include_usage=True)
    chunk = SdkChatCompletionChunk.model_validate_json(writer.reasoning("Look"))
    assert (chunk.choices[0].delta.model_extra or {})["reasoning_content"] == "Look"
    ChatCompletionChunk.model_validate_json(writer.reasoning("Look"))
    usage_chunk = SdkChatCompletionChunk.model_validate_json(writer.usage(usage))
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens_details is not None
    assert usage_chunk.usage.completion_tokens_details.reasoning_tokens == 12
    unreported = json.loads(writer.usage(Usage(input_tokens=3, output_tokens=2)))["usage"]
    assert "completion_tokens_details" not in unreported  # the provider said nothing of reasoning tokens
