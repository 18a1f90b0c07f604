"""Every completion's ``usage.costUsd``, at the prices of the catalog entry that answered, served for real in
front of two scripted OpenAI-compatible servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from completion_service.app import create_app
from completion_service.settings import CompletionSettings
from support.fake_openai import ScriptedOpenAI, error, text
from support.servers import serve_app

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "What does this answer cost?"}]
SMART = {"inputPerMillionUsd": 2.5, "outputPerMillionUsd": 10.0}
STEADY = {"inputPerMillionUsd": 0.15, "outputPerMillionUsd": 0.6}


@asynccontextmanager
async def priced_catalog(primary: ScriptedOpenAI, backup: ScriptedOpenAI) -> AsyncIterator[httpx.AsyncClient]:
    """``smart`` (primary, priced, falling back to ``steady``), ``steady`` (backup, priced lower), ``plain``
    (primary, no prices) and ``direct`` (primary, priced, falling back to ``openai/small-model`` on the backup)."""
    async with serve_app(primary.app) as primary_url, serve_app(backup.app) as backup_url:
        own = {"provider": "openai", "baseUrl": f"{primary_url}/v1", "apiKey": "test-key"}
        catalog = [
            {"name": "smart", "model": "big-model", "fallbacks": ["steady"], "prices": SMART, **own},
            {"name": "steady", **own, "model": "small-model", "baseUrl": f"{backup_url}/v1", "prices": STEADY},
            {"name": "plain", "model": "big-model", **own},
            {"name": "direct", "model": "big-model", "fallbacks": ["openai/small-model"], "prices": SMART, **own},
        ]
        settings = CompletionSettings(
            models=json.dumps(catalog),
            max_retries=1,
            openai_base_url=f"{backup_url}/v1",
            openai_api_key=SecretStr("test-key"),
        )
        async with serve_app(create_app(settings)) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


def at(prices: dict[str, float], usage: dict[str, Any]) -> float:
    """What ``usage``'s tokens cost at ``prices``, worked out here from the answer's own token counts."""
    input_tokens, output_tokens = int(usage["inputTokens"]), int(usage["outputTokens"])
    return (input_tokens * prices["inputPerMillionUsd"] + output_tokens * prices["outputPerMillionUsd"]) / 1e6


async def streamed_events(client: httpx.AsyncClient, model: str) -> list[dict[str, Any]]:
    body = {"model": model, "messages": USER, "stream": True}
    async with client.stream("POST", "/api/v1/completions", json=body) as response:
        assert response.status_code == 200
        lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    return [json.loads(line.removeprefix("data: ")) for line in lines]


async def test_a_json_answer_carries_its_cost_at_the_models_prices() -> None:
    async with priced_catalog(ScriptedOpenAI([text("Priced answer, five words.")]), ScriptedOpenAI()) as client:
        response = await client.post("/api/v1/completions", json={"model": "smart", "messages": USER})
    assert response.status_code == 200
    usage = response.json()["usage"]
    assert min(usage["inputTokens"], usage["outputTokens"]) > 0
    assert usage["costUsd"] == pytest.approx(at(SMART, usage))


async def test_a_streamed_answers_done_event_carries_its_cost() -> None:
    async with priced_catalog(ScriptedOpenAI([text("Streamed and priced.")]), ScriptedOpenAI()) as client:
        events = await streamed_events(client, "smart")
    done = events[-1]
    assert done["type"] == "done"
    assert min(done["usage"]["inputTokens"], done["usage"]["outputTokens"]) > 0
    assert done["usage"]["costUsd"] == pytest.approx(at(SMART, done["usage"]))
    assert all("usage" not in event for event in events[:-1])


async def test_when_a_fallback_answers_its_own_prices_apply() -> None:
    primary = ScriptedOpenAI([error(503), error(503), error(503), error(503)])
    backup = ScriptedOpenAI([text("The backup answered."), text("The backup streamed.")])
    async with priced_catalog(primary, backup) as client:
        response = await client.post("/api/v1/completions", json={"model": "smart", "messages": USER})
        done = (await streamed_events(client, "smart"))[-1]
    answer = response.json()
    assert answer["model"] == "steady"
    assert answer["usage"]["costUsd"] == pytest.approx(at(STEADY, answer["usage"]))
    assert answer["usage"]["costUsd"] != pytest.approx(at(SMART, answer["usage"]))
    assert done["model"] == "steady"
    assert done["usage"]["costUsd"] == pytest.approx(at(STEADY, done["usage"]))


async def test_a_model_without_prices_and_a_provider_fallback_have_no_cost() -> None:
    primary = ScriptedOpenAI([text("Unpriced."), text("Unpriced, streamed."), error(503), error(503)])
    backup = ScriptedOpenAI([text("From openai/small-model.")])
    async with priced_catalog(primary, backup) as client:
        plain = (await client.post("/api/v1/completions", json={"model": "plain", "messages": USER})).json()
        plain_done = (await streamed_events(client, "plain"))[-1]
        direct = (await client.post("/api/v1/completions", json={"model": "direct", "messages": USER})).json()
        demo = (await client.post("/api/v1/completions", json={"model": "demo", "messages": USER})).json()
    assert direct["model"] == "openai/small-model"
    for usage in (plain["usage"], plain_done["usage"], direct["usage"], demo["usage"]):
        assert usage["outputTokens"] > 0
        assert "costUsd" not in usage


async def test_the_model_endpoints_show_the_prices_of_the_entries_that_have_them() -> None:
    async with priced_catalog(ScriptedOpenAI(), ScriptedOpenAI()) as client:
        listed = {entry["id"]: entry for entry in (await client.get("/api/v1/models")).json()["models"]}
        smart = (await client.get("/api/v1/models/smart")).json()
        direct = (await client.get("/api/v1/models/direct")).json()
    assert (listed["smart"]["prices"], listed["steady"]["prices"]) == (SMART, STEADY)
    unpriced = [name for name, entry in listed.items() if "prices" not in entry]
    assert unpriced == ["plain", "demo", "openai/*", "openai-responses/*"]
    assert smart["prices"] == SMART
    assert smart["fallbacks"] == [
        {"id": "steady", "provider": "openai", "upstreamModel": "small-model", "prices": STEADY}
    ]
    assert direct["fallbacks"] == [{"id": "openai/small-model", "provider": "openai", "upstreamModel": "small-model"}]
