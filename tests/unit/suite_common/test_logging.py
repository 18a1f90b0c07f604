"""Logs as a process writes them: JSON lines on stdout, each line written inside a span carrying its trace id."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import httpx
import pytest
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from structlog.testing import capture_logs

from suite_common.logging import bound_run_id, get_logger, logged_with
from suite_common.observability import Observability
from suite_common.settings import ServiceSettings
from suite_common.tracing import trace_headers

pytestmark = pytest.mark.anyio

_PROGRAM = textwrap.dedent(
    """
    import logging, sys
    from opentelemetry.sdk.trace import TracerProvider
    from suite_common.logging import configure_logging, get_logger

    configure_logging("info", "json")
    log = get_logger("demo")
    log.info("outside_any_span")
    with TracerProvider().get_tracer("demo").start_as_current_span("work") as span:
        log.info("inside_a_span")
        logging.getLogger("uvicorn.error").warning("a standard library record")
    print(format(span.get_span_context().trace_id, "032x"), file=sys.stderr)
    """
)


def test_a_service_logs_json_lines_to_stdout_with_the_trace_id_of_the_span_they_are_written_in() -> None:
    done = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=60, check=True)
    trace_id = done.stderr.strip()  # nothing but what the program printed there itself
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["event"] for line in lines] == ["outside_any_span", "inside_a_span", "a standard library record"]
    assert "trace_id" not in lines[0]
    assert lines[1]["trace_id"] == lines[2]["trace_id"] == trace_id
    assert len(lines[1]["span_id"]) == 16


async def test_the_callers_run_and_trace_are_bound_to_the_lines_of_its_request_and_garbage_is_ignored() -> None:
    log = get_logger("test")

    async def handler(_: Request) -> Response:
        log.info("handled")
        return JSONResponse(trace_headers())

    observability = Observability.create("test-service", ServiceSettings())
    app = Starlette(routes=[Route("/work", handler, methods=["GET"]), *observability.routes()])
    observability.install(app)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://service") as http:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            forwarded = await http.get("/work", headers={"x-run-id": "run_abc123", "traceparent": traceparent})
            await http.get("/work", headers={"x-run-id": "run with spaces <script>", "traceparent": "garbage"})
    first, second = logs
    assert (first["run_id"], first["trace_id"]) == ("run_abc123", "4bf92f3577b34da6a3ce929d0e0e4736")
    assert "run_id" not in second
    assert "trace_id" not in second
    # The run goes on with whatever the service calls next (its tracing is off here: no traceparent).
    assert forwarded.json() == {"x-run-id": "run_abc123"}


def test_logged_with_binds_its_values_to_the_lines_inside_and_puts_back_what_was_bound_before() -> None:
    log = get_logger("test")
    structlog.contextvars.clear_contextvars()
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as lines:
        assert bound_run_id() is None
        with logged_with(run_id="run_a", round=1):
            log.info("outer")
            assert bound_run_id() == "run_a"
            with logged_with(run_id="run_b", tool_call_id="call_0"):
                log.info("inner")
                assert bound_run_id() == "run_b"
            log.info("outer_again")
            assert bound_run_id() == "run_a"
        log.info("outside")
        assert bound_run_id() is None
    assert [{key: value for key, value in line.items() if key != "log_level"} for line in lines] == [
        {"event": "outer", "run_id": "run_a", "round": 1},
        {"event": "inner", "run_id": "run_b", "round": 1, "tool_call_id": "call_0"},
        {"event": "outer_again", "run_id": "run_a", "round": 1},
        {"event": "outside"},
    ]
    assert structlog.contextvars.get_contextvars() == {}


def test_the_run_bound_by_structlog_itself_is_the_run_trace_headers_send() -> None:
    with logged_with(run_id="run_a"):  # the variable is known from here on
        pass
    structlog.contextvars.clear_contextvars()
    with structlog.contextvars.bound_contextvars(run_id="run_c"):
        assert bound_run_id() == "run_c"
        assert trace_headers() == {"x-run-id": "run_c"}
    assert bound_run_id() is None
    assert trace_headers() == {}
