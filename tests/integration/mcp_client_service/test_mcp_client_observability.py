"""What an operator sees of the gateway: Prometheus metrics, server states, and the caller's trace passed on."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from suite_common.tracing import create_tracer_provider
from support.mcp_gateway import Gateway, echo_stdio_server, running_gateway
from support.otlp_receiver import otlp_receiver

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


async def _until_counted(gateway: Gateway, name: str, labels: tuple[tuple[str, str], ...]) -> float:
    """Polls /metrics until the series exists: a hang-up is noticed by the gateway soon after, not at once."""
    with anyio.fail_after(5):
        while True:
            value = _samples((await gateway.http.get("/metrics")).text).get((name, labels))
            if value:
                return value
            await anyio.sleep(0.02)


async def test_each_outcome_has_its_own_latency_series_and_its_own_span_attribute() -> None:
    async with otlp_receiver() as receiver:
        provider = create_tracer_provider("mcp-client-service", receiver.url)
        async with running_gateway(
            {"local": echo_stdio_server("local")}, tracer_provider=provider, call_timeout_seconds=0.5
        ) as gateway:
            await gateway.wait_until_ready("local")
            calls = [
                ("echo", {"text": "hi"}),
                ("fail", {"message": "boom"}),
                ("echo", {"text": 3}),
                ("slow", {"seconds": 30}),
            ]
            for name, arguments in calls:
                response = await gateway.http.post(
                    "/mcp/v1/tools/call-tool", json={"name": name, "arguments": arguments}
                )
                assert response.status_code == 200
            page = await gateway.http.get("/metrics")
        assert provider is not None
        with anyio.fail_after(10):
            await anyio.to_thread.run_sync(provider.shutdown)
    samples = _samples(page.text)
    latency = {
        dict(labels)["outcome"]: value
        for (name, labels), value in samples.items()
        if name == "mcp_tool_call_duration_seconds_count"
    }
    assert latency == {"ok": 1, "tool_error": 1, "invalid_arguments": 1, "timeout": 1}
    spans = receiver.named("mcp_tool_call")
    outcomes = [(span.attributes["tool.name"], span.attributes["tool.outcome"], span.status) for span in spans]
    assert outcomes == [
        ("echo", "ok", "UNSET"),
        ("fail", "tool_error", "ERROR"),
        ("echo", "invalid_arguments", "ERROR"),
        ("slow", "timeout", "ERROR"),
    ]
    assert [span.attributes.get("error.type") for span in spans[1:]] == ["tool_error", "invalid_arguments", "timeout"]


async def test_a_caller_that_hangs_up_mid_call_is_counted_as_cancelled_and_its_span_says_so() -> None:
    async with otlp_receiver() as receiver:
        provider = create_tracer_provider("mcp-client-service", receiver.url)
        async with running_gateway({"local": echo_stdio_server("local")}, tracer_provider=provider) as gateway:
            await gateway.wait_until_ready("local")

            async def departing_caller() -> None:
                async with httpx.AsyncClient(base_url=gateway.url, headers=dict(gateway.http.headers)) as caller:
                    await caller.post("/mcp/v1/tools/call-tool", json={"name": "hold", "arguments": {"tag": "gone"}})

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(departing_caller)
                    await gateway.http.post(
                        "/mcp/v1/tools/call-tool",
                        json={"name": "await_hold", "arguments": {"tag": "gone", "event": "started"}},
                    )
                    tg.cancel_scope.cancel()  # the caller goes away while the server holds the call
            # The server did receive the call: the gateway counts it, under its own outcome.
            key = (("outcome", "cancelled"), ("server", "local"), ("tool", "hold"))
            assert await _until_counted(gateway, "mcp_tool_calls_total", key) == 1
            assert await _until_counted(gateway, "mcp_tool_call_duration_seconds_count", key) == 1
        assert provider is not None
        with anyio.fail_after(10):
            await anyio.to_thread.run_sync(provider.shutdown)
    [held] = [span for span in receiver.named("mcp_tool_call") if span.attributes["tool.name"] == "hold"]
    assert (held.attributes["tool.outcome"], held.attributes["tool.server"], held.status) == (
        "cancelled",
        "local",
        "ERROR",
    )
