"""Image parts as each wire format writes them (exact request bodies), and which models take images."""

from __future__ import annotations

from typing import Any

import pytest

from completion_service.model_facts import facts_by_name
from completion_service.providers import anthropic, bedrock, gemini, openai, openai_responses
from completion_service.providers._images import data_image
from completion_service.providers.tool_turns import repaired
from suite_common.wire import CompletionRequest

DATA = "data:image/jpeg;base64,/9j/4AAQ"
HTTPS = "https://images.example.com/cat.png"


def _request(*, url: str = DATA, detail: str | None = None) -> CompletionRequest:
    image: dict[str, Any] = {"url": url} | ({"detail": detail} if detail else {})
    return CompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": image}],
                },
                {"role": "assistant", "toolCalls": [{"id": "c1", "name": "look", "arguments": {}}]},
                {
                    "role": "tool",
                    "toolCallId": "c1",
                    "content": [{"type": "text", "text": "Seen."}, {"type": "image_url", "image_url": image}],
                },
                {"role": "user", "content": "And now?"},
            ],
        }
    )


def test_chat_completions_sends_image_url_parts_and_a_tool_image_in_a_user_message_after_the_round() -> None:
    body = openai.build_request_body(_request(url=HTTPS, detail="low"), "gpt-4o", stream=False)
    image = {"type": "image_url", "image_url": {"url": HTTPS, "detail": "low"}}
    assert body["messages"][1:] == [
        {"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Seen."},
        {"role": "user", "content": [{"type": "text", "text": "Images returned by the tool call c1:"}, image]},
        {"role": "user", "content": "And now?"},
    ]


def test_the_responses_api_sends_input_image_parts() -> None:
    body = openai_responses.build_request_body(_request(), "gpt-5", stream=False)
    image = {"type": "input_image", "image_url": DATA, "detail": "auto"}
    assert body["input"][0] == {"role": "user", "content": [{"type": "input_text", "text": "What is it?"}, image]}
    assert body["input"][2] == {"type": "function_call_output", "call_id": "c1", "output": "Seen."}
    assert body["input"][3] == {
        "role": "user",
        "content": [{"type": "input_text", "text": "Images returned by the tool call c1:"}, image],
    }


@pytest.mark.parametrize(
    ("url", "source"),
    [
        (DATA, {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}),
        (HTTPS, {"type": "url", "url": HTTPS}),  # Anthropic fetches https images itself
    ],
)
def test_anthropic_sends_image_blocks_in_the_user_turn_and_inside_the_tool_result(
    url: str, source: dict[str, Any]
) -> None:
    body = anthropic.build_request_body(_request(url=url), "claude-sonnet-4-5", stream=False)
    image = {"type": "image", "source": source}
    assert body["messages"][0] == {"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "Seen."}, image]},
        {"type": "text", "text": "And now?"},
    ]


def test_gemini_sends_inline_data_with_the_tool_images_after_the_function_responses() -> None:
    body = gemini.build_request_body(_request())
    blob = {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQ"}}
    assert body["contents"][0] == {"role": "user", "parts": [{"text": "What is it?"}, blob]}
    assert body["contents"][2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "look", "response": {"result": "Seen."}, "id": "c1"}},
            {"text": "Images returned by the tool look:"},
            blob,
            {"text": "And now?"},
        ],
    }


def test_bedrock_sends_image_bytes_in_the_user_turn_and_in_the_tool_result() -> None:
    body = bedrock.build_request_body(_request(), upstream_model="anthropic.claude-3-5-sonnet-20240620-v1:0")
    image = {"image": {"format": "jpeg", "source": {"bytes": "/9j/4AAQ"}}}
    assert body["messages"][0] == {"role": "user", "content": [{"text": "What is it?"}, image]}
    assert body["messages"][2]["content"][0] == {
        "toolResult": {"toolUseId": "c1", "content": [{"text": "Seen."}, image], "status": "success"}
    }


@pytest.mark.parametrize(
    "url",
    [
        "data:image/svg+xml;base64,PHN2Zy8+",
        "data:image/png;base64,@@@",
        "data:image/png,raw",
        "data:text/plain;base64,",
    ],
)
def test_a_data_url_that_is_not_a_base64_image_of_a_taken_type_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="image"):
        data_image(url)


@pytest.mark.parametrize(
    ("kind", "model", "images"),
    [
        ("openai", "gpt-4o-mini", True),
        ("openai", "gpt-5", True),
        ("openai", "gpt-3.5-turbo", False),
        ("openai", "o3-mini", False),
        ("openai", "llama3.1:8b", None),  # a compatible server's model: unknown, the server decides
        ("openai-responses", "o4-mini", True),
        ("anthropic", "claude-sonnet-4-5", True),
        ("gemini", "gemini-2.5-flash", True),
        ("vertex", "gemini-1.0-pro", False),
        ("bedrock", "us.anthropic.claude-3-5-sonnet-20240620-v1:0", True),
        ("bedrock", "amazon.nova-micro-v1:0", False),
        ("bedrock", "amazon.nova-pro-v1:0", True),
        ("demo", "demo", True),
    ],
)
def test_the_known_models_say_whether_they_take_images(kind: str, model: str, images: bool | None) -> None:
    assert facts_by_name(kind, model).images is images


def test_a_stray_tool_result_quoted_as_a_user_message_keeps_its_images() -> None:
    image = {"type": "image_url", "image_url": {"url": DATA}}
    request = CompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Look."},
                {"role": "tool", "toolCallId": "lost", "content": [{"type": "text", "text": "Seen."}, image]},
            ],
        }
    )
    body = openai.build_request_body(repaired(request), "gpt-4o", stream=False)
    assert body["messages"][1] == {
        "role": "user",
        "content": [{"type": "text", "text": "Result of tool call lost:\nSeen."}, image],
    }
