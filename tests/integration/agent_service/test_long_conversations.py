"""A conversation far longer than the model's window, answered all the same: agent-service folds its oldest turns
into a summary made through completion-service, stores it, and the next run of the conversation starts from it.

Real agent-service (SQLite run store), real completion-service, real gateway; the LLM is a scripted OpenAI, Anthropic
or Gemini server that refuses a prompt longer than its 32k window exactly as that provider does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from agent_service.store import RunStore
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support import fake_anthropic, fake_gemini, fake_openai
from support.context_window import prompt_tokens
from support.databases import fresh_database
from support.mcp_gateway import running_gateway
from support.run_streams import RunEvents, events_of, streamed_run
from support.servers import serve_app
from support.stacks import running_agent

pytestmark = pytest.mark.anyio

WINDOW = 32_768
SUMMARISE = "You summarise the earlier part of a conversation"
SUMMARY_SENT = "Summary of the earlier conversation: "


@dataclass
class Provider:
    kind: str
    fake: Any
    upstream: str
    settings: Callable[[str], dict[str, Any]]
    text: Callable[[str], Any]
    error: Callable[[], Any]
    """The provider's own "too long" refusal, scripted (for the retry)."""


def _providers() -> dict[str, Callable[[], Provider]]:
    def openai() -> Provider:
        fake = fake_openai.ScriptedOpenAI(context_window=WINDOW)
        return Provider(
            "openai",
            fake,
            "gpt-4o",
            lambda url: {"openai_base_url": f"{url}/v1", "openai_api_key": SecretStr("test-key")},
            fake_openai.text,
            lambda: fake_openai.error(
                400,
                fake_openai.openai_error_body(
                    400, "This model's maximum context length is 32768 tokens.", "context_length_exceeded"
                ),
            ),
        )

    def anthropic() -> Provider:
        fake = fake_anthropic.ScriptedAnthropic(context_window=WINDOW)
        return Provider(
            "anthropic",
            fake,
            "claude-sonnet-4-5",
            lambda url: {"anthropic_base_url": url, "anthropic_api_key": SecretStr("test-key")},
            fake_anthropic.text,
            lambda: fake_anthropic.error(400, message="prompt is too long: 40000 tokens > 32768 maximum"),
        )

    def gemini() -> Provider:
        fake = fake_gemini.ScriptedGemini(context_window=WINDOW)
        return Provider(
            "gemini",
            fake,
            "gemini-2.0-flash",
            lambda url: {"gemini_base_url": url, "gemini_api_key": SecretStr(fake.api_key)},
            fake_gemini.text,
            lambda: fake_gemini.error(
                400, "The input token count (40000) exceeds the maximum number of tokens allowed (32768)."
            ),
        )

    return {"openai": openai, "anthropic": anthropic, "gemini": gemini}


PROVIDERS = _providers()


@dataclass
class Stack:
    provider: Provider
    http: httpx.AsyncClient
    database: str
    """The run store's URL."""
    summaries: list[dict[str, Any]]
    """The summary requests the provider got, in order."""
    answers: list[dict[str, Any]]
    """The other requests (the run's own calls), in order."""


@asynccontextmanager
async def _stack(kind: str, folder: Path, *, refusals: int = 0, backend: str = "sqlite") -> AsyncIterator[Stack]:
    """``refusals``: the first so many answer calls (not summary calls) are refused as too long, whatever their size."""
    provider = PROVIDERS[kind]()
    summaries: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = []

    def reply(body: dict[str, Any]) -> Any:
        if SUMMARISE in json.dumps(body):
            summaries.append(body)
            return provider.text(f"Summary {len(summaries)}: the user and the assistant went through many turns.")
        answers.append(body)
        if len(answers) <= refusals:
            return provider.error()
        return provider.text("The answer, from the summary and the newest turns.")

    provider.fake.push(*[reply] * 200)
    catalog = [{"name": "small", "provider": kind, "model": provider.upstream, "contextTokens": WINDOW}]
    with fresh_database(backend, folder, "runs") as database:
        async with serve_app(provider.fake.app) as llm_url, running_gateway({}) as gateway:
            settings = CompletionSettings(
                models=json.dumps(catalog), max_retries=0, demo_enabled=False, **provider.settings(llm_url)
            )
            async with (
                serve_app(create_completion_app(settings)) as completion_url,
                running_agent(
                    completion_url, gateway, database_url=database, conversation_max_bytes=16 * 1024 * 1024
                ) as agent_url,
                httpx.AsyncClient(base_url=agent_url, timeout=60) as http,
            ):
                yield Stack(provider, http, database, summaries, answers)


def _history(tokens: int, *, start: int = 0) -> list[dict[str, str]]:
    """Alternating user and assistant turns holding ``tokens`` tokens as the fakes count them."""
    messages: list[dict[str, str]] = []
    turn, counted = start, 0
    while counted < tokens:
        role = "user" if turn % 2 == 0 else "assistant"
        words = " ".join(f"{role}{turn}word{n}" for n in range(400))
        messages.append({"role": role, "content": f"Turn {turn}: {words}"})
        counted += prompt_tokens(messages[-1]["content"])
        turn += 1
    if messages[-1]["role"] == "user":
        messages.append({"role": "assistant", "content": f"Turn {turn}: noted."})
    return messages


