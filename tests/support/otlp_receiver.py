"""A real OTLP/HTTP trace receiver for tests: what a collector would get, decoded from the protobuf wire format.

Services export to it exactly as to a production collector (``create_tracer_provider(name, url)``, or
``<PREFIX>OTLP_ENDPOINT`` for a process); tests then look spans up by name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from support.servers import serve_app

__all__ = ["OtlpReceiver", "ReceivedSpan", "otlp_receiver"]


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    """Empty for a root span."""
    kind: str
    """``SERVER``, ``INTERNAL``, ``CLIENT``..."""
    status: str
    """``UNSET``, ``OK`` or ``ERROR``."""
    status_message: str
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


def _decode(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = {item.key: _value(item.value) for item in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                spans.append(
                    ReceivedSpan(
                        service=str(resource.get("service.name", "")),
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                        status=Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_"),
                        status_message=span.status.message,
                        attributes={item.key: _value(item.value) for item in span.attributes},
                    )
                )
    return spans


@dataclass
class OtlpReceiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    def named(self, name: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.name == name]

    def only(self, name: str) -> ReceivedSpan:
        spans = self.named(name)
        assert len(spans) == 1, [span.name for span in self.spans]
        return spans[0]

    async def wait_for(self, name: str, *, count: int = 1, within: float = 15) -> list[ReceivedSpan]:
        """The spans called ``name`` once ``count`` of them have arrived (exporters send in batches, later)."""
        with anyio.fail_after(within):
            while len(self.named(name)) < count:
                await self._arrived.wait()
                self._arrived = anyio.Event()
        return self.named(name)

    async def _collect(self, request: Request) -> Response:
        assert request.headers["content-type"] == "application/x-protobuf"
        self.spans.extend(_decode(ExportTraceServiceRequest.FromString(await request.body())))
        self._arrived.set()
        return Response(b"", media_type="application/x-protobuf")


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[OtlpReceiver]:
    """A receiver on a loopback port; its ``url`` is what ``OTLP_ENDPOINT`` settings take."""
    receiver = OtlpReceiver(url="")
    app = Starlette(routes=[Route("/v1/traces", receiver._collect, methods=["POST"])])
    async with serve_app(app) as url:
        receiver.url = url
        yield receiver
