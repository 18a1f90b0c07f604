"""Neutral <-> Gemini ``generateContent``, checked on exact request bodies and realistic responses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from completion_service.providers.gemini import (
    CONTINUE_TEXT,
    SKIP_SIGNATURE,
    StreamAssembler,
    parse_response,
    translate_error,
)
from completion_service.providers.gemini import (
    build_request_body as wire_body,
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

SIGNATURE = "CiQB0e2Kb4mXlWkz3pR+Zyl0Kq1Zl2z8xq7v0aQm0b4xQ5xVf3kSZQHR7YpB"
SEARCH_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for."},
        "top_k": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
    },
    "required": ["query"],
    "additionalProperties": False,
}
TOOLS = [
    ToolSpec(name="search_documents", description="Search the docs.", input_schema=SEARCH_SCHEMA),
    ToolSpec(name="now", description="The time."),
]
CONVERSATION = [
    Message(role="system", content="You answer from the documents."),
    Message(role="user", content="How does the loop stop?"),
    Message(
        role="assistant",
        content="Let me look.",
        tool_calls=[
            ToolCall(id="call_1", name="search_documents", arguments={"query": "loop stop"}, signature=SIGNATURE),
            ToolCall(id="call_2", name="now", arguments={}, invalid_arguments="{oops"),
        ],
    ),
    Message(role="tool", tool_call_id="call_1", content="It stops after 15 iterations."),
    Message(role="tool", tool_call_id="call_2", content="Invalid arguments", is_error=True),
]


def build_request_body(request: CompletionRequest, **options: Any) -> dict[str, Any]:
    """The body for what every adapter is given: the conversation ``tool_turns`` repaired."""
    return wire_body(repaired(request), **options)


def _request(messages: list[Message] | None = None, **fields: Any) -> CompletionRequest:
    return CompletionRequest(model="gemini/gemini-2.5-flash", messages=messages or CONVERSATION, tools=TOOLS, **fields)


def test_a_conversation_with_tool_calls_and_results_becomes_the_exact_gemini_body() -> None:
    body = build_request_body(_request(max_tokens=256, temperature=0.2))
    assert body == {
        "systemInstruction": {"parts": [{"text": "You answer from the documents."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "How does the loop stop?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Let me look."},
                    {
                        "functionCall": {"name": "search_documents", "args": {"query": "loop stop"}, "id": "call_1"},
                        "thoughtSignature": SIGNATURE,
                    },
                    {"functionCall": {"name": "now", "args": {}, "id": "call_2"}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "search_documents",
                            "response": {"result": "It stops after 15 iterations."},
                            "id": "call_1",
                        }
                    },
                    {
                        "functionResponse": {
                            "name": "now",
                            "response": {
                                "error": "Invalid arguments",
                                "note": "The arguments of this call were not a JSON object, so the tool got none. "
                                "They were: {oops",
                            },
                            "id": "call_2",
                        }
                    },
                ],
            },
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "search_documents",
                        "description": "Search the docs.",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "query": {"type": "string", "description": "What to look for."},
                                "top_k": {"type": "integer", "nullable": True},
                            },
                            "required": ["query"],
                        },
                    },
                    # No parameters at all: Gemini refuses an OBJECT with empty properties.
                    {"name": "now", "description": "The time."},
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "generationConfig": {"maxOutputTokens": 256, "temperature": 0.2},
    }


def test_on_vertex_call_ids_are_left_out_since_its_v1_api_has_no_such_field() -> None:
    body = build_request_body(_request(), provider="vertex", send_call_ids=False)
    model, answers = body["contents"][1], body["contents"][2]
    assert [part["functionCall"] for part in model["parts"][1:]] == [
        {"name": "search_documents", "args": {"query": "loop stop"}},
        {"name": "now", "args": {}},
    ]
    assert [part["functionResponse"]["name"] for part in answers["parts"]] == ["search_documents", "now"]
    assert all("id" not in part["functionResponse"] for part in answers["parts"])


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (NamedToolChoice(name="now"), {"mode": "ANY", "allowedFunctionNames": ["now"]}),
    ],
)
def test_each_tool_choice_has_its_function_calling_mode(choice: ToolChoice, expected: dict[str, Any]) -> None:
    body = build_request_body(_request(tool_choice=choice))
    assert body["toolConfig"] == {"functionCallingConfig": expected}


def test_without_tools_neither_tools_nor_tool_config_nor_generation_config_is_sent() -> None:
    request = CompletionRequest(model="m", messages=[Message(role="user", content="hi")], tool_choice="required")
    assert build_request_body(request) == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def test_thought_summaries_are_asked_for_only_when_configured() -> None:
    request = CompletionRequest(model="m", messages=[Message(role="user", content="hi")])
    assert build_request_body(request, include_thoughts=True)["generationConfig"] == {
        "thinkingConfig": {"includeThoughts": True}
    }


def test_every_system_message_goes_to_the_system_instruction_in_order() -> None:
    messages = [
        Message(role="system", content="Be brief."),
        Message(role="user", content="hi"),
        Message(role="system", content="Answer in French."),
    ]
    body = build_request_body(CompletionRequest(model="m", messages=messages))
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}, {"text": "Answer in French."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


def test_consecutive_turns_of_one_role_are_merged_and_empty_ones_dropped() -> None:
    messages = [
        Message(role="user", content="first"),
        Message(role="user", content=""),
        Message(role="user", content="second"),
        Message(role="assistant", content="one"),
        Message(role="assistant", content=None),
        Message(role="assistant", content="two"),
        Message(role="user", content="third"),
    ]
    assert build_request_body(CompletionRequest(model="m", messages=messages))["contents"] == [
        {"role": "user", "parts": [{"text": "first"}, {"text": "second"}]},
        {"role": "model", "parts": [{"text": "one"}, {"text": "two"}]},
        {"role": "user", "parts": [{"text": "third"}]},
    ]


def test_a_conversation_that_starts_with_the_model_gets_a_user_turn_first() -> None:
    messages = [Message(role="system", content="s"), Message(role="assistant", content="Hello!")]
    assert build_request_body(CompletionRequest(model="m", messages=messages))["contents"] == [
        {"role": "user", "parts": [{"text": CONTINUE_TEXT}]},
        {"role": "model", "parts": [{"text": "Hello!"}]},
    ]


def test_results_come_in_call_order_with_later_user_text_after_them() -> None:
    calls = [ToolCall(id="a", name="first", arguments={}), ToolCall(id="b", name="second", arguments={})]
    messages = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=calls),
        Message(role="tool", tool_call_id="b", content="B"),
        Message(role="user", content="and hurry"),
        Message(role="tool", tool_call_id="a", content="A"),
    ]
    contents = build_request_body(CompletionRequest(model="m", messages=messages))["contents"]
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "first", "response": {"result": "A"}, "id": "a"}},
            {"functionResponse": {"name": "second", "response": {"result": "B"}, "id": "b"}},
            {"text": "and hurry"},
        ],
    }


def test_a_call_without_a_result_is_answered_with_an_error_so_gemini_accepts_the_turn() -> None:
    messages = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=[ToolCall(id="a", name="first", arguments={})]),
        Message(role="user", content="never mind"),
    ]
    contents = build_request_body(CompletionRequest(model="m", messages=messages))["contents"]
    assert contents[2]["parts"] == [
        {
            "functionResponse": {
                "name": "first",
                "response": {"error": NOT_RUN_RESULT},
                "id": "a",
            }
        },
        {"text": "never mind"},
    ]


def test_a_result_for_no_known_call_is_kept_as_text() -> None:
    messages = [Message(role="user", content="go"), Message(role="tool", tool_call_id="zz", content="42")]
    contents = build_request_body(CompletionRequest(model="m", messages=messages))["contents"]
    assert contents == [{"role": "user", "parts": [{"text": "go"}, {"text": "Result of tool call zz:\n42"}]}]


def test_a_first_call_without_a_signature_gets_the_documented_skip_value_and_later_ones_none() -> None:
    calls = [ToolCall(id="call_x", name="a", arguments={}), ToolCall(id="call_y", name="b", arguments={})]
    messages = [Message(role="user", content="go"), Message(role="assistant", tool_calls=calls)]
    model = build_request_body(CompletionRequest(model="m", messages=messages))["contents"][1]
    assert [part.get("thoughtSignature") for part in model["parts"]] == [SKIP_SIGNATURE, None]


def test_signed_reasoning_of_this_provider_goes_back_and_the_rest_does_not() -> None:
    message = Message(
        role="assistant",
        content="It stops at 15.",
        reasoning=[
            ReasoningBlock(text="Summary only.", provider="gemini"),
            ReasoningBlock(text="Thinking about limits.", signature="sig-thought", provider="gemini"),
            ReasoningBlock(text="Claude's.", signature="sig-claude", provider="anthropic"),
            ReasoningBlock(text="", signature="sig-text", provider="gemini"),
        ],
    )
    messages = [Message(role="user", content="q"), message, Message(role="user", content="thanks")]
    model = build_request_body(CompletionRequest(model="m", messages=messages))["contents"][1]
    assert model == {
        "role": "model",
        "parts": [
            {"text": "Thinking about limits.", "thought": True, "thoughtSignature": "sig-thought"},
            {"text": "It stops at 15.", "thoughtSignature": "sig-text"},
        ],
    }
    on_vertex = build_request_body(CompletionRequest(model="m", messages=messages), provider="vertex")
    assert on_vertex["contents"][1] == {"role": "model", "parts": [{"text": "It stops at 15."}]}


# --- responses -----------------------------------------------------------------------------------


def _response(
    parts: list[dict[str, Any]] | None,
    finish: str | None = "STOP",
    usage: dict[str, int] | None = None,
    **candidate: Any,
) -> dict[str, Any]:
    first: dict[str, Any] = {"index": 0, **candidate}
    if parts is not None:
        first["content"] = {"parts": parts, "role": "model"}
    if finish:
        first["finishReason"] = finish
    return {
        "candidates": [first],
        "usageMetadata": usage
        or {
            "promptTokenCount": 21,
            "candidatesTokenCount": 9,
            "totalTokenCount": 58,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 21}],
            "thoughtsTokenCount": 28,
        },
        "modelVersion": "gemini-2.5-flash",
        "responseId": "Ai-8aNvQE-3Mz7IPmNfXqQU",
    }


def test_a_text_answer_parses_with_thinking_tokens_counted_as_output_and_as_reasoning_tokens() -> None:
    response = parse_response(_response([{"text": "It stops after "}, {"text": "15 iterations."}]), "gemini/x")
    assert response.message == Message(role="assistant", content="It stops after 15 iterations.")
    assert response.finish_reason == "stop"
    assert response.usage == Usage(input_tokens=21, output_tokens=37, reasoning_tokens=28)
    assert (response.model, response.provider) == ("gemini/x", "gemini")


def test_a_function_call_with_its_id_and_signature_parses_whole() -> None:
    part = {
        "functionCall": {"id": "8f2b1c", "name": "search_documents", "args": {"query": "loop", "top_k": 3}},
        "thoughtSignature": SIGNATURE,
    }
    response = parse_response(_response([part]), "m")
    assert response.finish_reason == "tool_calls"
    assert response.message.content is None
    assert response.message.tool_calls == [
        ToolCall(id="8f2b1c", name="search_documents", arguments={"query": "loop", "top_k": 3}, signature=SIGNATURE)
    ]


def test_parallel_calls_without_ids_get_ids_unique_to_the_response_and_keep_their_order() -> None:
    parts: list[dict[str, Any]] = [
        {"functionCall": {"name": "web_search", "args": {"query": "a"}}, "thoughtSignature": SIGNATURE},
        {"functionCall": {"name": "search_documents", "args": {"query": "b"}}},
    ]
    calls = parse_response(_response(parts), "m").message.tool_calls or []
    assert [(c.id, c.name, c.arguments, c.signature) for c in calls] == [
        ("call_Ai-8aNvQE-3Mz7IPmNfXqQU_0", "web_search", {"query": "a"}, SIGNATURE),
        ("call_Ai-8aNvQE-3Mz7IPmNfXqQU_1", "search_documents", {"query": "b"}, None),
    ]


def test_a_call_without_args_has_empty_arguments_and_args_that_are_not_an_object_are_kept_as_invalid() -> None:
    parts: list[dict[str, Any]] = [{"functionCall": {"name": "now"}}, {"functionCall": {"name": "f", "args": [1, 2]}}]
    calls = parse_response(_response(parts), "m").message.tool_calls or []
    assert [(c.arguments, c.invalid_arguments) for c in calls] == [({}, None), ({}, "[1, 2]")]


def test_thought_summaries_and_the_text_signature_become_reasoning_blocks_of_this_provider() -> None:
    parts: list[dict[str, Any]] = [
        {"text": "**Checking the docs**\nThe loop has a cap.", "thought": True},
        {"text": "It stops at 15.", "thoughtSignature": "sig-text"},
    ]
    message = parse_response(_response(parts), "m", provider="vertex").message
    assert message.content == "It stops at 15."
    assert message.reasoning == [
        ReasoningBlock(text="**Checking the docs**\nThe loop has a cap.", provider="vertex"),
        ReasoningBlock(text="", signature="sig-text", provider="vertex"),
    ]


@pytest.mark.parametrize(
    ("finish", "expected"),
    [
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("SPII", "content_filter"),
        ("IMAGE_SAFETY", "content_filter"),
        ("LANGUAGE", "stop"),
        ("OTHER", "stop"),
        ("FINISH_REASON_UNSPECIFIED", "stop"),
    ],
)
def test_each_finish_reason_has_its_neutral_form(finish: str, expected: str) -> None:
    assert parse_response(_response([{"text": "partial"}], finish), "m").finish_reason == expected


def test_a_candidate_stopped_for_safety_without_content_is_an_empty_content_filter_answer() -> None:
    body = _response(
        None, "SAFETY", safetyRatings=[{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}]
    )
    response = parse_response(body, "m")
    assert (response.finish_reason, response.message.content) == ("content_filter", None)


def test_a_blocked_prompt_is_an_empty_content_filter_answer_not_an_error() -> None:
    body = {
        "promptFeedback": {
            "blockReason": "SAFETY",
            "safetyRatings": [{"category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH"}],
        },
        "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }
    response = parse_response(body, "m")
    assert response.message == Message(role="assistant")
    assert response.finish_reason == "content_filter"
    assert response.usage == Usage(input_tokens=12, output_tokens=0)


@pytest.mark.parametrize("finish", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"])
def test_a_call_gemini_could_not_use_is_a_retryable_502_with_its_reason(finish: str) -> None:
    body = _response(None, finish, finishMessage="Malformed function call: print(default_api.search(")
    with pytest.raises(ApiError) as caught:
        parse_response(body, "m")
    assert (caught.value.status, caught.value.code, caught.value.retryable) == (502, "bad_upstream_response", True)
    assert finish in caught.value.message
    assert "default_api.search(" in caught.value.message


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"candidates": "nope"},
        {"candidates": [42]},
        {"candidates": [{"content": "text"}]},
        {"candidates": [{"content": {"parts": {"text": "x"}}}]},
        {"candidates": [{"content": {"parts": [{"text": 42}]}}]},
        {"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]},
    ],
)
def test_a_body_that_is_not_a_generate_content_response_is_a_502(body: Any) -> None:
    with pytest.raises(ApiError) as caught:
        parse_response(body, "m")
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


# --- streaming -----------------------------------------------------------------------------------


def _chunk(parts: list[dict[str, Any]], finish: str | None = None, prompt: int = 9, output: int = 0) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    usage = {"promptTokenCount": prompt, "totalTokenCount": prompt + output}
    if output:
        usage["candidatesTokenCount"] = output
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash", "responseId": "s1"}


def _feed_all(chunks: list[dict[str, Any]], provider: str = "gemini") -> list[CompletionEvent]:
    assembler = StreamAssembler(model="gemini/gemini-2.5-flash", provider=provider)
    events = [event for chunk in chunks for event in assembler.feed(chunk)]
    return events + assembler.finish()


def test_streamed_text_comes_out_as_deltas_then_done_with_the_last_usage() -> None:
    events = _feed_all(
        [
            _chunk([{"text": "The loop"}]),
            _chunk([{"text": " stops at"}], output=4),
            _chunk([{"text": " 15."}], "STOP", output=6),
        ]
    )
    assert events == [
        TextDelta(delta="The loop"),
        TextDelta(delta=" stops at"),
        TextDelta(delta=" 15."),
        CompletionDone(
            finish_reason="stop",
            usage=Usage(input_tokens=9, output_tokens=6),
            model="gemini/gemini-2.5-flash",
            provider="gemini",
        ),
    ]


def test_streamed_thoughts_are_reasoning_deltas_with_a_block_when_they_end_and_the_text_signature_at_the_end() -> None:
    events = _feed_all(
        [
            _chunk([{"text": "**Plan**\nLook up", "thought": True}]),
            _chunk([{"text": " the cap.", "thought": True}]),
            _chunk([{"text": "It stops"}]),
            _chunk([{"text": " at 15."}]),
            _chunk([{"text": "", "thoughtSignature": "sig-text"}], "STOP", output=5),
        ]
    )
    assert events[:-1] == [
        ReasoningDelta(delta="**Plan**\nLook up"),
        ReasoningDelta(delta=" the cap."),
        ReasoningBlockEvent(block=ReasoningBlock(text="**Plan**\nLook up the cap.", provider="gemini")),
        TextDelta(delta="It stops"),
        TextDelta(delta=" at 15."),
        ReasoningBlockEvent(block=ReasoningBlock(text="", signature="sig-text", provider="gemini")),
    ]
    assert isinstance(events[-1], CompletionDone)


def test_function_calls_arriving_in_different_chunks_come_out_at_once_with_their_signatures() -> None:
    events = _feed_all(
        [
            _chunk([{"text": "Searching both."}]),
            _chunk([{"functionCall": {"name": "web_search", "args": {"query": "a"}}, "thoughtSignature": SIGNATURE}]),
            _chunk([{"functionCall": {"name": "search_documents", "args": {"query": "b"}}}], "STOP", output=20),
        ]
    )
    assert events == [
        TextDelta(delta="Searching both."),
        ToolCallEvent(id="call_s1_0", name="web_search", arguments={"query": "a"}, signature=SIGNATURE),
        ToolCallEvent(id="call_s1_1", name="search_documents", arguments={"query": "b"}),
        CompletionDone(
            finish_reason="tool_calls",
            usage=Usage(input_tokens=9, output_tokens=20),
            model="gemini/gemini-2.5-flash",
            provider="gemini",
        ),
    ]


def test_a_stream_that_ends_before_a_finish_reason_is_a_502() -> None:
    assembler = StreamAssembler(model="m")
    assert assembler.feed(_chunk([{"text": "It"}])) == [TextDelta(delta="It")]
    with pytest.raises(ApiError) as caught:
        assembler.finish()
    assert (caught.value.status, caught.value.code) == (502, "bad_upstream_response")


def test_an_error_object_in_the_middle_of_a_stream_is_the_error_of_its_code() -> None:
    assembler = StreamAssembler(model="m")
    assembler.feed(_chunk([{"text": "It"}]))
    with pytest.raises(ApiError) as caught:
        assembler.feed({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}})
    assert (caught.value.status, caught.value.code, caught.value.retryable) == (503, "overloaded", True)
    assert "The model is overloaded." in caught.value.message


def test_a_prompt_blocked_in_a_stream_ends_it_with_content_filter() -> None:
    events = _feed_all(
        [{"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 4}}]
    )
    assert events == [
        CompletionDone(
            finish_reason="content_filter",
            usage=Usage(input_tokens=4),
            model="gemini/gemini-2.5-flash",
            provider="gemini",
        )
    ]


def test_a_malformed_call_at_the_end_of_a_stream_is_a_retryable_502() -> None:
    assembler = StreamAssembler(model="m")
    with pytest.raises(ApiError) as caught:
        assembler.feed({"candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL", "index": 0}]})
    assert (caught.value.status, caught.value.retryable) == (502, True)


# --- errors --------------------------------------------------------------------------------------


def _google_error(code: int, status: str, message: str, *details: dict[str, Any]) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = list(details)
    return json.dumps({"error": error}).encode()


def _retry_info(delay: str) -> dict[str, Any]:
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}


def _quota_failure(quota_id: str) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
            {
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                "quotaId": quota_id,
                "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
                "quotaValue": "10",
            }
        ],
    }


def test_an_invalid_api_key_is_a_502_auth_failed_though_gemini_says_400() -> None:
    body = _google_error(
        400,
        "INVALID_ARGUMENT",
        "API key not valid. Please pass a valid API key.",
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"},
    )
    error = translate_error(400, body, {}, upstream_model="gemini-2.5-flash")
    assert (error.status, error.code, error.retryable) == (502, "auth_failed", False)
    assert "COMPLETION_GEMINI_API_KEY" in error.message


@pytest.mark.parametrize(("status", "kind"), [(401, "UNAUTHENTICATED"), (403, "PERMISSION_DENIED")])
def test_refused_credentials_are_a_502_auth_failed_naming_the_setting(status: int, kind: str) -> None:
    body = _google_error(status, kind, "Request had invalid authentication credentials: ya29.secret-token")
    error = translate_error(
        status,
        body,
        {},
        upstream_model="m",
        provider_label="Vertex AI",
        credentials_hint="COMPLETION_VERTEX_ACCESS_TOKEN",
    )
    assert (error.status, error.code) == (502, "auth_failed")
    assert "ya29" not in error.message
    assert "Vertex AI" in error.message
    assert "COMPLETION_VERTEX_ACCESS_TOKEN" in error.message


def test_a_429_waits_as_long_as_retry_info_says_when_there_is_no_retry_after_header() -> None:
    body = _google_error(
        429,
        "RESOURCE_EXHAUSTED",
        "You exceeded your current quota, please check your plan and billing details.",
        _quota_failure("GenerateRequestsPerMinutePerProjectPerModel-FreeTier"),
        _retry_info("27s"),
    )
    error = translate_error(429, body, {}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (429, "rate_limited", True)
    assert error.headers == {"Retry-After": "27"}
    assert translate_error(429, body, {"retry-after": "3"}, upstream_model="m").headers == {"Retry-After": "3"}
    assert translate_error(429, body.replace(b'"27s"', b'"0.4s"'), {}, upstream_model="m").headers == {
        "Retry-After": "1"
    }


@pytest.mark.parametrize(
    ("quota_id", "message"),
    [
        ("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "You exceeded your current quota."),
        (
            "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
            "Quota exceeded for metric: generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro",
        ),
    ],
)
def test_a_429_for_a_daily_or_absent_quota_is_not_retryable(quota_id: str, message: str) -> None:
    body = _google_error(429, "RESOURCE_EXHAUSTED", message, _quota_failure(quota_id), _retry_info("40s"))
    error = translate_error(429, body, {}, upstream_model="m")
    assert (error.status, error.code, error.retryable) == (429, "quota_exhausted", False)


@pytest.mark.parametrize(
    "message",
    [
        "The input token count (1250000) exceeds the maximum number of tokens allowed (1048576).",
        "Unable to submit request because the input token count is 1250000 but model only supports up to 1048575. "
        "Reduce the input token count and try again.",
    ],
)
def test_a_too_long_conversation_is_a_400_context_length_exceeded(message: str) -> None:
    error = translate_error(400, _google_error(400, "INVALID_ARGUMENT", message), {}, upstream_model="m")
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert "1250000" in error.message


def test_other_400s_carry_googles_message() -> None:
    body = _google_error(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified\n")
    error = translate_error(400, body, {}, upstream_model="m")
    assert (error.status, error.code) == (400, "invalid_request")
    assert "contents is not specified" in error.message


@pytest.mark.parametrize(
    ("status", "kind", "code", "retryable"),
    [
        (503, "UNAVAILABLE", "overloaded", True),
        (500, "INTERNAL", "upstream_unavailable", True),
        (504, "DEADLINE_EXCEEDED", "upstream_timeout", True),
        (404, "NOT_FOUND", "model_not_found", False),
    ],
)
def test_google_statuses_map_to_neutral_errors(status: int, kind: str, code: str, retryable: bool) -> None:
    body = _google_error(status, kind, "models/gemini-9 is not found for API version v1beta")
    error = translate_error(status, body, {}, upstream_model="gemini-9")
    assert (error.code, error.retryable) == (code, retryable)


def test_an_error_wrapped_in_a_list_is_read_too() -> None:
    body = b'[{"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}]'
    error = translate_error(503, body, {}, upstream_model="m")
    assert error.code == "overloaded"
    assert "The model is overloaded." in error.message


def test_an_error_body_that_is_not_json_still_maps_by_status() -> None:
    error = translate_error(502, b"<html>Bad Gateway</html>", {}, upstream_model="m")
    assert (error.status, error.code) == (503, "upstream_unavailable")


# --- any conversation ----------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)
_arguments = st.dictionaries(st.text(max_size=10), _json_values, max_size=4)
_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_.-]{0,20}", fullmatch=True)
_signatures = st.none() | st.from_regex(r"[A-Za-z0-9+/]{8,40}={0,2}", fullmatch=True)
_texts = st.none() | st.text(max_size=20)


@st.composite
def _tool_calls(draw: st.DrawFn) -> list[ToolCall]:
    ids = draw(st.lists(st.from_regex(r"call_[A-Za-z0-9]{1,12}", fullmatch=True), min_size=1, max_size=4, unique=True))
    return [
        ToolCall(id=call_id, name=draw(_names), arguments=draw(_arguments), signature=draw(_signatures))
        for call_id in ids
    ]


@st.composite
def _conversations(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message(role="system", content=draw(st.text(max_size=20))))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "calls", "orphan"]))
        if kind == "user":
            messages.append(Message(role="user", content=draw(_texts)))
        elif kind == "assistant":
            messages.append(Message(role="assistant", content=draw(_texts)))
        elif kind == "orphan":
            messages.append(Message(role="tool", tool_call_id="call_orphan", content=draw(_texts)))
        else:
            calls = draw(_tool_calls())
            messages.append(Message(role="assistant", content=draw(_texts), tool_calls=calls))
            answered = draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]
            for call in answered:  # in any order, some missing
                messages.append(
                    Message(role="tool", tool_call_id=call.id, content=draw(_texts), is_error=draw(st.booleans()))
                )
            if draw(st.booleans()):
                messages.append(Message(role="user", content=draw(_texts)))
    return messages


def _check_contents(contents: list[dict[str, Any]]) -> None:
    """The structural rules Gemini enforces on ``contents``."""
    assert contents, "contents is not specified"
    assert contents[0]["role"] == "user"
    for index, content in enumerate(contents):
        assert content["role"] in ("user", "model")
        assert content["parts"], f"contents[{index}] has no parts"
        if index:
            assert content["role"] != contents[index - 1]["role"], "consecutive turns of one role"
        for part in content["parts"]:
            kinds = {"text", "functionCall", "functionResponse"} & set(part)
            assert len(kinds) == 1, part
            if "text" in part:
                assert isinstance(part["text"], str)
                assert part["text"]
            if "functionCall" in part:
                assert content["role"] == "model"
                assert isinstance(part["functionCall"]["args"], dict)
            if "functionResponse" in part:
                assert content["role"] == "user"
                assert isinstance(part["functionResponse"]["response"], dict)
        calls = [part["functionCall"] for part in content["parts"] if "functionCall" in part]
        if calls:
            # The next turn answers every call, first of all, in the order of the calls.
            answers = contents[index + 1]["parts"]
            responses = [part["functionResponse"] for part in answers[: len(calls)] if "functionResponse" in part]
            assert [(r["name"], r["id"]) for r in responses] == [(c["name"], c["id"]) for c in calls]
            assert not any("functionResponse" in part for part in answers[len(calls) :])
            assert "thoughtSignature" in next(part for part in content["parts"] if "functionCall" in part)
        if content["role"] == "user":
            previous = contents[index - 1]["parts"] if index else []
            owed = sum("functionCall" in part for part in previous)
            assert sum("functionResponse" in part for part in content["parts"]) == owed


@settings(max_examples=100, deadline=None)
@given(_conversations())
def test_any_conversation_becomes_contents_gemini_accepts(messages: list[Message]) -> None:
    request = CompletionRequest(model="m", messages=messages)
    body = json.loads(json.dumps(build_request_body(request)))  # as sent on the wire
    _check_contents(body["contents"])
    results = [m.content for m in messages if m.role == "tool" and m.content]
    sent = json.dumps(body["contents"])
    assert all(json.dumps(result)[1:-1] in sent for result in results)


@settings(max_examples=60, deadline=None)
@given(_conversations())
def test_tool_calls_survive_the_round_trip_through_the_gemini_format(messages: list[Message]) -> None:
    body = json.loads(json.dumps(build_request_body(CompletionRequest(model="m", messages=messages))))
    sent = [part for content in body["contents"] if content["role"] == "model" for part in content["parts"]]
    echoed = _response([part for part in sent if "functionCall" in part])
    parsed = parse_response(json.loads(json.dumps(echoed)), "m").message.tool_calls or []
    original = [call for message in messages for call in message.tool_calls or []]
    assert [(c.id, c.name, c.arguments) for c in parsed] == [(c.id, c.name, c.arguments) for c in original]
    assert [c.signature for c in parsed] == [
        c.signature or (SKIP_SIGNATURE if c is (m.tool_calls or [])[0] else None)
        for m in messages
        for c in m.tool_calls or []
    ]
