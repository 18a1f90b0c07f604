"""What every service installs to be operated: metrics, traces, and graceful shutdown, in one place.

``Observability.create(...)`` in ``create_app``, ``install(app)`` once the app exists, ``routes()``
among the app's routes, ``aclose()`` at the end of the lifespan (it flushes pending spans).
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Route

from suite_common.lifecycle import Lifecycle, LifecycleMiddleware
from suite_common.logging import LogContextMiddleware
from suite_common.metrics import HttpMetrics, HttpMetricsMiddleware, metrics_route, new_registry
from suite_common.settings import ServiceSettings
from suite_common.tracing import TracingMiddleware, create_tracer_provider, tracer_of

__all__ = ["Observability"]


@dataclass
class Observability:
    registry: CollectorRegistry
    tracer_provider: TracerProvider | None
    tracer: Tracer
    lifecycle: Lifecycle
    owns_tracer_provider: bool = True
    """False for a provider passed in: it belongs to whoever made it (it may serve other apps too)."""

    @classmethod
    def create(
        cls, service_name: str, settings: ServiceSettings, *, tracer_provider: TracerProvider | None = None
    ) -> Observability:
        """``tracer_provider`` replaces the one the settings describe (tests record spans in memory); it is
        not shut down by ``aclose``."""
        provider = tracer_provider or create_tracer_provider(service_name, settings.otlp_endpoint)
        return cls(
            registry=new_registry(),
            tracer_provider=provider,
            tracer=tracer_of(provider, service_name),
            lifecycle=Lifecycle(grace_seconds=settings.shutdown_grace_seconds),
            owns_tracer_provider=tracer_provider is None,
        )

    def routes(self) -> list[Route]:
        return [metrics_route(self.registry)]

    def install(self, app: Starlette) -> None:
        """Middlewares, outermost first: in-flight count, metrics, the trace of each request, then the caller's
        run and trace bound to its log lines."""
        app.add_middleware(LogContextMiddleware)
        if self.tracer_provider is not None:
            app.add_middleware(TracingMiddleware, tracer=self.tracer)
        app.add_middleware(HttpMetricsMiddleware, metrics=HttpMetrics(self.registry))
        app.add_middleware(LifecycleMiddleware, lifecycle=self.lifecycle)
        app.state.lifecycle = self.lifecycle

    async def aclose(self) -> None:
        """Flush pending spans, in a thread: an exporter blocks while it retries an unreachable collector."""
        if self.tracer_provider is not None and self.owns_tracer_provider:
            await anyio.to_thread.run_sync(self.tracer_provider.shutdown)
