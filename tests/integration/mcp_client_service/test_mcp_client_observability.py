"""What an operator sees of the gateway: Prometheus metrics, server states, and the caller's trace passed on."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from support.mcp_gateway import echo_stdio_server, running_gateway

pytestmark = pytest.mark.anyio

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_tool_calls_and_server_states_are_on_the_metrics_page() -> None:
    async with running_gateway({"local": echo_stdio_server("local")}) as gateway:
        await gateway.wait_until_ready("local")
        await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "echo", "arguments": {"text": "hi"}})
        await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "fail", "arguments": {"message": "boom"}})
        await gateway.http.post("/mcp/v1/tools/call-tool", json={"name": "echo", "arguments": {"text": 3}})
        page = await gateway.http.get("/metrics")
    assert page.status_code == 200
    samples = _samples(page.text)
    calls = {labels: value for (name, labels), value in samples.items() if name == "mcp_tool_calls_total"}
    assert calls[(("outcome", "ok"), ("server", "local"), ("tool", "echo"))] == 1
    assert calls[(("outcome", "tool_error"), ("server", "local"), ("tool", "fail"))] == 1
    assert calls[(("outcome", "invalid_arguments"), ("server", "local"), ("tool", "echo"))] == 1
    assert samples[("mcp_server_circuit_state", (("server", "local"), ("state", "closed")))] == 1
    assert samples[("mcp_server_circuit_state", (("server", "local"), ("state", "open")))] == 0
    assert samples[("mcp_server_serving", (("server", "local"),))] == 1
    route = (("method", "POST"), ("route", "/mcp/v1/tools/call-tool"), ("status", "200"))
    assert samples[("http_requests_total", route)] == 3


async def test_the_callers_trace_reaches_the_mcp_server_in_meta() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with running_gateway({"local": echo_stdio_server("local")}, tracer_provider=provider) as gateway:
        await gateway.wait_until_ready("local")
        response = await gateway.http.post(
            "/mcp/v1/tools/call-tool",
            json={"name": "trace_context", "arguments": {}},
            headers={"traceparent": TRACEPARENT},
        )
    carried = json.loads(response.json()["content"][0]["text"])
    trace_id, caller_span = TRACEPARENT.split("-")[1:3]
    # The server sees the same trace, with the gateway's own span as the parent.
    assert carried["traceparent"].split("-")[1] == trace_id
    assert carried["traceparent"].split("-")[2] != caller_span
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert spans["mcp_tool_call"].context.trace_id == int(trace_id, 16)
    assert spans["mcp_tool_call"].attributes is not None
    assert spans["mcp_tool_call"].attributes["tool.server"] == "local"
    assert format(spans["mcp_tool_call"].context.span_id, "016x") == carried["traceparent"].split("-")[2]
