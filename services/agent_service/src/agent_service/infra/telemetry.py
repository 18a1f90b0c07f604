"""What agent-service reports about its runs: Prometheus metrics, trace spans and the audit log.

The loop calls these few methods and knows nothing of Prometheus; ``RunTelemetry.disabled()``
gives a working no-op for tests and tools that need no reporting.

Runs are counted by ``outcome`` (the finish reason, or the error code of a run that failed or was
refused) and ``result``: ``ok`` (ended with a finish reason), ``error`` (failed, or refused for a
reason on the suite's side: a 5xx) or ``refused`` (the caller's request was refused: a 4xx).
``result="error"`` over all runs is the error rate an operator pages on.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from opentelemetry import trace
from opentelemetry.trace import Span, Tracer
from opentelemetry.util.types import Attributes
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from suite_common.logging import get_logger
from suite_common.metrics import LATENCY_BUCKETS, TENANT_SERVERS_LABEL, CallMetrics
from suite_common.tracing import mark_request_failed, mark_span_failed

__all__ = ["UNLISTED_TOOL", "RunTelemetry"]

_audit = get_logger("agent_service.audit")
_log = get_logger("agent_service.runs")

_NO_SPAN = nullcontext(trace.INVALID_SPAN)
"""What ``RunTelemetry.span`` enters with tracing off: the span a no-op tracer's would be (non-recording, invalid: the
current span stays the one before, itself invalid with tracing off)."""

UNLISTED_TOOL = "unlisted"
"""The ``tool`` label of calls of a tool the run does not list: the model may invent any name, and each
name would be new series."""


class RunTelemetry:
    def __init__(self, registry: CollectorRegistry, tracer: Tracer) -> None:
        self.tracer = tracer
        self._tracing = not isinstance(tracer, trace.NoOpTracer)
        self._runs = Counter(
            "agent_runs",
            "Runs that ended or were refused, by outcome (finish reason or error code) and result "
            "(ok, error, refused).",
            ["outcome", "result"],
            registry=registry,
        )
        self._rounds = Histogram(
            "agent_run_rounds", "LLM rounds per run.", buckets=(1, 2, 3, 4, 5, 7, 10, 15), registry=registry
        )
        self._in_flight = Gauge("agent_runs_in_flight", "Runs under way.", registry=registry)
        self._tool_calls = CallMetrics(
            registry,
            "agent_tool_call",
            labels=["server", "tool", "status"],
            counted="Tool calls made by runs, by server, tool and status.",
            timed="Time of one tool call as the loop saw it, by server, tool and status.",
        )

        self._store_writes = Histogram(
            "agent_run_store_write_duration_seconds",
            "Time of one write of a run's step to the run store (its messages and events, one transaction), by "
            "result (ok, error).",
            ["result"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._tool_cache = Counter(
            "agent_tool_cache",
            "Lookups and stores of the tool-result cache, by outcome: hit (a call answered from it), miss, store (a "
            "result kept), rejected (a value whose signature did not verify: forged, moved or of another pepper) "
            "or error (the cache's Redis did not answer; the call went on).",
            ["outcome"],
            registry=registry,
        )
        self._takeovers = Counter(
            "agent_run_takeovers",
            "Runs this replica took over after the replica running them stopped, by what it did with them "
            "(resumed, finished, cancelled, resumed_too_often, failed).",
            ["outcome"],
            registry=registry,
        )

    def span(self, name: str, attributes: Attributes = None) -> AbstractContextManager[Span]:
        """``tracer.start_as_current_span``; with tracing off, one shared no-op (a no-op tracer's span still costs a
        context switch of its own, for a dozen spans a run), whose span ignores what it is told as theirs does."""
        if not self._tracing:
            return _NO_SPAN
        return self.tracer.start_as_current_span(name, attributes=attributes)

    @classmethod
    def disabled(cls) -> RunTelemetry:
        return cls(CollectorRegistry(), trace.NoOpTracer())

    def run_started(self) -> None:
        self._in_flight.inc()

    def run_ended(self, outcome: str, rounds: int, *, failed: bool = False) -> None:
        self._in_flight.dec()
        self._runs.labels(outcome, "error" if failed else "ok").inc()
        self._rounds.observe(rounds)

    def run_outcome(self, span: Span, outcome: str, finish_reason: str, error_message: str | None = None) -> None:
        """The ``agent_run`` span says how the run ended; a failed run marks it, and the request's server span
        (a streamed run's answer is a 200 whatever happens), as errors."""
        span.set_attribute("agent.outcome", outcome)
        span.set_attribute("agent.finish_reason", finish_reason)
        if error_message is not None:
            mark_span_failed(span, outcome, error_message)
            mark_request_failed(outcome, error_message)

    def run_refused(self, *, code: str, status: int, message: str) -> None:
        """A run refused before it started (bad request, unknown model or tools, a dependency down)."""
        result = "error" if status >= 500 else "refused"
        self._runs.labels(code, result).inc()
        level = _log.warning if status >= 500 else _log.info
        level("run_refused", code=code, status=status, message=message)

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
        tenant_server: bool = False,
    ) -> None:
        """One audit line per tool call: who called what, how it went; never the arguments.

        ``server`` is ``-`` for a tool the run does not list: its name is the model's, so the metrics count
        it under ``tool="unlisted"`` (the audit line keeps the name). ``tenant_server``: the tool is of a server its
        tenant registered, counted under ``TENANT_SERVERS_LABEL`` as the gateway counts it (the audit line keeps the
        names)."""
        if tenant_server:
            server_label = label = TENANT_SERVERS_LABEL
        else:
            server_label, label = server, tool if server != "-" else UNLISTED_TOOL
        self._tool_calls.observe(server_label, label, status, seconds=seconds)
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

    def tool_cache(self, outcome: str) -> None:
        self._tool_cache.labels(outcome).inc()

    def store_write(self, seconds: float, *, ok: bool) -> None:
        self._store_writes.labels("ok" if ok else "error").observe(seconds)

    def run_taken_over(self, *, run_id: str, outcome: str, resumes: int) -> None:
        self._takeovers.labels(outcome).inc()
        _log.info("run_taken_over", run_id=run_id, outcome=outcome, resumes=resumes)

    def budget_exhausted(self, *, run_id: str, budget: str, rounds: int, seconds: float) -> None:
        """A run stopped by its limits rather than by an answer: worth an operator's look."""
        _audit.warning(
            "audit_budget_exhausted", run_id=run_id, budget=budget, rounds=rounds, elapsed_ms=round(seconds * 1000, 1)
        )
