"""What completion-service reports about LLM calls: Prometheus metrics and a span per attempt of a model.

Model names label the series: the catalog's own names always, names a caller made up (a bare name sent on
to an OpenAI-compatible server, ``<provider>/<model>``) only up to ``_MAX_CALLER_MODELS`` of them, the rest
as ``model="other"``, so that no caller can grow the scrape without bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from opentelemetry.trace import Span, Tracer
from prometheus_client import CollectorRegistry, Counter

from completion_service.providers._transport import CallStats
from suite_common.errors import ApiError
from suite_common.metrics import CallMetrics, bounded_label
from suite_common.tracing import mark_span_failed
from suite_common.wire import Usage

__all__ = ["LlmTelemetry", "provider_call_span", "set_provider_outcome"]

_MAX_CALLER_MODELS = 20


def set_provider_outcome(span: Span, outcome: str) -> None:
    """``llm.outcome`` on a ``provider_call`` span, streamed or not; ERROR unless ``ok``."""
    span.set_attribute("llm.outcome", outcome)
    if outcome != "ok":
        mark_span_failed(span, outcome)


@contextmanager
def provider_call_span(tracer: Tracer, attributes: dict[str, str]) -> Iterator[Span]:
    """The ``provider_call`` span of one non-streamed attempt, with its outcome as ``llm.outcome``."""
    with tracer.start_as_current_span("provider_call", attributes=attributes) as span:
        try:
            yield span
        except ApiError as error:
            set_provider_outcome(span, error.code)
            raise
        except Exception:
            set_provider_outcome(span, "internal_error")
            raise
        except BaseException:
            set_provider_outcome(span, "cancelled")
            raise
        set_provider_outcome(span, "ok")


class LlmTelemetry:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._catalog_models: frozenset[str] = frozenset()
        self._caller_models: set[str] = set()
        self._calls = CallMetrics(
            registry,
            "llm_call",
            labels=["provider", "model", "outcome"],
            counted="Calls of a model (each model of a fallback chain counts), by provider, model and outcome "
            "(ok or the neutral error code).",
            timed="Time of one model call, retries included (a stream's whole length), by provider, model and outcome.",
        )
        self._tokens = Counter(
            "llm_tokens",
            "Tokens by provider, model and direction (input, output).",
            ["provider", "model", "direction"],
            registry=registry,
        )
        self._retries = Counter(
            "llm_retries", "Retries of a provider call after a retryable failure.", ["provider"], registry=registry
        )
        self._fallbacks = Counter(
            "llm_fallbacks", "Moves to the next model of a fallback chain.", ["model", "next_model"], registry=registry
        )

    def label_models(self, names: Iterable[str]) -> None:
        """The configured models (catalog, demo): always labelled by name."""
        self._catalog_models = frozenset(names)

    def _model(self, model: str) -> str:
        if model in self._catalog_models:
            return model
        return bounded_label(model, self._caller_models, limit=_MAX_CALLER_MODELS)

    def call(
        self, *, provider: str, model: str, outcome: str, seconds: float, stats: CallStats, usage: Usage | None
    ) -> None:
        model = self._model(model)
        self._calls.observe(provider, model, outcome, seconds=seconds)
        if stats.retries:
            self._retries.labels(provider).inc(stats.retries)
        if usage is not None:
            self._tokens.labels(provider, model, "input").inc(usage.input_tokens)
            self._tokens.labels(provider, model, "output").inc(usage.output_tokens)

    def fallback(self, model: str, next_model: str) -> None:
        self._fallbacks.labels(self._model(model), self._model(next_model)).inc()
