"""Prometheus metrics: one registry per app, HTTP request counts and latency for every service.

Each service adds its own metrics to the same registry (runs, tool calls, LLM calls...) and
serves them all at ``GET /metrics`` in the Prometheus text format; ``CallMetrics`` is the pair most of them are
(a count of calls and a histogram of their latency, under the same labels). A registry per app, not
the process-wide default, keeps apps (and tests) from sharing counters; each registry also carries
the process's own figures (CPU, memory, file descriptors, garbage collections, Python version).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from suite_common.openapi import ApiRoute, Operation

__all__ = [
    "LATENCY_BUCKETS",
    "TENANT_SERVERS_LABEL",
    "CallMetrics",
    "HttpMetrics",
    "HttpMetricsMiddleware",
    "bounded_label",
    "metrics_route",
    "new_registry",
]

TENANT_SERVERS_LABEL = "(tenant)"
"""The ``server`` and ``tool`` label of every call of a tenant's own MCP server, in every service's metrics: tenants
name their servers and tools, so thousands of them would be unbounded series, and whoever scrapes the metrics would
learn their names."""

# A ``*_created`` sample per series doubles a scrape for a figure Prometheus never uses (it has the
# counter's resets). Process-wide in prometheus_client, and wanted in every app of the suite.
disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
"""From a millisecond (a catalog read) to the two minutes of a run's deadline."""

_MAX_CACHED_SERIES = 1024


def new_registry() -> CollectorRegistry:
    """An app's registry, with the process and runtime collectors an operator expects on every target."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def bounded_label(value: str, known: set[str], *, limit: int, other: str = "other") -> str:
    """``value`` as a label value while at most ``limit`` distinct values have been seen, else ``other``.

    For values callers choose: the number of series a caller can create stays bounded.
    """
    if value in known or len(known) < limit:
        known.add(value)
        return value
    return other


class CallMetrics:
    """A counter of calls and a histogram of their seconds, under the same labels: ``<name>s`` (exposed as
    ``<name>s_total``) and ``<name>_duration_seconds`` (``name="llm_call"``: ``llm_calls_total``,
    ``llm_call_duration_seconds``). ``counted`` and ``timed`` are their help texts."""

    def __init__(
        self,
        registry: CollectorRegistry,
        name: str,
        *,
        labels: Sequence[str],
        counted: str,
        timed: str,
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        self.calls = Counter(f"{name}s", counted, labels, registry=registry)
        self.latency = Histogram(f"{name}_duration_seconds", timed, labels, buckets=buckets, registry=registry)
        self._children: dict[tuple[str, ...], tuple[Counter, Histogram]] = {}
        """The children by labels, as ``labels()`` would find them again (a lock and a lookup of its own, about half of
        an observation's cost): as bounded as the series themselves, which are never removed."""

    def observe(self, *labels: str, seconds: float) -> None:
        """One call that took ``seconds``, under ``labels`` (in the order they were declared)."""
        children = self._children.get(labels)
        if children is None:
            children = self._children[labels] = self.series(*labels)
        children[0].inc()
        children[1].observe(seconds)

    def series(self, *labels: str) -> tuple[Counter, Histogram]:
        """The counter's and the histogram's children for ``labels``, for a caller that keeps them."""
        return self.calls.labels(*labels), self.latency.labels(*labels)


class HttpMetrics(CallMetrics):
    """The requests every service serves (``http_requests_total``, ``http_request_duration_seconds``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(
            registry,
            "http_request",
            labels=["method", "route", "status"],
            counted="HTTP requests served, by route and status.",
            timed="Time to the end of the response (a stream's whole length), by route and status.",
        )


class HttpMetricsMiddleware:
    """Counts and times each request under its route's template (``/api/v1/models/{model:path}``), never the
    raw path, so that the number of series stays bounded."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics
        self._children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            template = getattr(scope.get("route"), "path", None) or "unmatched"
            count, latency = self._series(scope["method"], template, status)
            count.inc()
            latency.observe(time.perf_counter() - started)

    def _series(self, method: str, template: str, status: int) -> tuple[Counter, Histogram]:
        """The request's counter and histogram children, looked up once per (method, route, status):
        ``labels()`` validates and locks on every call, twice per request."""
        key = (method, template, status)
        series = self._children.get(key)
        if series is None:
            series = self.metrics.series(method, template, str(status))
            if len(self._children) < _MAX_CACHED_SERIES:  # methods are the client's choice: keep the cache bounded
                self._children[key] = series
        return series


def metrics_route(registry: CollectorRegistry) -> Route:
    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    operation = Operation("Metrics in the Prometheus text format", media_type=CONTENT_TYPE_LATEST)
    return ApiRoute("/metrics", metrics, method="GET", operation=operation)
