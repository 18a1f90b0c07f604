"""HTTP metrics: one series per route template and status, served at /metrics in the Prometheus format."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from suite_common.errors import ApiError, install_error_handlers
from suite_common.health import health_routes
from suite_common.metrics import LATENCY_BUCKETS, CallMetrics
from suite_common.observability import Observability
from suite_common.settings import ServiceSettings

pytestmark = pytest.mark.anyio


def _app() -> Starlette:
    async def item(request: Request) -> Response:
        if request.path_params["item_id"] == "missing":
            raise ApiError(404, "not_found", "No such item.")
        return JSONResponse({"id": request.path_params["item_id"]})

    async def crash(_: Request) -> Response:
        raise RuntimeError("a bug")

    observability = Observability.create("test-service", ServiceSettings())
    app = Starlette(
        routes=[
            Route("/items/{item_id}", item, methods=["GET"]),
            Route("/crash", crash, methods=["GET"]),
            *health_routes(None, observability.lifecycle),
            *observability.routes(),
        ]
    )
    install_error_handlers(app)
    observability.install(app)
    return app


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """``{sorted labels: value}`` of every sample called ``name``."""
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def _client(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://service"
    )


async def test_requests_are_counted_under_their_route_template_and_status_not_their_raw_path() -> None:
    async with _client(_app()) as http:
        for path in ("/items/1", "/items/2", "/items/3", "/items/missing", "/nowhere/at/all"):
            await http.get(path)
        metrics = await http.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=")
    counts = _samples(metrics.text, "http_requests_total")
    assert counts[(("method", "GET"), ("route", "/items/{item_id}"), ("status", "200"))] == 3
    assert counts[(("method", "GET"), ("route", "/items/{item_id}"), ("status", "404"))] == 1
    assert counts[(("method", "GET"), ("route", "unmatched"), ("status", "404"))] == 1
    assert not [labels for labels in counts if any(value.startswith("/items/1") for _, value in labels)]
    # Latency by status too: a failure's time is not averaged into the successes'.
    latencies = _samples(metrics.text, "http_request_duration_seconds_count")
    assert latencies[(("method", "GET"), ("route", "/items/{item_id}"), ("status", "200"))] == 3
    assert latencies[(("method", "GET"), ("route", "/items/{item_id}"), ("status", "404"))] == 1


async def test_the_page_has_the_process_figures_and_no_created_series() -> None:
    async with _client(_app()) as http:
        await http.get("/items/1")
        page = (await http.get("/metrics")).text
    names = {sample.name for family in text_string_to_metric_families(page) for sample in family.samples}
    # What an operator expects of every target: memory, CPU, file descriptors, GC, the runtime's version.
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"} <= names
    assert {"python_info", "python_gc_collections_total"} <= names
    # One *_created sample per series would double the page for a figure nobody queries.
    assert not [name for name in names if name.endswith("_created")]


async def test_a_request_that_crashes_the_handler_is_counted_as_a_500() -> None:
    async with _client(_app()) as http:
        assert (await http.get("/crash")).status_code == 500
        metrics = await http.get("/metrics")
    counts = _samples(metrics.text, "http_requests_total")
    assert counts[(("method", "GET"), ("route", "/crash"), ("status", "500"))] == 1


async def test_each_app_has_its_own_registry() -> None:
    first, second = _app(), _app()
    async with _client(first) as one, _client(second) as two:
        await one.get("/items/1")
        text = (await two.get("/metrics")).text
    assert not [labels for labels in _samples(text, "http_requests_total") if ("route", "/items/{item_id}") in labels]


def test_call_metrics_count_and_time_each_call_under_the_same_labels() -> None:
    registry = CollectorRegistry()
    calls = CallMetrics(registry, "thing_call", labels=["kind"], counted="Things called.", timed="Time of a thing.")

    calls.observe("a", seconds=0.2)
    calls.observe("a", seconds=0.3)
    text = generate_latest(registry).decode()

    assert "# HELP thing_calls_total Things called.\n" in text
    assert "# HELP thing_call_duration_seconds Time of a thing.\n" in text
    assert _samples(text, "thing_calls_total") == {(("kind", "a"),): 2.0}
    assert _samples(text, "thing_call_duration_seconds_count") == {(("kind", "a"),): 2.0}
    assert _samples(text, "thing_call_duration_seconds_sum") == {(("kind", "a"),): pytest.approx(0.5)}
    buckets = _samples(text, "thing_call_duration_seconds_bucket")
    assert sorted(float(le) for (_, (_, le)) in buckets) == sorted([*LATENCY_BUCKETS, float("inf")])


def test_call_metrics_keep_each_label_sets_count_apart_however_the_calls_interleave() -> None:
    registry = CollectorRegistry()
    calls = CallMetrics(registry, "thing_call", labels=["kind", "status"], counted="Things.", timed="Time.")

    for kind, status in [("a", "ok"), ("b", "ok"), ("a", "ok"), ("a", "error"), ("b", "ok")]:
        calls.observe(kind, status, seconds=0.1)
    text = generate_latest(registry).decode()

    assert _samples(text, "thing_calls_total") == {
        (("kind", "a"), ("status", "ok")): 2.0,
        (("kind", "a"), ("status", "error")): 1.0,
        (("kind", "b"), ("status", "ok")): 2.0,
    }
    assert _samples(text, "thing_call_duration_seconds_count") == _samples(text, "thing_calls_total")
