"""The tool servers honour their OTLP setting: a tool call is a span of the caller's trace, exported by the
tool server itself (a real process over stdio) to a real OTLP receiver, under the gateway's own span."""

from __future__ import annotations

import sys

import anyio
import pytest

from suite_common.tracing import create_tracer_provider
from support.fake_searxng import ScriptedSearxng
from support.mcp_gateway import running_gateway
from support.otlp_receiver import otlp_receiver
from support.servers import serve_app

pytestmark = pytest.mark.anyio

CALLER_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{CALLER_TRACE_ID}-00f067aa0ba902b7-01"


async def test_a_tool_call_through_the_gateway_is_a_span_of_the_web_search_server_in_the_callers_trace() -> None:
    searxng = ScriptedSearxng()
    async with otlp_receiver() as receiver, serve_app(searxng.app) as searxng_url:
        server_env = {
            "WEB_SEARCH_SEARXNG_URL": searxng_url,
            "WEB_SEARCH_BACKENDS": "searxng",
            "WEB_SEARCH_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "50",  # export within the test, not 5 s later
        }
        web = {"command": sys.executable, "args": ["-m", "mcp_web_search"], "env": server_env}
        gateway_tracing = create_tracer_provider("mcp-client-service", receiver.url)
        async with running_gateway({"web": web}, tracer_provider=gateway_tracing) as gateway:
            await gateway.wait_until_ready("web")
            response = await gateway.http.post(
                "/mcp/v1/tools/call-tool",
                json={"name": "web_search", "arguments": {"query": "model context protocol"}},
                headers={"traceparent": TRACEPARENT},
            )
            assert (response.status_code, response.json()["isError"]) == (200, False)
            [tool_span] = await receiver.wait_for("tools/call web_search")
        assert gateway_tracing is not None
        with anyio.fail_after(10):
            await anyio.to_thread.run_sync(gateway_tracing.shutdown)
    gateway_span = receiver.only("mcp_tool_call")
    assert (tool_span.service, tool_span.kind) == ("mcp-web-search", "SERVER")
    assert tool_span.trace_id == gateway_span.trace_id == CALLER_TRACE_ID
    assert tool_span.parent_span_id == gateway_span.span_id
    assert tool_span.attributes["gen_ai.tool.name"] == "web_search"
    assert gateway_span.attributes["tool.outcome"] == "ok"
