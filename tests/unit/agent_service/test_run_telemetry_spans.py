"""The loop's spans (``RunTelemetry.span``): recorded with their attributes when tracing is on; with tracing off, no
span of its own is made, and code inside sees the span it would see under a no-op tracer."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from agent_service.infra.telemetry import RunTelemetry


def test_with_tracing_on_each_span_is_recorded_with_its_attributes_and_is_current_inside() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = RunTelemetry(CollectorRegistry(), provider.get_tracer("test"))
    with telemetry.span("agent_run", attributes={"agent.run_id": "run_1"}) as run_span:
        with telemetry.span("agent_round", {"agent.round.index": 1}) as round_span:
            assert trace.get_current_span() is round_span
            round_span.set_attribute("extra", "yes")
        assert trace.get_current_span() is run_span
    recorded = {span.name: span for span in exporter.get_finished_spans()}
    assert set(recorded) == {"agent_run", "agent_round"}
    assert recorded["agent_run"].attributes == {"agent.run_id": "run_1"}
    assert recorded["agent_round"].attributes == {"agent.round.index": 1, "extra": "yes"}
    assert recorded["agent_round"].parent is not None
    assert recorded["agent_round"].parent.span_id == recorded["agent_run"].context.span_id


def test_with_tracing_off_a_span_is_a_shared_no_op_that_ignores_what_it_is_told() -> None:
    telemetry = RunTelemetry.disabled()
    before = trace.get_current_span()
    with telemetry.span("agent_run", {"agent.run_id": "run_1"}) as span:
        span.set_attribute("agent.outcome", "stop")  # ignored, as a no-op tracer's span ignores it
        assert not span.is_recording()
        assert not span.get_span_context().is_valid
        assert not trace.get_current_span().get_span_context().is_valid
    assert trace.get_current_span() is before
    assert telemetry.span("another") is telemetry.span("agent_run")
