"""What an operator sees of whole agent runs: /metrics of agent-service and completion-service, one trace per
run across both services, and the audit log.

The stack is real on loopback (completion-service in front of a scripted OpenAI server, mcp-client-service
over the echo MCP server on stdio, agent-service); only the LLM is scripted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
import structlog
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from structlog.testing import capture_logs

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from suite_common.logging import add_trace_context
from suite_common.tracing import create_tracer_provider
from support.fake_openai import ScriptedOpenAI, error, text, tool_calls
from support.mcp_gateway import GATEWAY_SECRET, Gateway, echo_stdio_server, running_gateway
from support.otlp_receiver import OtlpReceiver, otlp_receiver
from support.servers import free_port, serve_app

pytestmark = pytest.mark.anyio

SECRET_VALUE = "s3cr3t-value"
"""An argument value that must never reach a log line."""


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[Gateway]:
    """mcp-client-service over the echo server (as server ``local``): the slow part to start, shared."""
    async with running_gateway({"local": echo_stdio_server("local")}) as gateway:
        await gateway.wait_until_ready("local")
        yield gateway


@dataclass
class Stack:
    agent: httpx.AsyncClient
    completion: httpx.AsyncClient


@asynccontextmanager
async def stack(
    llm: ScriptedOpenAI,
    gateway: Gateway,
    *,
    tracer_provider: TracerProvider | None = None,
    max_retries: int = 0,
) -> AsyncIterator[Stack]:
    """Fresh completion-service and agent-service apps (fresh metrics), sharing ``tracer_provider``."""
    completion_settings = CompletionSettings(max_retries=max_retries, openai_api_key=SecretStr("test-key"))
    async with serve_app(llm.app) as llm_url:
        completion_app = create_completion_app(
            completion_settings.model_copy(update={"openai_base_url": f"{llm_url}/v1"}),
            tracer_provider=tracer_provider,
        )
        async with serve_app(completion_app) as completion_url:
            agent_settings = AgentSettings(
                completion_url=completion_url,
                mcp_client_url=gateway.url,
                mcp_service_secret=SecretStr(GATEWAY_SECRET),
            )
            async with (
                serve_app(create_agent_app(agent_settings, tracer_provider=tracer_provider)) as agent_url,
                httpx.AsyncClient(base_url=agent_url, timeout=30) as agent,
                httpx.AsyncClient(base_url=completion_url, timeout=30) as completion,
            ):
                yield Stack(agent, completion)


def run_body(question: str, **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": question}], **fields}


async def read_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    assert response.status_code == 200, response.text
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


async def run(http: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    with anyio.fail_after(30):
        async with http.stream("POST", "/api/v1/agent/run", json=body) as response:
            return [event async for event in read_events(response)]


class Metrics:
    """The samples of one scrape of ``/metrics``, looked up by name and labels."""

    def __init__(self, exposition: str) -> None:
        self.samples = [sample for family in text_string_to_metric_families(exposition) for sample in family.samples]

    def value(self, name: str, **labels: str) -> float:
        """The one sample ``name`` whose labels include ``labels``; 0 when none exists (a counter never touched)."""
        matching = [s.value for s in self.samples if s.name == name and labels.items() <= s.labels.items()]
        assert len(matching) <= 1, f"{name} {labels} matches {len(matching)} series"
        return matching[0] if matching else 0.0

    def label_sets(self, name: str) -> list[dict[str, str]]:
        return [sample.labels for sample in self.samples if sample.name == name]


async def scrape(http: httpx.AsyncClient) -> Metrics:
    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    return Metrics(response.text)


# --- metrics ----------------------------------------------------------------------------------------------


async def test_a_run_with_a_retried_llm_call_and_a_tool_call_shows_in_both_services_metrics(gateway: Gateway) -> None:
    llm = ScriptedOpenAI(
        [
            error(503, headers={"retry-after": "0"}),
            tool_calls(("call_1", "gate", {"tag": "metrics-run"})),
            text("The gate opened."),
        ]
    )
    async with stack(llm, gateway, max_retries=1) as services:
        with anyio.fail_after(30):
            body = run_body("Pass the gate.", tools=["gate"])
            async with services.agent.stream("POST", "/api/v1/agent/run", json=body) as response:
                events = []
                async for event in read_events(response):
                    events.append(event)
                    if event["type"] == "tool_call":
                        # The run waits on the gate: it is in flight, and says so.
                        during = await scrape(services.agent)
                        opened = await gateway.http.post(
                            "/mcp/v1/tools/call-tool", json={"name": "open_gate", "arguments": {"tag": "metrics-run"}}
                        )
                        assert opened.status_code == 200
        agent = await scrape(services.agent)
        completion = await scrape(services.completion)
    assert events[-1]["type"] == "done"
    assert (events[-1]["finishReason"], events[-1]["iterations"]) == ("stop", 2)
    usage = events[-1]["usage"]

    assert during.value("agent_runs_in_flight") == 1
    assert agent.value("agent_runs_in_flight") == 0
    assert agent.value("agent_runs_total", outcome="stop") == 1
    assert agent.label_sets("agent_runs_total") == [{"outcome": "stop", "result": "ok"}]
    assert (agent.value("agent_run_rounds_count"), agent.value("agent_run_rounds_sum")) == (1, 2)
    assert agent.value("agent_tool_calls_total", server="local", tool="gate", status="ok") == 1
    assert agent.value("agent_tool_call_duration_seconds_count", server="local", tool="gate") == 1
    run_route = {"method": "POST", "route": "/api/v1/agent/run"}
    assert agent.value("http_requests_total", **run_route, status="200") == 1
    assert agent.value("http_request_duration_seconds_count", **run_route) == 1

    llm_series = {"provider": "openai", "model": "gpt-4o"}
    assert completion.value("llm_calls_total", **llm_series, outcome="ok") == 2
    assert completion.value("llm_retries_total", provider="openai") == 1
    assert completion.value("llm_tokens_total", **llm_series, direction="input") == usage["inputTokens"]
    assert completion.value("llm_tokens_total", **llm_series, direction="output") == usage["outputTokens"]
    assert completion.value("llm_call_duration_seconds_count", **llm_series) == 2
    completions_route = {"method": "POST", "route": "/api/v1/completions", "status": "200"}
    assert completion.value("http_requests_total", **completions_route) == 2
    # The agent's check of the model name, under the route's template rather than the model's name.
    model_route = {"method": "GET", "route": "/api/v1/models/{model:path}", "status": "200"}
    assert completion.value("http_requests_total", **model_route) == 1


async def test_a_run_stopped_by_its_iteration_budget_is_counted_by_that_reason(gateway: Gateway) -> None:
    llm = ScriptedOpenAI([tool_calls(("call_1", "echo", {"text": "again"}))])
    async with stack(llm, gateway) as services:
        events = await run(services.agent, run_body("Loop.", tools=["echo"], maxIterations=1))
        metrics = await scrape(services.agent)
    assert events[-1]["finishReason"] == "max_iterations"
    assert metrics.value("agent_runs_total", outcome="max_iterations") == 1
    assert metrics.value("agent_runs_total", outcome="stop") == 0
    assert metrics.value("agent_tool_calls_total", server="local", tool="echo", status="ok") == 1


# --- traces -----------------------------------------------------------------------------------------------


def _only(spans: list[ReadableSpan]) -> ReadableSpan:
    assert len(spans) == 1, [span.name for span in spans]
    return spans[0]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_run_is_one_trace_across_agent_and_completion_service_with_a_span_per_round_and_call(
    gateway: Gateway, stream: bool
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    llm = ScriptedOpenAI([tool_calls(("call_1", "echo", {"text": "traced"})), text("Done.")])
    async with stack(llm, gateway, tracer_provider=provider) as services:
        if stream:
            events = await run(services.agent, run_body("Echo traced.", tools=["echo"]))
            assert events[-1]["type"] == "done"
        else:
            response = await services.agent.post("/api/v1/agent/run", json=run_body("Echo.", stream=False))
            assert (response.status_code, response.json()["iterations"]) == (200, 2)
    # The apps have stopped: every span has ended.
    spans = list(exporter.get_finished_spans())

    def named(name: str) -> list[ReadableSpan]:
        return [span for span in spans if span.name == name]

    def children(span: ReadableSpan) -> list[ReadableSpan]:
        assert span.context is not None
        return [child for child in spans if child.parent is not None and child.parent.span_id == span.context.span_id]

    def attribute(span: ReadableSpan, key: str) -> object:
        assert span.attributes is not None
        return span.attributes.get(key)

    agent_run = _only(named("agent_run"))
    assert agent_run.context is not None
    # Everything the request caused is in one trace: the run, and the model check and tool discovery before it.
    assert {span.context.trace_id for span in spans if span.context is not None} == {agent_run.context.trace_id}

    agent_request = _only(named("POST /api/v1/agent/run"))
    assert agent_request.kind is SpanKind.SERVER
    assert agent_run in children(agent_request)
    assert attribute(agent_run, "agent.model") == "gpt-4o"
    # The agent's check of the model name reached completion-service within the trace too.
    assert _only(named("GET /api/v1/models/{model:path}")) in children(agent_request)

    rounds = {attribute(span, "agent.round.index"): span for span in children(agent_run)}
    assert set(rounds) == {1, 2}
    assert {span.name for span in rounds.values()} == {"agent_round"}
    assert sorted(span.name for span in children(rounds[1])) == ["llm_call", "tool_call"]
    assert [span.name for span in children(rounds[2])] == ["llm_call"]

    tool_call = _only(named("tool_call"))
    assert dict(tool_call.attributes or {}) == {
        "tool.name": "echo",
        "tool.call_id": "call_1",
        "tool.server": "local",
        "tool.status": "ok",
    }
    for llm_call in named("llm_call"):
        assert attribute(llm_call, "llm.provider") == "openai"
        # completion-service continued the trace from the traceparent of the agent's LLM call...
        completion_request = _only(children(llm_call))
        assert (completion_request.name, completion_request.kind) == ("POST /api/v1/completions", SpanKind.SERVER)
        assert completion_request.parent is not None
        assert completion_request.parent.is_remote
        # ...and its call of the provider (streamed or not) is a span of that request.
        provider_call = _only(children(completion_request))
        assert provider_call.name == "provider_call"
        assert (attribute(provider_call, "llm.provider"), attribute(provider_call, "llm.model")) == ("openai", "gpt-4o")


# --- audit log --------------------------------------------------------------------------------------------


async def test_each_tool_call_has_one_audit_line_with_its_place_in_the_run_and_never_its_arguments(
    gateway: Gateway,
) -> None:
    llm = ScriptedOpenAI(
        [
            tool_calls(
                ("call_a", "echo", {"text": SECRET_VALUE}),
                ("call_b", "add", {"a": 2, "b": 3}),
                ("call_c", "whoami", {"password": SECRET_VALUE}),
            ),
            tool_calls(("call_d", "echo", {"text": f"again {SECRET_VALUE}"})),
            text("All done."),
        ]
    )
    async with stack(llm, gateway) as services:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            events = await run(services.agent, run_body("Use the tools.", tools=["echo", "add"]))
    assert events[-1]["type"] == "done"
    run_id = events[0]["runId"]
    audit = sorted(
        (entry for entry in logs if entry["event"] == "audit_tool_call"),
        key=lambda entry: (entry["round"], entry["call_index"]),
    )
    summary = [
        (e["run_id"], e["round"], e["call_index"], e["tool_call_id"], e["server"], e["tool"], e["status"])
        for e in audit
    ]
    assert summary == [
        (run_id, 1, 0, "call_a", "local", "echo", "ok"),
        (run_id, 1, 1, "call_b", "local", "add", "ok"),
        (run_id, 1, 2, "call_c", "-", "whoami", "refused"),  # not among the run's tools: never called
        (run_id, 2, 0, "call_d", "local", "echo", "ok"),
    ]
    assert all(isinstance(entry["latency_ms"], float) and entry["latency_ms"] >= 0 for entry in audit)
    assert all(entry["log_level"] == "info" for entry in audit)
    # The tool did receive the secret (its result carries it back), yet no audit line holds it.
    results = {e["toolCallId"]: e["content"] for e in events if e["type"] == "tool_result"}
    assert results["call_a"] == SECRET_VALUE
    assert not [entry for entry in audit if SECRET_VALUE in repr(entry)]
    assert not [entry for entry in audit if "arguments" in entry or "text" in entry or "password" in entry]


async def test_a_run_stopped_by_its_budget_writes_an_audit_line_and_its_log_lines_carry_the_run_id(
    gateway: Gateway,
) -> None:
    llm = ScriptedOpenAI(
        [tool_calls(("call_1", "echo", {"text": "one"})), tool_calls(("call_2", "echo", {"text": "two"}))]
    )
    async with stack(llm, gateway) as services:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            events = await run(services.agent, run_body("Loop.", tools=["echo"], maxIterations=2))
    assert events[-1]["finishReason"] == "max_iterations"
    run_id = events[0]["runId"]
    [exhausted] = [entry for entry in logs if entry["event"] == "audit_budget_exhausted"]
    assert (exhausted["run_id"], exhausted["budget"], exhausted["rounds"]) == (run_id, "max_iterations", 2)
    assert exhausted["log_level"] == "warning"
    # run_id is bound for the whole run: even a line that does not pass it carries it.
    [finished] = [entry for entry in logs if entry["event"] == "run_finished"]
    assert (finished["run_id"], finished["finish_reason"]) == (run_id, "max_iterations")
    assert "round" not in finished  # bound per round only, and this line is written after the last one
    rounds = [(entry["round"], entry["tool_call_id"]) for entry in logs if entry["event"] == "audit_tool_call"]
    assert rounds == [(1, "call_1"), (2, "call_2")]


# --- what an operator needs on top: failures visible, series bounded, refusals counted, one run everywhere --


@asynccontextmanager
async def traced_stack(
    llm: ScriptedOpenAI, gateway: Gateway, receiver: OtlpReceiver, **options: Any
) -> AsyncIterator[Stack]:
    """The stack exporting its spans over OTLP to ``receiver``, as to a production collector; all spans have
    arrived when it closes."""
    provider = create_tracer_provider("loopsuite", receiver.url)
    assert provider is not None
    try:
        async with stack(llm, gateway, tracer_provider=provider, **options) as services:
            yield services
    finally:
        with anyio.fail_after(10):
            await anyio.to_thread.run_sync(provider.shutdown)


@pytest.mark.parametrize("stream", [True, False])
async def test_a_run_that_fails_marks_its_spans_as_errors_and_counts_as_an_error(
    gateway: Gateway, stream: bool
) -> None:
    llm = ScriptedOpenAI([tool_calls(("call_1", "echo", {"text": "fine"})), error(401)])
    async with otlp_receiver() as receiver, traced_stack(llm, gateway, receiver) as services:
        body = run_body("Echo, then fail.", tools=["echo"], stream=stream)
        if stream:
            events = await run(services.agent, body)
            assert (events[-1]["type"], events[-1]["code"]) == ("error", "auth_failed")
        else:
            response = await services.agent.post("/api/v1/agent/run", json=body)
            assert (response.status_code, response.json()["error"]["code"]) == (502, "auth_failed")
        agent = await scrape(services.agent)
        completion = await scrape(services.completion)

    agent_run = receiver.only("agent_run")
    assert agent_run.status == "ERROR"
    assert agent_run.attributes["agent.outcome"] == "auth_failed"
    assert agent_run.attributes["agent.finish_reason"] == "error"
    assert agent_run.attributes["error.type"] == "auth_failed"
    # The request's own span too: streamed, its 200 went out long before the run failed.
    request = receiver.only("POST /api/v1/agent/run")
    assert (request.status, request.attributes["error.type"]) == ("ERROR", "auth_failed")
    # Each provider call says how it went, streamed or not.
    assert [span.attributes["llm.outcome"] for span in receiver.named("provider_call")] == ["ok", "auth_failed"]
    assert agent.value("agent_runs_total", outcome="auth_failed", result="error") == 1
    llm_series = {"provider": "openai", "model": "gpt-4o"}
    assert completion.value("llm_call_duration_seconds_count", **llm_series, outcome="ok") == 1
    assert completion.value("llm_call_duration_seconds_count", **llm_series, outcome="auth_failed") == 1
    assert agent.value("agent_tool_call_duration_seconds_count", server="local", tool="echo", status="ok") == 1


async def test_a_run_that_succeeds_says_so_on_its_span_and_leaves_the_request_unmarked(gateway: Gateway) -> None:
    llm = ScriptedOpenAI([text("Hello.")])
    async with otlp_receiver() as receiver, traced_stack(llm, gateway, receiver) as services:
        events = await run(services.agent, run_body("Hi."))
    assert events[-1]["finishReason"] == "stop"
    agent_run = receiver.only("agent_run")
    assert (agent_run.status, agent_run.attributes["agent.outcome"]) == ("UNSET", "stop")
    assert receiver.only("POST /api/v1/agent/run").status == "UNSET"


async def test_tool_names_the_model_invents_share_one_label(gateway: Gateway) -> None:
    invented = [f"invented_tool_{index}" for index in range(5)]
    llm = ScriptedOpenAI(
        [
            tool_calls(*((f"call_{name}", name, {}) for name in invented), ("call_echo", "echo", {"text": "x"})),
            text("Ok."),
        ]
    )
    async with stack(llm, gateway) as services:
        events = await run(services.agent, run_body("Call tools.", tools=["echo"]))
        metrics = await scrape(services.agent)
    assert events[-1]["finishReason"] == "stop"
    assert {labels["tool"] for labels in metrics.label_sets("agent_tool_calls_total")} == {"unlisted", "echo"}
    assert metrics.value("agent_tool_calls_total", server="-", tool="unlisted", status="refused") == 5
    assert {labels["tool"] for labels in metrics.label_sets("agent_tool_call_duration_seconds_count")} == {
        "unlisted",
        "echo",
    }


async def test_a_run_whose_client_hangs_up_mid_tool_call_marks_the_tool_call_span_with_its_server(
    gateway: Gateway,
) -> None:
    llm = ScriptedOpenAI([tool_calls(("call_1", "hold", {"tag": "agent-hangup"})), text("never")])
    async with otlp_receiver() as receiver, traced_stack(llm, gateway, receiver) as services:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:

                async def departing_client() -> None:
                    await run(services.agent, run_body("Hold.", tools=["hold"]))

                tg.start_soon(departing_client)
                await gateway.http.post(
                    "/mcp/v1/tools/call-tool",
                    json={"name": "await_hold", "arguments": {"tag": "agent-hangup", "event": "started"}},
                )
                tg.cancel_scope.cancel()  # the client goes away while the tool runs
            await gateway.http.post(
                "/mcp/v1/tools/call-tool",
                json={"name": "await_hold", "arguments": {"tag": "agent-hangup", "event": "cancelled"}},
            )
        [agent_run] = await receiver.wait_for("agent_run")
    tool_call = receiver.only("tool_call")
    assert (tool_call.status, tool_call.attributes["tool.status"]) == ("ERROR", "cancelled")
    assert tool_call.attributes["tool.server"] == "local"
    assert agent_run.attributes["agent.outcome"] == "cancelled"


async def test_runs_refused_before_they_start_are_counted_and_logged(gateway: Gateway) -> None:
    llm = ScriptedOpenAI([])
    async with stack(llm, gateway) as services:
        with capture_logs() as logs:
            unknown = await services.agent.post("/api/v1/agent/run", json=run_body("Hi.", tools=["no_such_tool"]))
            invalid = await services.agent.post("/api/v1/agent/run", json={"model": "gpt-4o"})
        metrics = await scrape(services.agent)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (400, "unknown_tools")
    assert invalid.status_code == 400
    invalid_code = invalid.json()["error"]["code"]
    assert metrics.value("agent_runs_total", outcome="unknown_tools", result="refused") == 1
    assert metrics.value("agent_runs_total", outcome=invalid_code, result="refused") == 1
    refused = [
        (entry["code"], entry["status"], entry["log_level"]) for entry in logs if entry["event"] == "run_refused"
    ]
    assert refused == [("unknown_tools", 400, "info"), (invalid_code, 400, "info")]


async def test_a_run_refused_because_completion_service_is_down_counts_as_an_error(gateway: Gateway) -> None:
    settings = AgentSettings(
        completion_url=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        mcp_client_url=gateway.url,
        mcp_service_secret=SecretStr(GATEWAY_SECRET),
    )
    async with (
        serve_app(create_agent_app(settings)) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as agent,
    ):
        with capture_logs() as logs:
            response = await agent.post("/api/v1/agent/run", json=run_body("Hi."))
        metrics = await scrape(agent)
    assert response.status_code == 503
    code = response.json()["error"]["code"]
    assert metrics.value("agent_runs_total", outcome=code, result="error") == 1
    [refused] = [entry for entry in logs if entry["event"] == "run_refused"]
    assert (refused["code"], refused["status"], refused["log_level"]) == (code, 503, "warning")


async def test_one_run_can_be_followed_in_the_logs_of_all_three_services_by_run_id_and_trace_id(
    gateway: Gateway,
) -> None:
    llm = ScriptedOpenAI(
        [error(503, headers={"retry-after": "0"}), tool_calls(("call_1", "echo", {"text": "x"})), text("Done.")]
    )
    async with otlp_receiver() as receiver, traced_stack(llm, gateway, receiver, max_retries=1) as services:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars, add_trace_context]) as logs:
            events = await run(services.agent, run_body("Echo.", tools=["echo"]))
    run_id = events[0]["runId"]
    trace_id = receiver.only("agent_run").trace_id
    by_event = {entry["event"]: entry for entry in logs}
    # agent-service, completion-service (its retry of the provider) and mcp-client-service (the tool call).
    for event in ("audit_tool_call", "run_finished", "provider_error", "provider_retry", "mcp_tool_call"):
        assert (by_event[event].get("run_id"), by_event[event].get("trace_id")) == (run_id, trace_id), by_event[event]
    # The callees' server spans carry the run too: a trace can be found from the run id in any service.
    assert {span.attributes.get("agent.run_id") for span in receiver.named("POST /api/v1/completions")} == {run_id}
    # Every line written while serving the run, in any of the three, carries both.
    assert not [entry for entry in logs if entry.get("trace_id") != trace_id or entry.get("run_id") != run_id]