async def _run(http: httpx.AsyncClient, body: dict[str, Any]) -> RunEvents:
    return await streamed_run(http, "/api/v1/agent/run", body)


async def _stored_summary(database: str, conversation_id: str) -> Any:
    store = await RunStore.open(database)
    try:
        return await store.get_summary("default", conversation_id)
    finally:
        await store.aclose()


def _sent_tokens(request: dict[str, Any]) -> int:
    return prompt_tokens(
        request.get("messages"), request.get("system"), request.get("contents"), request.get("systemInstruction")
    )


@pytest.mark.parametrize(
    ("kind", "backend"), [("openai", "sqlite"), ("anthropic", "sqlite"), ("gemini", "sqlite"), ("openai", "postgresql")]
)
async def test_a_conversation_of_500k_tokens_is_answered_by_a_32k_model_and_its_summary_reused(
    kind: str, backend: str, tmp_path: Path
) -> None:
    history = _history(500_000)
    question = {"role": "user", "content": "So, where did we get to?"}
    async with _stack(kind, tmp_path, backend=backend) as stack:
        events = await _run(
            stack.http,
            {"model": "small", "conversationId": "long", "tools": [], "messages": [*history, question]},
        )
        (done,) = events_of(events, "done")
        assert done["finishReason"] == "stop", events[-3:]
        assert (
            "".join(e["delta"] for e in events_of(events, "text"))
            == "The answer, from the summary and the newest turns."
        )
        (compacted,) = events_of(events, "context_compacted")
        assert compacted["messagesFolded"] > 0
        assert compacted["tokensBefore"] > 500_000 > WINDOW > compacted["tokensAfter"]
        # The summary was made in chunks, each within the window; the run's one call got the summary and the question.
        first_fold = len(stack.summaries)
        assert first_fold >= 500_000 // WINDOW
        assert all(_sent_tokens(request) <= WINDOW for request in stack.summaries)
        (answered,) = stack.answers
        sent = json.dumps(answered)
        assert SUMMARY_SENT + f"Summary {first_fold}:" in sent
        assert "So, where did we get to?" in sent
        assert _sent_tokens(answered) <= WINDOW
        stored = await _stored_summary(stack.database, "long")
        assert stored.summary.startswith(f"Summary {first_fold}:")
        assert 0 < stored.covers <= len(history)
        # The summary calls count in the run's usage: more input than the one answered call had.
        assert done["usage"]["inputTokens"] > _sent_tokens(answered)

        # The next run of the conversation starts from the stored summary: no summary call at all.
        events = await _run(
            stack.http,
            {
                "model": "small",
                "conversationId": "long",
                "tools": [],
                "messages": [{"role": "user", "content": "And?"}],
            },
        )
        assert events_of(events, "done")[0]["finishReason"] == "stop"
        assert len(stack.summaries) == first_fold
        assert SUMMARY_SENT + f"Summary {first_fold}:" in json.dumps(stack.answers[-1])

        # A run that grows it past the window again folds once more: the previous summary and the new turns only.
        grown = _history(40_000, start=10_000)
        events = await _run(
            stack.http,
            {
                "model": "small",
                "conversationId": "long",
                "tools": [],
                "messages": [*grown, {"role": "user", "content": "Now?"}],
            },
        )
        assert events_of(events, "done")[0]["finishReason"] == "stop"
        new_calls = stack.summaries[first_fold:]
        assert 1 <= len(new_calls) <= 3
        assert f"Summary {first_fold}:" in json.dumps(new_calls[0])
        assert "Turn 0:" not in json.dumps(new_calls)
        assert (await _stored_summary(stack.database, "long")).covers > stored.covers


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
async def test_a_provider_that_refuses_the_prompt_as_too_long_gets_a_harder_fold_once(
    kind: str, tmp_path: Path
) -> None:
    # The history fits the window by the estimate, so the first call is sent whole; the provider refuses it in its
    # own words, and the fitter folds at least half of it into a summary and asks once more.
    history = _history(15_000)
    async with _stack(kind, tmp_path, refusals=1) as stack:
        events = await _run(
            stack.http,
            {"model": "small", "tools": [], "messages": [*history, {"role": "user", "content": "Well?"}]},
        )
        assert events_of(events, "done")[0]["finishReason"] == "stop", events[-3:]
        (compacted,) = events_of(events, "context_compacted")
        assert compacted["messagesFolded"] >= len(history) // 2
        assert len(stack.answers) == 2
        assert len(stack.summaries) == 1
        assert SUMMARY_SENT + "Summary 1:" in json.dumps(stack.answers[1])


async def test_a_prompt_refused_again_after_the_harder_fold_fails_the_run_with_context_length_exceeded(
    tmp_path: Path,
) -> None:
    async with _stack("openai", tmp_path, refusals=2) as stack:
        events = await _run(
            stack.http,
            {"model": "small", "tools": [], "messages": [*_history(15_000), {"role": "user", "content": "Well?"}]},
        )
        (error,) = events_of(events, "error")
        assert error["code"] == "context_length_exceeded"
        assert len(stack.answers) == 2
