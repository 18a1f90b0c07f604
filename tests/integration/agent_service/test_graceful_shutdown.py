"""SIGTERM, for real: agent-service and completion-service run as real processes and get a real signal.

While draining a service answers /readyz with 503 ``shutting_down``; agent-service refuses new runs;
runs in flight may finish within the grace period; a stream still open after it ends with an ``error``
event ``shutting_down`` rather than a silent cut; then the process exits with status 0.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from pydantic import SecretStr

from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.fake_openai import ScriptedOpenAI, hang, text, text_then_hang, tool_calls
from support.mcp_gateway import GATEWAY_SECRET, Gateway, echo_stdio_server, running_gateway
from support.processes import spawned
from support.servers import free_port, serve_app

pytestmark = pytest.mark.anyio

_gate_tags = itertools.count(1)


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[Gateway]:
    async with running_gateway({"local": echo_stdio_server("local")}) as gateway:
        await gateway.wait_until_ready("local")
        yield gateway


async def until_answered(http: httpx.AsyncClient, path: str, status: int) -> httpx.Response:
    """Polls ``path`` until it answers ``status`` (the signal handler runs soon after the signal, not at once)."""
    with anyio.fail_after(5):
        while True:
            response = await http.get(path)
            if response.status_code == status:
                return response
            await anyio.sleep(0.02)


async def exit_status(process: anyio.abc.Process, within: float) -> int:
    with anyio.fail_after(within):
        return await process.wait()


def events_of(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ")]


@asynccontextmanager
async def agent_process(
    llm: ScriptedOpenAI, gateway: Gateway, tmp_path: Path, *, grace_seconds: float
) -> AsyncIterator[tuple[anyio.abc.Process, httpx.AsyncClient]]:
    """agent-service as a process, over an in-test completion-service (in front of ``llm``) and ``gateway``."""
    async with serve_app(llm.app) as llm_url:
        settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), max_retries=0
        )
        async with serve_app(create_completion_app(settings)) as completion_url:
            port = free_port()
            env = {
                "AGENT_HOST": "127.0.0.1",
                "AGENT_PORT": str(port),
                "AGENT_COMPLETION_URL": completion_url,
                "AGENT_MCP_CLIENT_URL": gateway.url,
                "AGENT_MCP_SERVICE_SECRET": GATEWAY_SECRET,
                "AGENT_SHUTDOWN_GRACE_SECONDS": str(grace_seconds),
            }
            async with (
                spawned("agent_service", env, port, tmp_path / "agent.log") as process,
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
            ):
                ready = await http.get("/readyz")
                assert (ready.status_code, ready.json()["status"]) == (200, "ready"), ready.text
                yield process, http


def run_body(question: str, **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": question}], **fields}


async def test_on_sigterm_a_run_in_flight_finishes_while_readiness_and_new_runs_get_503_then_the_process_exits(
    gateway: Gateway, tmp_path: Path
) -> None:
    tag = f"shutdown-{next(_gate_tags)}"
    llm = ScriptedOpenAI([tool_calls(("call_1", "gate", {"tag": tag})), text("The gate opened.")])
    async with agent_process(llm, gateway, tmp_path, grace_seconds=30) as (process, http):
        lines: list[str] = []
        with anyio.fail_after(30):
            async with http.stream("POST", "/api/v1/agent/run", json=run_body("Pass.", tools=["gate"])) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    lines.append(line)
                    if not line.startswith("data: ") or json.loads(line[6:])["type"] != "tool_call":
                        continue
                    # The run now waits on the gate: it is in flight when the signal comes.
                    process.send_signal(signal.SIGTERM)
                    ready = await until_answered(http, "/readyz", 503)
                    assert ready.json()["status"] == "shutting_down"
                    refused = await http.post("/api/v1/agent/run", json=run_body("A new run."))
                    assert refused.status_code == 503
                    assert refused.json()["error"]["code"] == "shutting_down"
                    assert refused.headers["retry-after"] == "1"
                    assert (await http.get("/healthz")).status_code == 200  # alive, only not taking work
                    assert process.returncode is None
                    opened = await gateway.http.post(
                        "/mcp/v1/tools/call-tool", json={"name": "open_gate", "arguments": {"tag": tag}}
                    )
                    assert opened.status_code == 200
        events = events_of(lines)
        assert [event["type"] for event in events][-2:] == ["text", "done"]
        assert events[-1]["finishReason"] == "stop"
        assert "".join(e["delta"] for e in events if e["type"] == "text") == "The gate opened."
        assert await exit_status(process, within=10) == 0
    assert len(llm.requests) == 2  # the refused run never reached the model


async def test_runs_still_going_after_the_grace_period_end_with_shutting_down_streamed_or_not(
    gateway: Gateway, tmp_path: Path
) -> None:
    grace_seconds = 1.0
    llm = ScriptedOpenAI([text_then_hang("Let me think about"), hang()])
    async with agent_process(llm, gateway, tmp_path, grace_seconds=grace_seconds) as (process, http):
        lines: list[str] = []
        whole: list[httpx.Response] = []

        async def run_without_streaming() -> None:
            whole.append(await http.post("/api/v1/agent/run", json=run_body("Think.", tools=[], stream=False)))

        with anyio.fail_after(30):
            body = run_body("Think.", tools=[])
            async with http.stream("POST", "/api/v1/agent/run", json=body) as response, anyio.create_task_group() as tg:
                assert response.status_code == 200
                stream = response.aiter_lines()
                async for line in stream:
                    lines.append(line)
                    if line.startswith("data: ") and json.loads(line[6:])["type"] == "text":
                        break  # the model is stuck mid-answer
                tg.start_soon(run_without_streaming)
                await llm.wait_for_request(2)  # both runs wait on the model
                process.send_signal(signal.SIGTERM)
                signalled_at = time.monotonic()
                lines += [line async for line in stream]
                ended_at = time.monotonic()
        events = events_of(lines)
        assert events[-1]["type"] == "error"
        assert events[-1]["code"] == "shutting_down"
        assert events[-1]["runId"] == events[0]["runId"]
        assert "done" not in [event["type"] for event in events]
        assert ended_at - signalled_at >= grace_seconds  # the run had its grace period first
        [answer] = whole
        assert (answer.status_code, answer.json()["error"]["code"]) == (503, "shutting_down")
        assert answer.headers["retry-after"] == "1"
        assert await exit_status(process, within=10) == 0
        # The stuck LLM calls were abandoned upstream too, not left hanging.
        with anyio.fail_after(10):
            await llm.wait_for_hangup(2)


async def test_completion_service_drains_on_sigterm_and_ends_what_is_left_after_the_grace_period_with_503s(
    tmp_path: Path,
) -> None:
    llm = ScriptedOpenAI([text_then_hang("Half an answer"), hang()])
    async with serve_app(llm.app) as llm_url:
        port = free_port()
        env = {
            "COMPLETION_HOST": "127.0.0.1",
            "COMPLETION_PORT": str(port),
            "COMPLETION_OPENAI_BASE_URL": f"{llm_url}/v1",
            "COMPLETION_OPENAI_API_KEY": "test-key",
            "COMPLETION_SHUTDOWN_GRACE_SECONDS": "2",
        }
        async with (
            spawned("completion_service", env, port, tmp_path / "completion.log") as process,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
        ):
            assert (await http.get("/readyz")).status_code == 200
            body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "Hi."}]}
            lines: list[str] = []
            whole: list[httpx.Response] = []

            async def complete_without_streaming() -> None:
                whole.append(await http.post("/api/v1/completions", json={**body, "stream": False}))

            with anyio.fail_after(30):
                async with (
                    http.stream("POST", "/api/v1/completions", json=body) as response,
                    anyio.create_task_group() as tg,
                ):
                    assert response.status_code == 200
                    stream = response.aiter_lines()
                    async for line in stream:
                        lines.append(line)
                        if line.startswith("data: ") and json.loads(line[6:])["type"] == "text":
                            break  # the model is stuck mid-answer
                    tg.start_soon(complete_without_streaming)
                    await llm.wait_for_request(2)
                    process.send_signal(signal.SIGTERM)
                    ready = await until_answered(http, "/readyz", 503)
                    assert ready.json()["status"] == "shutting_down"
                    lines += [line async for line in stream]
            events = events_of(lines)
            assert events[-1] == {
                "type": "error",
                "code": "shutting_down",
                "message": events[-1]["message"],
                "retryable": True,
            }
            [answer] = whole
            assert (answer.status_code, answer.json()["error"]["code"]) == (503, "shutting_down")
            assert await exit_status(process, within=10) == 0
            with anyio.fail_after(10):
                await llm.wait_for_hangup(2)
