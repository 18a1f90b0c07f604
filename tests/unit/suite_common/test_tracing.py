"""Traces: off without an endpoint, exported over OTLP/HTTP with one, continued from a caller's traceparent."""

from __future__ import annotations

import anyio
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from suite_common.health import health_routes
from suite_common.observability import Observability
from suite_common.settings import ServiceSettings
from suite_common.tracing import TracingMiddleware, create_tracer_provider, trace_headers
from support.servers import serve_app

pytestmark = pytest.mark.anyio

CALLER_TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CALLER_SPAN_ID = 0x00F067AA0BA902B7
CALLER_TRACEPARENT = f"00-{CALLER_TRACE_ID:032x}-{CALLER_SPAN_ID:016x}-01"


def _recording() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _app(observability: Observability) -> Starlette:
    async def item(request: Request) -> Response:
        if request.path_params["item_id"] == "broken":
            return JSONResponse({"error": {"code": "internal_error", "message": "no"}}, status_code=500)
        return JSONResponse({"id": request.path_params["item_id"], "outgoing": trace_headers()})

    app = Starlette(
        routes=[
            Route("/items/{item_id}", item, methods=["GET"]),
            *health_routes(None, observability.lifecycle),
            *observability.routes(),
        ]
    )
    observability.install(app)
    return app


def _client(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://service")


# --- off unless configured --------------------------------------------------------------------


async def test_without_an_endpoint_tracing_is_off_no_middleware_no_spans_no_traceparent() -> None:
    assert create_tracer_provider("test-service", None) is None
    observability = Observability.create("test-service", ServiceSettings())
    assert observability.tracer_provider is None
    assert isinstance(observability.tracer, trace.NoOpTracer)
    app = _app(observability)
    installed: list[object] = [middleware.cls for middleware in app.user_middleware]
    assert TracingMiddleware not in installed
    async with _client(app) as http:
        answer = (await http.get("/items/1", headers={"traceparent": CALLER_TRACEPARENT})).json()
    assert answer["outgoing"] == {}  # nothing to propagate: no span of ours, and the caller's is not forwarded


def test_trace_headers_are_empty_outside_a_span_and_carry_the_current_span_inside_one() -> None:
    assert trace_headers() == {}
    provider, _ = _recording()
    with provider.get_tracer("test").start_as_current_span("work") as span:
        context = span.get_span_context()
        assert trace_headers()["traceparent"].startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")


async def test_with_an_endpoint_spans_are_exported_over_otlp_http_to_it() -> None:
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: Request) -> Response:
        assert request.headers["content-type"] == "application/x-protobuf"
        received.append(ExportTraceServiceRequest.FromString(await request.body()))
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/traces", collect, methods=["POST"])])
    async with serve_app(collector) as collector_url:
        settings = ServiceSettings(otlp_endpoint=collector_url + "/")
        observability = Observability.create("test-service", settings)
        assert observability.tracer_provider is not None
        with observability.tracer.start_as_current_span("unit_of_work", attributes={"work.size": 3}):
            pass
        with anyio.fail_after(10):
            # The exporter is synchronous: flush from a thread so that this loop can serve the collector.
            assert await anyio.to_thread.run_sync(observability.tracer_provider.force_flush)
            await observability.aclose()
    [request] = received
    [resource_spans] = request.resource_spans
    resource = {item.key: item.value.string_value for item in resource_spans.resource.attributes}
    assert resource["service.name"] == "test-service"
    [span] = [span for scope in resource_spans.scope_spans for span in scope.spans]
    assert span.name == "unit_of_work"
    assert [(item.key, item.value.int_value) for item in span.attributes] == [("work.size", 3)]


async def test_a_provider_passed_in_is_left_running_when_the_app_closes() -> None:
    provider, exporter = _recording()
    observability = Observability.create("test-service", ServiceSettings(), tracer_provider=provider)
    await observability.aclose()
    with provider.get_tracer("other-app").start_as_current_span("still_recorded"):
        pass
    assert [span.name for span in exporter.get_finished_spans()] == ["still_recorded"]


# --- the server span of each request ----------------------------------------------------------


async def test_a_request_continues_the_callers_trace_in_a_server_span_named_after_its_route() -> None:
    provider, exporter = _recording()
    app = _app(Observability.create("test-service", ServiceSettings(), tracer_provider=provider))
    async with _client(app) as http:
        answer = (await http.get("/items/42", headers={"traceparent": CALLER_TRACEPARENT})).json()
    [span] = exporter.get_finished_spans()
    assert span.name == "GET /items/{item_id}"
    assert span.kind is SpanKind.SERVER
    assert span.context is not None
    assert span.parent is not None
    assert (span.context.trace_id, span.parent.span_id) == (CALLER_TRACE_ID, CALLER_SPAN_ID)
    assert span.parent.is_remote
    assert span.attributes is not None
    assert (span.attributes["http.route"], span.attributes["http.response.status_code"]) == ("/items/{item_id}", 200)
    # What the handler would send on is its own span, in the caller's trace.
    assert answer["outgoing"]["traceparent"].startswith(f"00-{CALLER_TRACE_ID:032x}-{span.context.span_id:016x}-")


async def test_a_request_without_traceparent_starts_a_new_trace() -> None:
    provider, exporter = _recording()
    app = _app(Observability.create("test-service", ServiceSettings(), tracer_provider=provider))
    async with _client(app) as http:
        await http.get("/items/1")
    [span] = exporter.get_finished_spans()
    assert span.parent is None
    assert span.context is not None
    assert span.context.trace_id != CALLER_TRACE_ID


async def test_a_5xx_marks_the_server_span_as_an_error_and_probes_and_scrapes_have_no_span() -> None:
    provider, exporter = _recording()
    app = _app(Observability.create("test-service", ServiceSettings(), tracer_provider=provider))
    async with _client(app) as http:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await http.get(path)).status_code == 200
        assert (await http.get("/items/broken")).status_code == 500
    [span] = exporter.get_finished_spans()
    assert span.name == "GET /items/{item_id}"
    assert span.status.status_code is StatusCode.ERROR
