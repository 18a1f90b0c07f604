"""Reasoning and verbosity on agent-service's faces (issue 30), through the real services.

A run's ``reasoning`` and ``verbosity`` (the request's, else its persona's) reach the provider in every LLM call,
through the agent API and through the OpenAI front (OpenAI's own ``reasoning_effort`` and ``verbosity``, sent by the
official SDK); the model's reasoning reaches an OpenAI client as ``reasoning_content`` when it asks with
``X-Agent-Reasoning: true``; reasoning tokens and the warnings of controls a model ignored reach the caller.

agent-service, completion-service and mcp-client-service (echo tools over HTTP) run on loopback; the LLMs are
scripted servers speaking OpenAI's and Anthropic's wire formats (Anthropic's with extended thinking).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from pydantic import SecretStr

from support import fake_anthropic, fake_openai
from support.caller_keys import as_caller, key_entry
from support.fake_anthropic import ScriptedAnthropic
from support.servers import serve_app
from support.stacks import AgentStack, running_stack

pytestmark = pytest.mark.anyio

KEY = "acme-" + uuid.uuid4().hex
CALLERS_FILE = f"""
[personas.thinker]
model = "gpt-5"
reasoning_effort = "high"
verbosity = "high"

[tenants.acme]

{key_entry("acme-app", "acme", KEY)}
"""

THOUGHT = "The user wants an echo: call echo, then answer with what it said."
CLAUDE = "anthropic/claude-sonnet-4-5"


@dataclass
class Stack(AgentStack):
    anthropic_llm: ScriptedAnthropic

    def sdk(self, **headers: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.agent_url}/v1", api_key=KEY, max_retries=0, default_headers=headers or None
        )


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    folder = tmp_path_factory.mktemp("reasoning")
    callers = folder / "callers.toml"
    callers.write_text(CALLERS_FILE)
    anthropic_llm = ScriptedAnthropic()
    async with serve_app(anthropic_llm.app) as anthropic_url:
        anthropic = {
            "anthropic_base_url": anthropic_url,
            "anthropic_api_key": SecretStr("test-key"),
            "anthropic_thinking_budget_tokens": 2048,
        }
        async with running_stack(completion_settings=anthropic, headers=as_caller(KEY), callers_file=callers) as stack:
            yield Stack(**vars(stack), anthropic_llm=anthropic_llm)


@pytest.fixture
async def fresh(stack: Stack) -> Stack:
    stack.llm.requests.clear()
    stack.anthropic_llm.requests.clear()
    return stack


def _user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def _echo_then(answer: str) -> list[fake_openai.Reply]:
    return [fake_openai.tool_calls(("call_echo", "echo", {"text": "ping"})), fake_openai.text(answer)]


def _controls(body: dict[str, Any]) -> tuple[Any, Any]:
    return body.get("reasoning_effort"), body.get("verbosity")


def _completion_with_reasoning_tokens(content: str, reasoning_tokens: int) -> fake_openai.Reply:
    """A whole OpenAI answer whose usage reports reasoning tokens (``completion_tokens_details``)."""
    body = {
        "id": "chatcmpl-reasoned",
        "object": "chat.completion",
        "created": fake_openai.CREATED,
        "model": "gpt-5",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 40,
            "total_tokens": 52,
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        },
    }
    return fake_openai.raw(json.dumps(body).encode())


async def test_a_runs_reasoning_and_verbosity_reach_the_provider_in_every_round(fresh: Stack) -> None:
    fresh.llm.push(*_echo_then("It said ping."))
    body = {"model": "gpt-5", "messages": _user("echo ping"), "reasoning": {"effort": "low"}, "verbosity": "low"}
    response = await fresh.http.post("/api/v1/agent/run", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["iterations"] == 2
    assert [_controls(sent) for sent in fresh.llm.requests] == [("low", "low"), ("low", "low")]


async def test_a_personas_reasoning_and_verbosity_reach_the_provider_and_the_requests_own_win(fresh: Stack) -> None:
    fresh.llm.push(fake_openai.text("Thought hard."), fake_openai.text("Thought a little."))
    preset = await fresh.http.post("/api/v1/agent/run", json={"persona": "thinker", "messages": _user("hi")})
    assert preset.status_code == 200, preset.text
    own = {"persona": "thinker", "messages": _user("hi"), "reasoning": {"effort": "minimal"}}
    overridden = await fresh.http.post("/api/v1/agent/run", json=own)
    assert overridden.status_code == 200, overridden.text
    assert [_controls(sent) for sent in fresh.llm.requests] == [("high", "high"), ("minimal", "high")]


async def test_the_openai_sdks_reasoning_effort_and_verbosity_reach_the_provider_through_the_front(
    fresh: Stack,
) -> None:
    fresh.llm.push(*_echo_then("It said ping."), fake_openai.text("Plain."))
    async with fresh.sdk() as client:
        run = await client.chat.completions.create(
            model="gpt-5", messages=_user("echo ping"), reasoning_effort="high", verbosity="low"
        )
    async with fresh.sdk(**{"X-Agent-Disabled": "true"}) as client:  # one plain completion, not a run
        plain = await client.chat.completions.create(model="gpt-5", messages=_user("hi"), reasoning_effort="minimal")
    assert (run.choices[0].message.content, plain.choices[0].message.content) == ("It said ping.", "Plain.")
    sent = [_controls(body) for body in fresh.llm.requests]
    assert sent == [("high", "low"), ("high", "low"), ("minimal", None)]


async def test_reasoning_tokens_and_ignored_controls_reach_the_agent_api_and_the_front(fresh: Stack) -> None:
    fresh.llm.push(_completion_with_reasoning_tokens("Reasoned.", 30))
    answer = await fresh.http.post("/api/v1/agent/run", json={"model": "gpt-5", "messages": _user("hi")})
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["reasoningTokens"] == 30
    fresh.llm.push(_completion_with_reasoning_tokens("Reasoned.", 25))
    async with fresh.sdk() as client:
        completion = await client.chat.completions.create(model="gpt-5", messages=_user("hi"))
    assert completion.usage is not None
    assert completion.usage.completion_tokens_details is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens == 25
    # gpt-4o cannot reason: the control is dropped, and the caller is told so, in the answer and the done event.
    fresh.llm.push(fake_openai.text("No thinking."), fake_openai.text("No thinking."))
    body = {"model": "gpt-4o", "messages": _user("hi"), "reasoning": {"effort": "high"}}
    answer = await fresh.http.post("/api/v1/agent/run", json=body)
    assert answer.status_code == 200, answer.text
    [warning] = answer.json()["warnings"]
    assert "reasoning" in warning
    streamed = await fresh.http.post("/api/v1/agent/run", json={**body, "stream": True})
    done = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")][-1]
    assert (done["type"], done["warnings"]) == ("done", [warning])
    assert "reasoning_effort" not in fresh.llm.requests[-1]


async def _stream_front(stack: Stack, **headers: str) -> list[dict[str, Any]]:
    """A streamed echo run through Anthropic with thinking, as OpenAI chunks (the SDK's parse of each)."""
    stack.anthropic_llm.push(
        fake_anthropic.tool_calls(
            ("toolu_01Echo", "echo", {"text": "ping"}), reasoning=[fake_anthropic.thinking(THOUGHT)]
        ),
        fake_anthropic.text("It said ping.", reasoning=[fake_anthropic.thinking("Now answer.")]),
    )
    async with stack.sdk(**headers) as client:
        stream = await client.chat.completions.create(
            model=CLAUDE, messages=_user("echo ping"), stream=True, stream_options={"include_usage": True}
        )
        return [chunk.model_dump() async for chunk in stream]


def _deltas(chunks: list[dict[str, Any]], field: str) -> str:
    return "".join(
        choice["delta"].get(field) or "" for chunk in chunks for choice in chunk["choices"] if choice.get("delta")
    )


async def test_x_agent_reasoning_streams_the_reasoning_as_reasoning_content_deltas_and_without_it_none(
    fresh: Stack,
) -> None:
    chunks = await _stream_front(fresh, **{"X-Agent-Reasoning": "true"})
    assert _deltas(chunks, "reasoning_content") == THOUGHT + "\n\nNow answer."
    assert _deltas(chunks, "content") == "It said ping."
    first_reasoning = next(
        i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["delta"].get("reasoning_content")
    )
    first_text = next(i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["delta"].get("content"))
    assert first_reasoning < first_text  # the model's thinking comes before its answer, as it happened
    plain = await _stream_front(fresh)
    assert _deltas(plain, "reasoning_content") == ""
    assert _deltas(plain, "content") == "It said ping."


async def test_x_agent_reasoning_puts_the_reasoning_in_a_whole_answer_and_without_it_none(fresh: Stack) -> None:
    for header, expected in (("true", THOUGHT + "\n\nNow answer."), ("false", None)):
        fresh.anthropic_llm.push(
            fake_anthropic.tool_calls(
                ("toolu_01Echo", "echo", {"text": "ping"}), reasoning=[fake_anthropic.thinking(THOUGHT)]
            ),
            fake_anthropic.text("It said ping.", reasoning=[fake_anthropic.thinking("Now answer.")]),
        )
        async with fresh.sdk(**{"X-Agent-Reasoning": header}) as client:
            completion = await client.chat.completions.create(model=CLAUDE, messages=_user("echo ping"))
        message = completion.choices[0].message
        assert message.content == "It said ping."
        assert (message.model_extra or {}).get("reasoning_content") == expected


async def test_x_agent_reasoning_streams_a_plain_completions_reasoning_too(fresh: Stack) -> None:
    fresh.anthropic_llm.push(fake_anthropic.text("Hello.", reasoning=[fake_anthropic.thinking(THOUGHT)]))
    headers = {"X-Agent-Reasoning": "true", "X-Agent-Disabled": "true"}
    async with fresh.sdk(**headers) as client:
        stream = await client.chat.completions.create(model=CLAUDE, messages=_user("hi"), stream=True)
        chunks = [chunk.model_dump() async for chunk in stream]
    assert (_deltas(chunks, "reasoning_content"), _deltas(chunks, "content")) == (THOUGHT, "Hello.")


async def test_a_wrong_x_agent_reasoning_header_is_a_400(fresh: Stack) -> None:
    async with fresh.sdk(**{"X-Agent-Reasoning": "maybe"}) as client:
        with pytest.raises(openai.BadRequestError, match="X-Agent-Reasoning"):
            await client.chat.completions.create(model=CLAUDE, messages=_user("hi"))


async def test_x_agent_reasoning_in_final_only_mode_sends_the_whole_reasoning_before_the_text(fresh: Stack) -> None:
    chunks = await _stream_front(fresh, **{"X-Agent-Reasoning": "true", "X-Agent-Stream-Mode": "final_only"})
    assert _deltas(chunks, "reasoning_content") == THOUGHT + "\n\nNow answer."
    assert _deltas(chunks, "content") == "It said ping."
    kinds = [
        next(iter(k for k in ("reasoning_content", "content") if c["choices"][0]["delta"].get(k)), None)
        for c in chunks
        if c["choices"]
    ]
    assert kinds.index("content") > max(i for i, kind in enumerate(kinds) if kind == "reasoning_content")
