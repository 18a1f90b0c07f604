"""The Responses API translation on exact bodies and events, as OpenAI's API reference gives them."""

from __future__ import annotations

from typing import Any

import pytest

from completion_service.providers.openai_responses import ResponsesStream, build_request_body, parse_response
from suite_common.errors import ApiError
from suite_common.wire import (
    CompletionDone,
    CompletionRequest,
    Message,
    NamedToolChoice,
    ReasoningBlock,
    ReasoningBlockEvent,
    ReasoningControl,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    Usage,
)

USER = Message(role="user", content="hi")
BLOCK = ReasoningBlock(text="Look it up.", signature="rs_1", redacted_data="gAAAA-sealed", provider="openai-responses")


def _request(**fields: Any) -> CompletionRequest:
    return CompletionRequest(model="openai-responses/gpt-5", **{"messages": [USER], **fields})


@pytest.mark.parametrize("effort", ["minimal", "low", "medium", "high"])
@pytest.mark.parametrize("verbosity", ["low", "medium", "high"])
def test_each_effort_and_verbosity_maps_to_reasoning_effort_and_text_verbosity(effort: str, verbosity: str) -> None:
    request = _request(reasoning={"effort": effort, "summary": "auto"}, verbosity=verbosity)
    body = build_request_body(request, "gpt-5", stream=False)
    assert body["reasoning"] == {"effort": effort, "summary": "auto"}
    assert body["text"] == {"verbosity": verbosity}


def test_a_summary_of_none_asks_for_no_summary_and_no_controls_send_none() -> None:
    asked = build_request_body(_request(reasoning=ReasoningControl(effort="low", summary="none")), "m", stream=True)
    plain = build_request_body(_request(), "m", stream=True)
    assert asked["reasoning"] == {"effort": "low"}
    assert plain == {
        "model": "m",
        "input": [{"role": "user", "content": "hi"}],
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }


@pytest.mark.parametrize(
    ("model", "sent"),
    [
        ("gpt-5", "minimal"),
        ("gpt-5-mini", "minimal"),
        ("gpt-5-2025-08-07", "minimal"),
        ("gpt-5.1", "low"),
        ("o3", "low"),
        ("o4-mini", "low"),
        ("gpt-oss-120b", "low"),
    ],
)
def test_a_minimal_effort_is_low_for_the_models_without_minimal(model: str, sent: str) -> None:
    body = build_request_body(_request(reasoning=ReasoningControl(effort="minimal")), model, stream=False)
    assert body == {
        "model": model,
        "input": [{"role": "user", "content": "hi"}],
        "stream": False,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": sent},
    }


def test_a_reasoning_model_gets_no_temperature_and_a_model_that_cannot_reason_no_include() -> None:
    request = _request(temperature=0.3)
    reasoning = build_request_body(request, "o3", stream=False, reasoning=True)
    plain = build_request_body(request, "gpt-4o", stream=False, reasoning=False)
    assert reasoning == {
        "model": "o3",
        "input": [{"role": "user", "content": "hi"}],
        "stream": False,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    assert plain == {
        "model": "gpt-4o",
        "input": [{"role": "user", "content": "hi"}],
        "stream": False,
        "store": False,
        "temperature": 0.3,
    }


def test_a_conversation_becomes_instructions_and_input_items_in_order() -> None:
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="system", content="Cite."),
        USER,
        Message(
            role="assistant",
            content="Searching.",
            reasoning=[BLOCK, ReasoningBlock(text="not mine", signature="sig", provider="anthropic")],
            tool_calls=[
                ToolCall(id="call_1", name="search", arguments={"q": "x"}),
                ToolCall(id="call_2", name="search", invalid_arguments="{not json"),
            ],
        ),
        Message(role="tool", tool_call_id="call_1", content="found"),
        Message(role="tool", tool_call_id="call_2", content="bad arguments", is_error=True),
        Message(role="system", content="Now answer."),
    ]
    request = _request(
        messages=messages, tools=[ToolSpec(name="search")], tool_choice=NamedToolChoice(name="search"), temperature=0.3
    )
    body = build_request_body(request, "gpt-4.1", stream=False, reasoning=False)
    assert body["instructions"] == "Be brief.\n\nCite."
    assert body["input"] == [
        {"role": "user", "content": "hi"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Look it up."}],
            "encrypted_content": "gAAAA-sealed",
        },
        {"role": "assistant", "content": "Searching."},
        {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": '{"q": "x"}'},
        {"type": "function_call", "call_id": "call_2", "name": "search", "arguments": "{not json"},
        {"type": "function_call_output", "call_id": "call_1", "output": "found"},
        {"type": "function_call_output", "call_id": "call_2", "output": "Error: bad arguments"},
        {"role": "system", "content": "Now answer."},
    ]
    assert body["tool_choice"] == {"type": "function", "name": "search"}
    assert body["tools"] == [
        {
            "type": "function",
            "name": "search",
            "description": "",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        }
    ]
    assert body["temperature"] == 0.3


def _response(output: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 20},
        "total_tokens": 40,
    }
    return {"id": "resp_1", "object": "response", "status": "completed", "output": output, "usage": usage, **fields}


