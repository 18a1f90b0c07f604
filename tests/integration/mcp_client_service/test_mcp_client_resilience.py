"""Servers that misbehave at the transport: unbounded lines, noise on stdout and stderr, crashes on every
start, an HTTP server that is never there; the circuit breaker (and what it does not count), and the
figures the call path reports.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from mcp_client_service.registry.server_registry import ServerRegistry
from support.mcp_gateway import (
    FAST_RETRIES,
    WAIT_SECONDS,
    Gateway,
    echo_http_server,
    leaves_no_child_processes,
    raw_stdio_server,
    running_gateway,
)
from support.misbehaving_mcp_server import misbehaving_server
from support.servers import free_port

pytestmark = pytest.mark.anyio

CALL = "/mcp/v1/tools/call-tool"
BREAKER: dict[str, Any] = {"breaker_failure_threshold": 3, "breaker_window_seconds": 60.0, "breaker_open_seconds": 0.5}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _call(gateway: Gateway, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    response = await gateway.http.post(CALL, json={"name": name, "arguments": arguments or {}})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _status(gateway: Gateway, name: str) -> dict[str, Any]:
    servers = (await gateway.http.get("/mcp/v1/servers")).json()["servers"]
    status: dict[str, Any] = next(server for server in servers if server["name"] == name)
    return status


async def _wait(registry: ServerRegistry, condition: Any) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        await registry.wait_until(condition)


async def test_a_stdio_server_writing_a_line_without_end_is_stopped_at_the_limit_and_restarted() -> None:
    limit = 1024 * 1024
    with leaves_no_child_processes(), capture_logs() as logs:
        async with running_gateway(
            {"flood": raw_stdio_server("flood")}, stdio_max_line_bytes=limit, **FAST_RETRIES
        ) as gateway:
            await gateway.wait_until_ready("flood")
            flooding_pid = int((await _call(gateway, "pid"))["content"][0]["text"])
            connection = gateway.registry.connections["flood"]

            started = time.monotonic()
            flooded = await _call(gateway, "flood")  # writes 64 KiB chunks without a newline, forever
            elapsed = time.monotonic() - started

            await _wait(gateway.registry, lambda _: connection.attempts >= 2 and connection.serving)
            restarted_pid = int((await _call(gateway, "pid"))["content"][0]["text"])

    assert elapsed < 10
    assert flooded["isError"] is True
    assert (
        'The connection to the MCP server "flood" dropped during the call to "flood"' in flooded["content"][0]["text"]
    )
    [failed] = [log for log in logs if log["event"] == "mcp_server_failed"]
    assert failed["error"] == (
        f"the server wrote more than {limit} bytes without a newline (MCP_CLIENT_STDIO_MAX_LINE_BYTES), "
        "so its session was closed"
    )
    assert restarted_pid != flooding_pid
    assert not _alive(flooding_pid)


async def test_lines_on_stdout_that_are_not_json_rpc_are_skipped_and_logged() -> None:
    with capture_logs() as logs:
        async with running_gateway({"noisy": raw_stdio_server("noisy-stdout")}) as gateway:
            await gateway.wait_until_ready("noisy")
            echoed = [await _call(gateway, "echo", {"text": f"call {n}"}) for n in range(3)]
            status = await _status(gateway, "noisy")

    assert [result["content"][0]["text"] for result in echoed] == ["call 0", "call 1", "call 2"]
    assert status["state"] == "ready"
    noise = [log for log in logs if log["event"] == "mcp_server_stdout_not_jsonrpc"]
    assert [log["line"] for log in noise[:4]] == [
        "Starting server v1.2 ...",
        "{broken json",
        '{"hello": "not a JSON-RPC message"}',
        "INFO ready",
    ]
    assert len(noise) == 5  # then it stops logging the same server's noise
    assert noise[-1]["more_are_not_logged"] is True


async def test_a_stdio_server_that_crashes_at_every_restart_opens_its_circuit_and_calls_fail_fast(
    tmp_path: Path,
) -> None:
    server = raw_stdio_server("crash-on-restart", "--state", str(tmp_path / "started-once"))
    with leaves_no_child_processes():
        async with running_gateway({"fragile": server}, **FAST_RETRIES, **BREAKER) as gateway:
            await gateway.wait_until_ready("fragile")
            connection = gateway.registry.connections["fragile"]

            await _call(gateway, "die")  # from now on it crashes at every start
            await _wait(gateway.registry, lambda _: connection.circuit == "open")
            started = time.monotonic()
            refused = await gateway.http.post(CALL, json={"name": "echo", "arguments": {"text": "anyone?"}})
            refused_in = time.monotonic() - started
            status = await _status(gateway, "fragile")
            attempts_when_open = connection.attempts

            # Half-open after breaker_open_seconds: one more attempt, which fails and opens it again.
            await _wait(gateway.registry, lambda _: connection.attempts > attempts_when_open)
            await _wait(gateway.registry, lambda _: connection.circuit == "open")

    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "tool_unavailable"
    text = refused.json()["error"]["message"]
    assert 'the circuit of the MCP server "fragile" is open after 3 failures within 60 s' in text
    assert refused.headers["retry-after"] == "1"  # breaker_open_seconds is 0.5
    assert refused_in < 1
    assert status["state"] == "failed"
    assert status["circuit"] == "open"
    assert status["circuitDetail"].startswith('the circuit of the MCP server "fragile" is open')
    assert status["lastError"] == "the server process exited with status 1"
    # The first session ended by the crash in "die" (counted once, though a call failed with it),
    # then two starts that crashed: three failures.
    assert attempts_when_open == 3


async def test_an_http_server_that_is_never_there_gets_the_same_breaker() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    async with running_gateway({"gone": {"url": url}}, **FAST_RETRIES, **BREAKER) as gateway:
        connection = gateway.registry.connections["gone"]
        await _wait(gateway.registry, lambda _: connection.circuit == "open")
        status = await _status(gateway, "gone")

    assert connection.attempts == 3
    assert (status["state"], status["circuit"]) == ("failed", "open")
    assert "ConnectError" in status["lastError"]


async def test_calls_reported_by_the_call_path_give_the_p50_and_trip_the_breaker() -> None:
    async with echo_http_server("web") as url, running_gateway({"web": {"url": url}}, **BREAKER) as gateway:
        await gateway.wait_until_ready("web")
        registry = gateway.registry
        assert registry.call_refusal("web") is None
        for seconds in (0.010, 0.030, 0.020):
            registry.record_call("web", seconds, ok=True)
        healthy = await _status(gateway, "web")

        registry.record_call("web", 5.0, ok=False)  # a timeout, say
        one_failure = await _status(gateway, "web")
        registry.record_call("web", 0.5, ok=False)
        registry.record_call("web", 0.5, ok=False)
        tripped = await _status(gateway, "web")
        refusal = registry.call_refusal("web")
        listed = (await gateway.http.get("/mcp/v1/tools/list-tools")).json()["tools"]
        refused = await gateway.http.post(CALL, json={"name": "echo", "arguments": {"text": "hello?"}})

        await _wait(registry, lambda r: r.connections["web"].circuit != "open")  # after breaker_open_seconds
        half_open = registry.connections["web"].circuit
        answered = await _call(gateway, "echo", {"text": "back"})
        registry.record_call("web", 0.01, ok=True)
        recovered = await _status(gateway, "web")

    assert (healthy["state"], healthy["p50LatencyMs"], healthy["circuit"]) == ("ready", 20.0, "closed")
    assert (one_failure["state"], one_failure["circuit"]) == ("degraded", "closed")
    assert (tripped["state"], tripped["circuit"]) == ("degraded", "open")
    assert refusal is not None
    assert refusal.startswith('the circuit of the MCP server "web" is open after 3 failures')
    # While the circuit is open its tools are listed as unavailable, and calls are refused with 503.
    [reason] = {tool["unavailable"]["reason"] for tool in listed}
    assert reason.startswith('the circuit of the MCP server "web" is open after 3 failures')
    assert all(0 <= tool["unavailable"]["retryAfterSeconds"] <= 0.5 for tool in listed)
    assert refused.status_code == 503
    assert refusal in refused.json()["error"]["message"]
    assert half_open == "half_open"
    assert answered["content"] == [{"type": "text", "text": "back"}]
    assert (recovered["state"], recovered["circuit"]) == ("ready", "closed")
    assert registry.call_refusal("nowhere") == 'the MCP server "nowhere" is no longer in the gateway\'s config'
    assert registry.call_timeout("web") is None


async def test_a_callers_short_deadlines_and_error_answers_do_not_open_a_healthy_servers_circuit() -> None:
    async with (
        misbehaving_server("stdio", ["hang", "rpc-error"]) as trouble,
        running_gateway({"trouble": trouble}, **BREAKER) as gateway,
    ):
        await gateway.wait_until_ready("trouble")
        connection = gateway.registry.connections["trouble"]

        for n in range(5):  # each ends at the caller's 100 ms, not at the server's own limit
            response = await gateway.http.post(
                CALL, json={"name": "hang", "arguments": {"tag": f"short-{n}"}}, headers={"X-Deadline-Ms": "100"}
            )
            assert "did not finish within 0.1 s" in response.json()["content"][0]["text"]
        errors = [await _call(gateway, "rpc_error") for _ in range(5)]  # the server answers, with an error
        status = await _status(gateway, "trouble")
        echoed = await _call(gateway, "echo", {"text": "still called"})

    assert all(error["isError"] and "the database is down" in error["content"][0]["text"] for error in errors)
    assert (status["circuit"], connection.breaker.recent_failures()) == ("closed", 0)
    assert echoed["content"] == [{"type": "text", "text": "still called"}]


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
async def test_a_servers_error_answers_with_codes_of_the_servers_range_are_refusals_not_lost_connections(
    transport: str,
) -> None:
    # -32000 and -32001 are also the SDK's own codes for a dropped connection and a timeout; a server
    # may answer with them all the same (-32000..-32099 is the servers' range).
    async with (
        misbehaving_server(transport, ["rpc-error"]) as trouble,
        running_gateway({"trouble": trouble}, **BREAKER, **FAST_RETRIES) as gateway,
    ):
        await gateway.wait_until_ready("trouble")
        connection = gateway.registry.connections["trouble"]
        pid_before = (await _call(gateway, "pid"))["content"][0]["text"]

        started = time.monotonic()
        answers = [await _call(gateway, "rpc_error", {"code": code}) for code in (-32000, -32001) * 3]
        elapsed = time.monotonic() - started
        status = await _status(gateway, "trouble")
        listed = {tool["name"] for tool in (await gateway.http.get("/mcp/v1/tools/list-tools")).json()["tools"]}
        pid_after = (await _call(gateway, "pid"))["content"][0]["text"]

    texts = [answer["content"][0]["text"] for answer in answers]
    assert all(answer["isError"] for answer in answers)
    assert texts[:2] == [
        'The MCP server "trouble" refused the call to "rpc_error": error -32000: the database is down',
        'The MCP server "trouble" refused the call to "rpc_error": error -32001: the database is down',
    ]
    assert elapsed < 5  # not reported as a timeout, nor waited for as one
    assert (connection.attempts, pid_after) == (1, pid_before)  # the session was kept, the child not respawned
    assert "rpc_error" in listed
    assert (status["state"], status["circuit"], connection.breaker.recent_failures()) == ("ready", "closed", 0)


async def test_a_stdio_servers_stderr_is_logged_as_its_own_rate_limited_and_unable_to_forge_lines(
    capfd: pytest.CaptureFixture[str],
) -> None:
    server = raw_stdio_server("stderr-noise", "--stderr-lines", "500")
    with capture_logs() as logs:
        async with running_gateway({"chatty": server}) as gateway:
            await gateway.wait_until_ready("chatty")
        # Leaving the gateway stops the child; what it wrote before that has been read by then.

    stderr = [log for log in logs if log["event"] == "mcp_server_stderr"]
    assert {log["server"] for log in stderr} == {"chatty"}
    lines = [log["line"] for log in stderr]
    assert lines[:4] == [
        "raw_mcp_server: starting",
        '{"event": "mcp_server_ready", "server": "forged", "log_level": "info"}',  # a field, not a record
        "\\x1b[31mred\\x1b[0m and a carriage\\x0dreturn",
        "L" * 4096 + " [...]",
    ]
    assert 40 <= len(stderr) <= 60  # a burst of lines, then a few a second; not 504
    [not_logged] = [log for log in logs if log["event"] == "mcp_server_stderr_not_logged"]
    assert not_logged["server"] == "chatty"
    assert not_logged["lines"] == 504 - len(stderr)
    assert "raw_mcp_server: starting" not in capfd.readouterr().err  # not on the gateway's own stderr
