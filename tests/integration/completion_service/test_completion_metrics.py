"""completion-service's /metrics after real calls to a scripted OpenAI-compatible server: what an operator
reads on a dashboard (calls, outcomes, tokens, retries, fallbacks, requests by route)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from completion_service.app import create_app
from completion_service.settings import CompletionSettings
from suite_common.tracing import create_tracer_provider
from suite_common.wire import DEADLINE_HEADER
from support.fake_openai import ScriptedOpenAI, error, text, text_then_hang
from support.otlp_receiver import otlp_receiver
from support.servers import serve_app

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "Say something short."}]


class Metrics:
    """The samples of one scrape, looked up by name and labels."""

    def __init__(self, exposition: str) -> None:
        self.samples = [sample for family in text_string_to_metric_families(exposition) for sample in family.samples]

    def value(self, name: str, **labels: str) -> float:
        """The sample ``name`` whose labels include ``labels``; 0 when there is none (a counter never touched)."""
        matching = [s.value for s in self.samples if s.name == name and labels.items() <= s.labels.items()]
        assert len(matching) <= 1, f"{name} {labels} matches {len(matching)} series"
        return matching[0] if matching else 0.0

    def label_sets(self, name: str) -> list[dict[str, str]]:
        return [sample.labels for sample in self.samples if sample.name == name]


async def scrape(http: httpx.AsyncClient) -> Metrics:
    response = await http.get("/metrics")
    assert response.status_code == 200
    return Metrics(response.text)


@asynccontextmanager
async def completion_service(settings: CompletionSettings) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(create_app(settings)) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
        yield http


@asynccontextmanager
async def in_front_of(llm: ScriptedOpenAI, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(llm.app) as llm_url:
        config = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), **{"max_retries": 0, **settings}
        )
        async with completion_service(config) as http:
            yield http


async def streamed_done(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    async with http.stream("POST", "/api/v1/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "done"
    done: dict[str, Any] = events[-1]
    return done


async def test_calls_tokens_and_latency_are_counted_per_provider_and_model_streamed_or_not() -> None:
    llm = ScriptedOpenAI([text("One two three."), text("Four five six seven.")])
    async with in_front_of(llm) as http:
        whole = await http.post("/api/v1/completions", json={"model": "gpt-4o", "messages": USER})
        assert whole.status_code == 200
        streamed = await streamed_done(http, {"model": "gpt-4o", "messages": USER})
        metrics = await scrape(http)
    usages = [whole.json()["usage"], streamed["usage"]]
    series = {"provider": "openai", "model": "gpt-4o"}
    assert metrics.value("llm_calls_total", **series, outcome="ok") == 2
    assert metrics.value("llm_tokens_total", **series, direction="input") == sum(u["inputTokens"] for u in usages)
    assert metrics.value("llm_tokens_total", **series, direction="output") == sum(u["outputTokens"] for u in usages)
    assert metrics.value("llm_tokens_total", **series, direction="output") > 0
    assert metrics.value("llm_call_duration_seconds_count", **series, outcome="ok") == 2
    assert metrics.value("llm_retries_total", provider="openai") == 0
    route = {"method": "POST", "route": "/api/v1/completions"}
    assert metrics.value("http_requests_total", **route, status="200") == 2
    assert metrics.value("http_request_duration_seconds_count", **route, status="200") == 2


async def test_a_503_then_a_success_counts_one_retry_and_one_successful_call() -> None:
    llm = ScriptedOpenAI([error(503, headers={"retry-after": "0"}), text("Recovered.")])
    async with in_front_of(llm, max_retries=1) as http:
        response = await http.post("/api/v1/completions", json={"model": "gpt-4o", "messages": USER})
        metrics = await scrape(http)
    assert response.status_code == 200
    assert len(llm.requests) == 2
    assert metrics.value("llm_retries_total", provider="openai") == 1
    assert metrics.value("llm_calls_total", provider="openai", model="gpt-4o", outcome="ok") == 1
    assert [labels["outcome"] for labels in metrics.label_sets("llm_calls_total")] == ["ok"]


async def test_a_failed_call_is_counted_under_its_error_code_with_no_tokens() -> None:
    llm = ScriptedOpenAI([error(401)])
    async with in_front_of(llm) as http:
        response = await http.post("/api/v1/completions", json={"model": "gpt-4o", "messages": USER})
        metrics = await scrape(http)
    assert response.status_code == 502
    assert metrics.value("llm_calls_total", provider="openai", model="gpt-4o", outcome="auth_failed") == 1
    assert metrics.value("llm_calls_total", provider="openai", model="gpt-4o", outcome="ok") == 0
    assert metrics.label_sets("llm_tokens_total") == []
    # The failure's latency is its own series: it does not hide in (or skew) the successes' percentiles.
    assert metrics.value("llm_call_duration_seconds_count", model="gpt-4o", outcome="auth_failed") == 1
    assert metrics.value("llm_call_duration_seconds_count", model="gpt-4o", outcome="ok") == 0
    assert metrics.value("http_requests_total", method="POST", route="/api/v1/completions", status="502") == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_catalog_fallback_is_counted_with_the_failed_call_and_the_answer_of_the_next_model(
    stream: bool,
) -> None:
    primary = ScriptedOpenAI([error(503, headers={"retry-after": "0"})])
    backup = ScriptedOpenAI([text("The backup answered.")])
    async with serve_app(primary.app) as primary_url, serve_app(backup.app) as backup_url:
        catalog = [
            {
                "name": "smart",
                "provider": "openai",
                "model": "big-model",
                "baseUrl": f"{primary_url}/v1",
                "apiKey": "test-key",
                "fallbacks": ["steady"],
            },
            {
                "name": "steady",
                "provider": "openai",
                "model": "small-model",
                "baseUrl": f"{backup_url}/v1",
                "apiKey": "test-key",
            },
        ]
        async with completion_service(CompletionSettings(models=json.dumps(catalog), max_retries=0)) as http:
            body = {"model": "smart", "messages": USER}
            if stream:
                assert (await streamed_done(http, body))["model"] == "steady"
            else:
                response = await http.post("/api/v1/completions", json=body)
                assert (response.status_code, response.json()["model"]) == (200, "steady")
            metrics = await scrape(http)
    assert metrics.value("llm_fallbacks_total", model="smart", next_model="steady") == 1
    assert metrics.value("llm_calls_total", provider="openai", model="smart", outcome="overloaded") == 1
    assert metrics.value("llm_calls_total", provider="openai", model="steady", outcome="ok") == 1
    assert metrics.value("llm_tokens_total", model="steady", direction="output") == 3
    assert metrics.value("llm_tokens_total", model="smart", direction="output") == 0


async def test_a_route_with_a_path_parameter_is_labelled_with_its_template_not_the_model_name() -> None:
    async with completion_service(CompletionSettings(demo_enabled=True)) as http:
        assert (await http.get("/api/v1/models/demo")).status_code == 200
        assert (await http.get("/api/v1/models/no/such-model")).status_code == 404
        assert (await http.get("/api/v1/models")).status_code == 200
        metrics = await scrape(http)
    template = {"method": "GET", "route": "/api/v1/models/{model:path}"}
    assert metrics.value("http_requests_total", **template, status="200") == 1
    assert metrics.value("http_requests_total", **template, status="404") == 1
    assert metrics.value("http_requests_total", method="GET", route="/api/v1/models", status="200") == 1
    routes = {labels["route"] for labels in metrics.label_sets("http_requests_total")}
    assert not {route for route in routes if "demo" in route or "such-model" in route}


async def test_model_names_a_caller_makes_up_are_labelled_up_to_a_small_bound_then_share_one_label() -> None:
    names = [f"made-up-model-{index}" for index in range(30)]
    llm = ScriptedOpenAI([text("Fine.") for _ in names])
    async with in_front_of(llm) as http:
        for name in names:
            response = await http.post("/api/v1/completions", json={"model": name, "messages": USER})
            assert response.status_code == 200
        metrics = await scrape(http)
    labelled = {labels["model"] for labels in metrics.label_sets("llm_calls_total")}
    assert labelled == {*names[:20], "other"}
    assert metrics.value("llm_calls_total", model="other", outcome="ok") == 10
    # Every model family stays as small: 21 model labels, whatever callers send.
    assert {labels["model"] for labels in metrics.label_sets("llm_call_duration_seconds_count")} == labelled


async def test_the_configured_models_keep_their_label_after_callers_used_up_the_bound() -> None:
    llm = ScriptedOpenAI([text("Fine.") for _ in range(22)])
    async with serve_app(llm.app) as llm_url:
        house = {"provider": "openai", "model": "gpt-4o", "baseUrl": f"{llm_url}/v1", "apiKey": "test-key"}
        catalog = [{"name": "house-model", **house}]
        settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), models=json.dumps(catalog)
        )
        async with completion_service(settings) as http:
            for name in [*(f"made-up-{index}" for index in range(21)), "house-model"]:
                response = await http.post("/api/v1/completions", json={"model": name, "messages": USER})
                assert response.status_code == 200
            metrics = await scrape(http)
    assert metrics.value("llm_calls_total", model="house-model", outcome="ok") == 1
    assert metrics.value("llm_calls_total", model="other", outcome="ok") == 1


async def test_a_stream_that_fails_after_its_200_marks_its_request_and_provider_call_spans_as_errors() -> None:
    llm = ScriptedOpenAI([text_then_hang("Half an answer")])
    async with otlp_receiver() as receiver, serve_app(llm.app) as llm_url:
        provider = create_tracer_provider("completion-service", receiver.url)
        settings = CompletionSettings(openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"))
        async with (
            serve_app(create_app(settings, tracer_provider=provider)) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            body = {"model": "gpt-4o", "messages": USER, "stream": True}
            # The model stalls mid-answer: the caller's deadline ends the stream after its 200 went out.
            async with http.stream("POST", "/api/v1/completions", json=body, headers={DEADLINE_HEADER: "1500"}) as sent:
                assert sent.status_code == 200
                events = [json.loads(line[6:]) async for line in sent.aiter_lines() if line.startswith("data: ")]
            metrics = await scrape(http)
        assert provider is not None
        with anyio.fail_after(10):
            await anyio.to_thread.run_sync(provider.shutdown)
    assert (events[0]["type"], events[-1]["type"]) == ("text", "error")
    code = events[-1]["code"]
    request = receiver.only("POST /api/v1/completions")
    assert (request.status, request.attributes["error.type"]) == ("ERROR", code)
    provider_call = receiver.only("provider_call")
    assert (provider_call.status, provider_call.attributes["llm.outcome"]) == ("ERROR", code)
    assert metrics.value("llm_call_duration_seconds_count", model="gpt-4o", outcome=code) == 1
