"""What completion-service reports about LLM calls: Prometheus metrics and a span per attempt of a model."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from completion_service.providers._transport import CallStats
from suite_common.metrics import LATENCY_BUCKETS
from suite_common.wire import Usage

__all__ = ["LlmTelemetry"]

_MAX_MODEL_LABELS = 200


class LlmTelemetry:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._models: set[str] = set()
        self._calls = Counter(
            "llm_calls",
            "Calls of a model (each model of a fallback chain counts), by provider, model and outcome "
            "(ok or the neutral error code).",
            ["provider", "model", "outcome"],
            registry=registry,
        )
        self._latency = Histogram(
            "llm_call_duration_seconds",
            "Time of one model call, retries included (a stream's whole length).",
            ["provider", "model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
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

    def _model(self, model: str) -> str:
        """Model names come from callers: past a bound, new ones share one label, so series stay bounded."""
        if model in self._models or len(self._models) < _MAX_MODEL_LABELS:
            self._models.add(model)
            return model
        return "other"

    def call(
        self, *, provider: str, model: str, outcome: str, seconds: float, stats: CallStats, usage: Usage | None
    ) -> None:
        model = self._model(model)
        self._calls.labels(provider, model, outcome).inc()
        self._latency.labels(provider, model).observe(seconds)
        if stats.retries:
            self._retries.labels(provider).inc(stats.retries)
        if usage is not None:
            self._tokens.labels(provider, model, "input").inc(usage.input_tokens)
            self._tokens.labels(provider, model, "output").inc(usage.output_tokens)

    def fallback(self, model: str, next_model: str) -> None:
        self._fallbacks.labels(self._model(model), self._model(next_model)).inc()
