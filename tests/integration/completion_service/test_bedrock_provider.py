"""completion-service served for real in front of a scripted Bedrock runtime that checks SigV4 signatures."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from pydantic import SecretStr

from completion_service.app import create_app
from completion_service.settings import CompletionSettings
from support.fake_bedrock import (
    ACCESS_KEY_ID,
    REGION,
    SECRET_ACCESS_KEY,
    BedrockError,
    BedrockRaw,
    BedrockReply,
    BedrockStreamException,
    ScriptedBedrock,
)
from support.servers import serve_app

pytestmark = pytest.mark.anyio

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
USER = [{"role": "user", "content": "How does the agent loop stop?"}]
SEARCH = {
    "name": "search_documents",
    "description": "Search the documents.",
    "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}


@asynccontextmanager
async def bedrock_service(
    fake: ScriptedBedrock, *, secret: str = SECRET_ACCESS_KEY, **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(fake.app) as upstream:
        configured = CompletionSettings(
            bedrock_region=REGION,
            bedrock_endpoint_url=upstream,
            aws_access_key_id=SecretStr(ACCESS_KEY_ID),
            aws_secret_access_key=SecretStr(secret),
            **settings,
        )
        async with serve_app(create_app(configured)) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": f"bedrock/{MODEL}", "messages": USER, **fields}


async def _events(client: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with client.stream("POST", "/api/v1/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200, await response.aread()
        return [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")]


async def test_a_text_answer_comes_back_from_a_signed_converse_call() -> None:
    fake = ScriptedBedrock([BedrockReply(text="It stops at 15 iterations.")])
    async with bedrock_service(fake) as client:
        response = await client.post("/api/v1/completions", json=_body(maxTokens=100))
    assert response.status_code == 200
    assert response.json() == {
        "message": {"role": "assistant", "content": "It stops at 15 iterations."},
        "finishReason": "stop",
        "usage": {"inputTokens": 12, "outputTokens": 7},
        "model": f"bedrock/{MODEL}",
        "provider": "bedrock",
    }
    [sent] = fake.requests
    assert (sent["model"], sent["action"]) == (MODEL, "converse")
    assert sent["body"] == {
        "messages": [{"role": "user", "content": [{"text": "How does the agent loop stop?"}]}],
        "inferenceConfig": {"maxTokens": 100},
    }
    assert sent["headers"]["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/")


async def test_parallel_tool_calls_and_a_tool_result_turn_round_trip() -> None:
    fake = ScriptedBedrock(
        [
            BedrockReply(
                tool_uses=(
                    ("t1", "search_documents", {"query": "stop"}),
                    ("t2", "search_documents", {"query": "deadline"}),
                )
            ),
            BedrockReply(text="Both found."),
        ]
    )
    async with bedrock_service(fake) as client:
        first = (await client.post("/api/v1/completions", json=_body(tools=[SEARCH]))).json()
        assert first["finishReason"] == "tool_calls"
        calls = first["message"]["toolCalls"]
        assert [(c["id"], c["arguments"]) for c in calls] == [("t1", {"query": "stop"}), ("t2", {"query": "deadline"})]
        results = [{"role": "tool", "toolCallId": c["id"], "content": f"result of {c['id']}"} for c in calls]
        second = await client.post(
            "/api/v1/completions", json=_body(tools=[SEARCH], messages=[*USER, first["message"], *results])
        )
    assert second.json()["message"]["content"] == "Both found."
    turn = fake.requests[1]["body"]["messages"][2]
    assert turn["role"] == "user"
    assert [block["toolResult"]["toolUseId"] for block in turn["content"]] == ["t1", "t2"]


async def test_a_stream_assembles_tool_input_split_across_frames() -> None:
    arguments = {"query": "how does the agent loop stop when the deadline passes"}
    fake = ScriptedBedrock([BedrockReply(text="Looking it up.", tool_uses=(("t1", "search_documents", arguments),))])
    async with bedrock_service(fake) as client:
        events = await _events(client, _body(tools=[SEARCH]))
    texts = [e["delta"] for e in events if e["type"] == "text"]
    assert len(texts) > 1
    assert "".join(texts) == "Looking it up."
    assert [e for e in events if e["type"] == "tool_call"] == [
        {"type": "tool_call", "id": "t1", "name": "search_documents", "arguments": arguments}
    ]
    assert events[-1]["type"] == "done"
    assert events[-1]["finishReason"] == "tool_calls"
    assert fake.requests[0]["action"] == "converse-stream"


async def test_a_streamed_reasoning_block_is_sent_back_with_its_signature() -> None:
    fake = ScriptedBedrock(
        [
            BedrockReply(
                reasoning=("The docs will say.", "c2lnbmF0dXJl"),
                tool_uses=(("t1", "search_documents", {"query": "q"}),),
            ),
            BedrockReply(text="Done."),
        ]
    )
    async with bedrock_service(fake) as client:
        events = await _events(client, _body(tools=[SEARCH]))
        assert "".join(e["delta"] for e in events if e["type"] == "reasoning") == "The docs will say."
        [block] = [e["block"] for e in events if e["type"] == "reasoning_block"]
        assistant = {
            "role": "assistant",
            "reasoning": [block],
            "toolCalls": [{"id": "t1", "name": "search_documents", "arguments": {"query": "q"}}],
        }
        result = {"role": "tool", "toolCallId": "t1", "content": "found"}
        await client.post("/api/v1/completions", json=_body(tools=[SEARCH], messages=[*USER, assistant, result]))
    replayed = fake.requests[1]["body"]["messages"][1]["content"][0]
    assert replayed == {
        "reasoningContent": {"reasoningText": {"text": "The docs will say.", "signature": "c2lnbmF0dXJl"}}
    }


async def test_throttling_with_retry_after_is_retried_then_succeeds() -> None:
    throttled = BedrockError(429, "ThrottlingException", "Too many requests", headers={"Retry-After": "0"})
    fake = ScriptedBedrock([throttled, BedrockReply(text="ok")])
    async with bedrock_service(fake) as client:
        with anyio.fail_after(5):
            response = await client.post("/api/v1/completions", json=_body())
    assert response.json()["message"]["content"] == "ok"
    assert len(fake.requests) == 2
    # Each attempt is signed afresh, and both signatures were accepted.
    assert all(r["headers"]["authorization"] for r in fake.requests)


async def test_service_unavailable_twice_then_success() -> None:
    busy = BedrockError(503, "ServiceUnavailableException", "Bedrock is unable to process your request.")
    fake = ScriptedBedrock([busy, busy, BedrockReply(text="third time")])
    async with bedrock_service(fake) as client:
        response = await client.post("/api/v1/completions", json=_body())
    assert response.json()["message"]["content"] == "third time"
    assert len(fake.requests) == 3


async def test_a_wrong_secret_fails_the_signature_with_a_clear_502_and_no_retry() -> None:
    fake = ScriptedBedrock([BedrockReply(text="never")])
    async with bedrock_service(fake, secret="not-the-secret-key") as client:
        response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "auth_failed"
    assert "COMPLETION_AWS_ACCESS_KEY_ID" in error["message"]
    assert "not-the-secret-key" not in response.text
    assert fake.requests == []  # refused at the signature check, never retried


async def test_a_fallback_model_answers_when_bedrock_stays_unavailable() -> None:
    busy = BedrockError(500, "InternalServerException", "An internal server error occurred.")
    fake = ScriptedBedrock([busy, busy, BedrockReply(text="from the fallback")])
    catalog = [
        {"name": "primary", "provider": "bedrock", "model": "model-a", "fallbacks": ["secondary"]},
        {"name": "secondary", "provider": "bedrock", "model": "model-b"},
    ]
    async with bedrock_service(fake, models=json.dumps(catalog), max_retries=1) as client:
        response = await client.post("/api/v1/completions", json={"model": "primary", "messages": USER})
    assert response.status_code == 200
    assert (response.json()["model"], response.json()["provider"]) == ("secondary", "bedrock")
    assert [r["model"] for r in fake.requests] == ["model-a", "model-a", "model-b"]


async def test_a_malformed_body_is_a_clear_502() -> None:
    fake = ScriptedBedrock([BedrockRaw(b'{"output": "not a message"}')])
    async with bedrock_service(fake) as client:
        response = await client.post("/api/v1/completions", json=_body())
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "bad_upstream_response"


async def test_a_broken_event_stream_frame_ends_the_stream_with_an_error_event() -> None:
    fake = ScriptedBedrock(
        [BedrockRaw(b"\x00\x00\x00\x10garbage-garbage", content_type="application/vnd.amazon.eventstream")]
    )
    async with bedrock_service(fake) as client:
        response = await client.post("/api/v1/completions", json=_body(stream=True))
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "bad_upstream_response"


async def test_a_stream_answered_with_json_says_which_content_type_came_instead_of_a_checksum_error() -> None:
    refusal = b'{"message": "The model does not support streaming."}'
    fake = ScriptedBedrock([BedrockRaw(refusal, content_type="application/json")])
    async with bedrock_service(fake) as client:
        response = await client.post("/api/v1/completions", json=_body(stream=True))
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "bad_upstream_response"
    assert "application/vnd.amazon.eventstream" in error["message"]
    assert "'application/json'" in error["message"]
    assert "Checksum" not in error["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_temperature_above_one_is_clamped_for_claude_models(stream: bool) -> None:
    fake = ScriptedBedrock([BedrockReply(text="Warm.")])
    async with bedrock_service(fake) as client:
        body = _body(model="bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", temperature=1.7, stream=stream)
        response = await client.post("/api/v1/completions", json=body)
    assert response.status_code == 200, response.text
    assert fake.requests[0]["body"]["inferenceConfig"] == {"temperature": 1.0}


async def test_an_exception_frame_mid_stream_becomes_an_error_event() -> None:
    fake = ScriptedBedrock([BedrockStreamException("modelStreamErrorException", "The model failed.", text="Partial")])
    async with bedrock_service(fake) as client:
        events = await _events(client, _body())
    assert events[0] == {"type": "text", "delta": "Partial"}
    assert events[-1]["type"] == "error"
    assert events[-1]["code"] == "upstream_unavailable"


async def test_a_throttling_frame_before_any_content_is_a_429_with_retry_after() -> None:
    fake = ScriptedBedrock([BedrockStreamException("throttlingException", "Too many tokens, please wait.")])
    async with bedrock_service(fake) as client:
        response = await client.post("/api/v1/completions", json=_body(stream=True))
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert response.headers["retry-after"] == "1"  # the retry policy's wait after a first attempt, rounded up


# --- generation controls -------------------------------------------------------------------------

SONNET = "us.anthropic.claude-sonnet-4-20250514-v1:0"


@pytest.mark.parametrize("stream", [False, True])
async def test_claude_on_bedrock_thinks_with_the_budget_of_the_effort_as_on_anthropic(stream: bool) -> None:
    fake = ScriptedBedrock([BedrockReply(text="It stops at 15 iterations.", reasoning=("Check the cap.", "c2ln"))])
    body = _body(model=f"bedrock/{SONNET}", reasoning={"effort": "high", "summary": "none"}, temperature=0.3)
    async with bedrock_service(fake) as client:
        if stream:
            events = await _events(client, body)
            done = events[-1]
            blocks = [e["block"] for e in events if e["type"] == "reasoning_block"]
            assert [e for e in events if e["type"] == "reasoning"] == []
        else:
            response = await client.post("/api/v1/completions", json=body)
            done = response.json()
            blocks = done["message"]["reasoning"]
    sent = fake.requests[0]["body"]
    assert sent["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 24576}}
    assert sent["inferenceConfig"] == {"maxTokens": 24576 + 4096}  # no temperature with thinking
    assert done["warnings"] == ["temperature ignored: Claude takes no temperature with extended thinking."]
    assert blocks == [{"text": "Check the cap.", "signature": "c2ln", "provider": "bedrock"}]  # kept for the next round


async def test_a_bedrock_model_other_than_claude_said_to_reason_ignores_the_effort_and_says_so() -> None:
    catalog = [{"name": "nova", "provider": "bedrock", "model": "amazon.nova-pro-v1:0", "reasoning": True}]
    fake = ScriptedBedrock([BedrockReply(text="It stops at 15 iterations.")])
    async with bedrock_service(fake, models=json.dumps(catalog)) as client:
        response = await client.post("/api/v1/completions", json=_body(model="nova", reasoning={"effort": "low"}))
    assert response.status_code == 200
    assert response.json()["warnings"] == [
        "reasoning ignored: of Bedrock's models only Claude takes it, not 'amazon.nova-pro-v1:0'."
    ]
    assert "additionalModelRequestFields" not in fake.requests[0]["body"]