REASONING_ITEM = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "First."}, {"type": "summary_text", "text": "Second."}],
    "encrypted_content": "sealed",
}


def test_a_whole_response_gives_its_reasoning_block_text_calls_and_usage_with_reasoning_tokens() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Calling.", "annotations": []}],
    }
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_9", "name": "search", "arguments": '{"q":1}'}
    answer = parse_response(_response([REASONING_ITEM, message, call]), "openai-responses/gpt-5")
    assert answer.message.reasoning == [
        ReasoningBlock(text="First.\n\nSecond.", signature="rs_1", redacted_data="sealed", provider="openai-responses")
    ]
    assert answer.message.content == "Calling."
    assert answer.message.tool_calls == [ToolCall(id="call_9", name="search", arguments={"q": 1})]
    assert answer.finish_reason == "tool_calls"
    assert answer.usage == Usage(input_tokens=10, output_tokens=30, reasoning_tokens=20)


def test_a_refusal_is_the_text_and_an_incomplete_response_finishes_by_its_reason() -> None:
    refusal = {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}
    filtered = _response([refusal], status="incomplete", incomplete_details={"reason": "content_filter"})
    answer = parse_response(filtered, "m")
    assert answer.message.content == "I can't."
    assert answer.finish_reason == "content_filter"


@pytest.mark.parametrize("body", [{"object": "chat.completion"}, [], _response([{"type": "message", "content": 3}])])
def test_a_body_that_is_not_a_response_is_a_502(body: Any) -> None:
    with pytest.raises(ApiError) as raised:
        parse_response(body, "m")
    assert (raised.value.status, raised.value.code) == (502, "bad_upstream_response")


@pytest.mark.parametrize("code", ["invalid_prompt", "invalid_request_error", "invalid_image"])
def test_a_response_failed_by_the_request_is_a_400_invalid_request_with_its_message(code: str) -> None:
    failed = _response([], status="failed", error={"code": code, "message": "The prompt was flagged."})
    with pytest.raises(ApiError) as raised:
        parse_response(failed, "m")
    assert (raised.value.status, raised.value.code, raised.value.retryable) == (400, "invalid_request", False)
    assert "The prompt was flagged." in raised.value.message
    stream = ResponsesStream(model="m")
    with pytest.raises(ApiError) as streamed:
        stream.feed({"type": "error", "sequence_number": 3, "code": code, "message": "Bad.", "param": None})
    assert (streamed.value.status, streamed.value.code, streamed.value.retryable) == (400, "invalid_request", False)


