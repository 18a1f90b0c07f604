"""OpenTelemetry traces: off unless an OTLP endpoint is configured, W3C ``traceparent`` across services.

Every app gets a ``Tracer`` (a no-op one when tracing is off, so instrumented code costs next to
nothing). ``TracingMiddleware`` continues the caller's trace from the ``traceparent`` header;
``trace_headers()`` gives the headers that carry the current span (and run) to the next service.
``mark_request_failed`` marks the server span of the current request when the work it streams fails
after its 200 went out (a run, a completion stream): the status code alone would say "ok".
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from suite_common.lifecycle import UNTRACKED_PATHS
from suite_common.logging import RUN_ID_HEADER, bound_run_id

__all__ = [
    "TracingMiddleware",
    "create_tracer_provider",
    "mark_request_failed",
    "mark_span_failed",
    "trace_headers",
    "tracer_of",
]

_request_span: ContextVar[Span | None] = ContextVar("suite_request_span", default=None)


def create_tracer_provider(
    service_name: str, endpoint: str | None, *, processors: Sequence[SpanProcessor] = ()
) -> TracerProvider | None:
    """A provider exporting over OTLP/HTTP to ``endpoint`` (``http://collector:4318``), plus ``processors``
    (tests pass an in-memory exporter's); ``None`` when there is nowhere to send spans."""
    if endpoint is None and not processors:
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if endpoint is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")))
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def tracer_of(provider: TracerProvider | None, name: str) -> Tracer:
    return provider.get_tracer(name) if provider is not None else trace.NoOpTracer()


def trace_headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span, and ``X-Run-Id`` of the run being served, for
    an outgoing request; empty outside both."""
    carrier: dict[str, str] = {}
    run_id = bound_run_id()
    if run_id is not None:
        carrier[RUN_ID_HEADER] = run_id
    if trace.get_current_span().get_span_context().is_valid:
        # Only then: with tracing off the propagators need not run on every call.
        propagate.inject(carrier)
    return carrier


def mark_span_failed(span: Span, error_type: str, description: str | None = None) -> None:
    """ERROR status with the neutral code as ``error.type`` (the OpenTelemetry convention)."""
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description or error_type))


def mark_request_failed(error_type: str, description: str | None = None) -> None:
    """Mark the server span of the request being served as failed; nothing when tracing is off."""
    span = _request_span.get()
    if span is not None:
        mark_span_failed(span, error_type, description)


class TracingMiddleware:
    """A server span per request, child of the caller's span when its ``traceparent`` says so."""

    def __init__(self, app: ASGIApp, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACKED_PATHS:
            await self.app(scope, receive, send)
            return
        carrier = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        context = propagate.extract(carrier)
        method = scope["method"]
        with self.tracer.start_as_current_span(f"{method}", context=context, kind=SpanKind.SERVER) as span:
            token = _request_span.set(span)

            async def send_and_note(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, send_and_note)
            finally:
                _request_span.reset(token)
                route = getattr(scope.get("route"), "path", None)
                if route:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
