"""OpenTelemetry traces: off unless an OTLP endpoint is configured, W3C ``traceparent`` across services.

Every app gets a ``Tracer`` (a no-op one when tracing is off, so instrumented code costs next to
nothing). ``TracingMiddleware`` continues the caller's trace from the ``traceparent`` header;
``trace_headers()`` gives the headers that carry the current span to the next service.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from suite_common.lifecycle import UNTRACKED_PATHS

__all__ = ["TracingMiddleware", "create_tracer_provider", "trace_headers", "tracer_of"]


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
    """``traceparent`` (and ``tracestate``) of the current span, for an outgoing request; empty without one."""
    if not trace.get_current_span().get_span_context().is_valid:
        return {}  # tracing is off: nothing to carry, and the propagators need not run on every call
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


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

            async def send_and_note(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, send_and_note)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