@pytest.mark.parametrize("code", ["server_error", "rate_limit_exceeded", "some_new_code"])
def test_a_response_failed_by_the_server_or_an_unknown_cause_stays_a_retryable_503(code: str) -> None:
    failed = _response([], status="failed", error={"code": code, "message": "Try again."})
    with pytest.raises(ApiError) as raised:
        parse_response(failed, "m")
    assert (raised.value.status, raised.value.code, raised.value.retryable) == (503, "upstream_unavailable", True)


def test_a_failed_response_is_a_retryable_503_with_its_message() -> None:
    failed = _response([], status="failed", error={"code": "server_error", "message": "The model crashed."})
    with pytest.raises(ApiError) as raised:
        parse_response(failed, "m")
    assert (raised.value.status, raised.value.retryable) == (503, True)
    assert "The model crashed." in raised.value.message


def _event(kind: str, sequence: int, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "sequence_number": sequence, **fields}


def test_a_stream_gives_summary_and_text_deltas_at_once_and_calls_assembled_from_argument_deltas() -> None:
    stream = ResponsesStream(model="openai-responses/gpt-5")
    events = [
        _event("response.created", 0, response={"status": "in_progress", "output": []}),
        _event("response.output_item.added", 1, output_index=0, item={**REASONING_ITEM, "summary": []}),
        _event(
            "response.reasoning_summary_text.delta", 2, item_id="rs_1", output_index=0, summary_index=0, delta="Fir"
        ),
        _event(
            "response.reasoning_summary_text.delta", 3, item_id="rs_1", output_index=0, summary_index=0, delta="st."
        ),
        _event(
            "response.reasoning_summary_text.delta", 4, item_id="rs_1", output_index=0, summary_index=1, delta="Second."
        ),
        _event("response.output_item.done", 5, output_index=0, item=REASONING_ITEM),
        _event("response.output_text.delta", 6, item_id="msg_1", output_index=1, content_index=0, delta="Calling."),
        _event(
            "response.output_item.added",
            7,
            output_index=2,
            item={"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "search", "arguments": ""},
        ),
        _event("response.function_call_arguments.delta", 8, item_id="fc_1", output_index=2, delta='{"q"'),
        _event("response.function_call_arguments.delta", 9, item_id="fc_1", output_index=2, delta=": 1}"),
        _event("response.completed", 10, response=_response([])),
    ]
    produced = [neutral for event in events for neutral in stream.feed(event)]
    assert stream.ended
    produced += stream.finish()
    assert produced == [
        ReasoningDelta(delta="Fir"),
        ReasoningDelta(delta="st."),
        ReasoningDelta(delta="\n\nSecond."),
        ReasoningBlockEvent(
            block=ReasoningBlock(
                text="First.\n\nSecond.", signature="rs_1", redacted_data="sealed", provider="openai-responses"
            )
        ),
        TextDelta(delta="Calling."),
        ToolCallEvent(id="call_9", name="search", arguments={"q": 1}),
        CompletionDone(
            finish_reason="tool_calls",
            usage=Usage(input_tokens=10, output_tokens=30, reasoning_tokens=20),
            model="openai-responses/gpt-5",
            provider="openai-responses",
        ),
    ]


@pytest.mark.parametrize(
    "event",
    [
        _event("error", 3, code="server_error", message="The server had an error."),
        _event("response.failed", 3, response={"status": "failed", "error": {"message": "The server had an error."}}),
    ],
)
def test_an_error_event_or_a_failed_response_in_the_stream_is_a_retryable_503(event: dict[str, Any]) -> None:
    stream = ResponsesStream(model="m")
    with pytest.raises(ApiError) as raised:
        stream.feed(event)
    assert (raised.value.status, raised.value.code, raised.value.retryable) == (503, "upstream_unavailable", True)
    assert "The server had an error." in raised.value.message


def test_a_stream_that_stops_before_response_completed_is_a_502() -> None:
    stream = ResponsesStream(model="m")
    stream.feed(_event("response.output_text.delta", 0, delta="The", output_index=0, item_id="m", content_index=0))
    with pytest.raises(ApiError) as raised:
        stream.finish()
    assert raised.value.code == "bad_upstream_response"
