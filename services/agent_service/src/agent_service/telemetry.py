"""What agent-service reports about its runs: Prometheus metrics, trace spans and the audit log.

The loop calls these few methods and knows nothing of Prometheus; ``RunTelemetry.disabled()``
gives a working no-op for tests and tools that need no reporting.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from suite_common.logging import get_logger
from suite_common.metrics import LATENCY_BUCKETS

__all__ = ["RunTelemetry"]

_audit = get_logger("agent_service.audit")


class RunTelemetry:
    def __init__(self, registry: CollectorRegistry, tracer: Tracer) -> None:
        self.tracer = tracer
        self._runs = Counter(
            "agent_runs", "Runs that ended, by how they ended (finish reason or error).", ["outcome"], registry=registry
        )
        self._rounds = Histogram(
            "agent_run_rounds", "LLM rounds per run.", buckets=(1, 2, 3, 4, 5, 7, 10, 15), registry=registry
        )
        self._in_flight = Gauge("agent_runs_in_flight", "Runs under way.", registry=registry)
        self._tool_calls = Counter(
            "agent_tool_calls",
            "Tool calls made by runs, by server, tool and status.",
            ["server", "tool", "status"],
            registry=registry,
        )
        self._tool_latency = Histogram(
            "agent_tool_call_duration_seconds",
            "Time of one tool call as the loop saw it.",
            ["server", "tool"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    @classmethod
    def disabled(cls) -> RunTelemetry:
        return cls(CollectorRegistry(), trace.NoOpTracer())

    def run_started(self) -> None:
        self._in_flight.inc()

    def run_ended(self, outcome: str, rounds: int) -> None:
        self._in_flight.dec()
        self._runs.labels(outcome).inc()
        self._rounds.observe(rounds)

    def tool_call(
        self,
        *,
        run_id: str,
        round_index: int,
        call_index: int,
        server: str,
        tool: str,
        status: str,
        seconds: float,
    ) -> None:
        """One audit line per tool call: who called what, how it went; never the arguments."""
        self._tool_calls.labels(server, tool, status).inc()
        self._tool_latency.labels(server, tool).observe(seconds)
        _audit.info(
            "audit_tool_call",
            run_id=run_id,
            round=round_index,
            call_index=call_index,
            server=server,
            tool=tool,
            status=status,
            latency_ms=round(seconds * 1000, 2),
        )

    def budget_exhausted(self, *, run_id: str, budget: str, rounds: int, seconds: float) -> None:
        """A run stopped by its limits rather than by an answer: worth an operator's look."""
        _audit.warning(
            "audit_budget_exhausted", run_id=run_id, budget=budget, rounds=rounds, elapsed_ms=round(seconds * 1000, 1)
        )
