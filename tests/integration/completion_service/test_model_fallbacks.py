"""Catalog aliases and fallbacks, served for real in front of two scripted OpenAI-compatible servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from completion_service.app import create_app
from completion_service.catalog import CatalogError
from completion_service.settings import CompletionSettings
from support.fake_openai import ScriptedOpenAI, error, text
from support.servers import serve_app

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "Which model answers?"}]


@asynccontextmanager
async def two_upstreams(primary: ScriptedOpenAI, backup: ScriptedOpenAI) -> AsyncIterator[httpx.AsyncClient]:
    """completion-service with ``smart`` (primary, falling back to ``steady``) and ``steady`` (backup)."""
    async with serve_app(primary.app) as primary_url, serve_app(backup.app) as backup_url:
        catalog = [
            {
                "name": "smart",
                "provider": "openai",
                "model": "big-model",
                "baseUrl": f"{primary_url}/v1",
                "apiKey": "test-key",
                "fallbacks": ["steady"],
                "reasoning": True,
            },
            {
                "name": "steady",
                "provider": "openai",
                "model": "small-model",
                "baseUrl": f"{backup_url}/v1",
                "apiKey": "test-key",
            },
        ]
        settings = CompletionSettings(models=json.dumps(catalog), max_retries=1)
        async with serve_app(create_app(settings)) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


async def test_when_the_first_model_stays_unavailable_the_fallback_answers_and_says_so() -> None:
    primary = ScriptedOpenAI([error(503), error(503)])
    backup = ScriptedOpenAI([text("The backup answered.")])
    async with two_upstreams(primary, backup) as client:
        response = await client.post("/api/v1/completions", json={"model": "smart", "messages": USER})
    assert response.status_code == 200
    answer = response.json()
    assert answer["message"]["content"] == "The backup answered."
    assert (answer["model"], answer["provider"]) == ("steady", "openai")
    assert [r["model"] for r in primary.requests] == ["big-model", "big-model"]  # one retry, then the fallback
    assert [r["model"] for r in backup.requests] == ["small-model"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_fallback_that_cannot_reason_answers_without_the_effort_and_says_so(stream: bool) -> None:
    primary = ScriptedOpenAI([error(503), error(503)])
    backup = ScriptedOpenAI([text("The backup answered.")])
    body = {"model": "smart", "messages": USER, "reasoning": {"effort": "high"}, "stream": stream}
    async with (
        two_upstreams(primary, backup) as client,
        client.stream("POST", "/api/v1/completions", json=body) as response,
    ):
        lines = [line async for line in response.aiter_lines()]
    assert response.status_code == 200
    if stream:
        answer = json.loads([line for line in lines if line.startswith("data: ")][-1].removeprefix("data: "))
    else:
        answer = json.loads("".join(lines))
    assert answer["model"] == "steady"
    assert answer["warnings"] == ["reasoning ignored: the model 'steady' cannot reason."]
    assert [r["reasoning_effort"] for r in primary.requests] == ["high", "high"]  # the catalog says it reasons
    assert "reasoning_effort" not in backup.requests[0]


async def test_a_stream_falls_back_before_anything_reached_the_caller() -> None:
    primary = ScriptedOpenAI([error(429, headers={"retry-after": "0"}), error(429, headers={"retry-after": "0"})])
    backup = ScriptedOpenAI([text("Streamed by the backup.")])
    async with two_upstreams(primary, backup) as client:
        body = {"model": "smart", "messages": USER, "stream": True}
        async with client.stream("POST", "/api/v1/completions", json=body) as response:
            lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    events = [json.loads(line.removeprefix("data: ")) for line in lines]
    assert "".join(e["delta"] for e in events if e["type"] == "text") == "Streamed by the backup."
    assert events[-1]["model"] == "steady"
    assert len(primary.requests) == 2


async def test_an_error_that_a_retry_cannot_fix_does_not_fall_back() -> None:
    primary = ScriptedOpenAI([error(401)])
    backup = ScriptedOpenAI([text("never")])
    async with two_upstreams(primary, backup) as client:
        response = await client.post("/api/v1/completions", json={"model": "smart", "messages": USER})
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "auth_failed"
    assert "test-key" not in response.text
    assert backup.requests == []


async def test_the_model_endpoints_show_the_alias_and_its_fallbacks() -> None:
    async with two_upstreams(ScriptedOpenAI(), ScriptedOpenAI()) as client:
        listed = (await client.get("/api/v1/models")).json()["models"]
        smart = (await client.get("/api/v1/models/smart")).json()
    assert [entry["id"] for entry in listed] == ["smart", "steady", "demo"]
    assert smart == {
        "id": "smart",
        "provider": "openai",
        "upstreamModel": "big-model",
        "fallbacks": [{"id": "steady", "provider": "openai", "upstreamModel": "small-model"}],
    }


async def test_a_catalog_that_cannot_work_stops_the_service_from_starting() -> None:
    catalog = json.dumps([{"name": "x", "provider": "anthropic", "model": "claude"}])
    with pytest.raises(CatalogError) as caught:
        create_app(CompletionSettings(models=catalog))
    assert "'anthropic', which is not configured" in str(caught.value)
