"""LLM calls cut off before the provider's closing usage are counted all the same, as estimates.

A tenant with a small monthly token budget (``BUDGET``) asks for a long answer; the scripted model streams it
(``fake_openai.text_then_hang``: every delta, then neither a finish reason nor a usage chunk) and the call is cut:
its client hangs up, the run is cancelled, its deadline passes. Each time the call must count toward the budget
(the Redis counter), the run's ``usage`` and the usage log (a row marked ``estimated``). The real services, Redis and
SQLite; only the provider is scripted.
"""

from __future__ import annotations

import json
import math
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis.asyncio as aioredis

from agent_service.admission.spend_ledgers import month_start
from agent_service.engine.metering import CHARS_PER_TOKEN
from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.databases import REDIS_URL
from support.stacks import Upstreams, running_agent, running_upstreams

pytestmark = pytest.mark.anyio

KEY = "acme-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex
BUDGET = 3000
WORDS = 2000
ANSWER = " ".join(["token"] * WORDS)
"""2,000 completion tokens as the scripted model counts them; ``len(ANSWER) / CHARS_PER_TOKEN`` as estimated."""
ESTIMATED_OUTPUT = math.ceil(len(ANSWER) / CHARS_PER_TOKEN)

CALLERS_FILE = f"""
[tenants.acme]
monthly_tokens = {BUDGET}

[tenants.globex]
monthly_cost_usd = 0.02

{key_entry("acme-app", "acme", KEY)}

{key_entry("globex-app", "globex", GLOBEX_KEY)}
"""
PRICES = {"inputPerMillionUsd": 2.5, "outputPerMillionUsd": 10.0}


def _run(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "write at length"}], "tools": ["echo"], **extra}


@asynccontextmanager
async def _agent(upstreams: Upstreams, tmp_path: Path, redis_prefix: str) -> AsyncIterator[httpx.AsyncClient]:
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE)
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url=f"sqlite:///{tmp_path / 'runs.db'}",
            callers_file=callers,
            redis_url=REDIS_URL,
            redis_key_prefix=redis_prefix,
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        yield http


async def _counted(redis_prefix: str) -> int:
    """The tenant's month counter in Redis (0 when there is none)."""
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        return int(await client.hget(f"{redis_prefix}spend:{month_start(datetime.now(UTC)):%Y-%m}:acme", "tokens") or 0)
    finally:
        await client.aclose()


def _usage_log(tmp_path: Path) -> list[tuple[str | None, int, int, int, str | None]]:
    """``(run_id, input_tokens, output_tokens, estimated, provider)`` of each row, oldest first."""
    with sqlite3.connect(tmp_path / "runs.db") as connection:
        return connection.execute(
            "SELECT run_id, input_tokens, output_tokens, estimated, provider FROM usage_log ORDER BY id"
        ).fetchall()


async def _eventually(probe: Callable[[], Awaitable[bool]], within: float = 10) -> None:
    """Waits (bounded) until ``probe`` holds: the cut call is counted while its cancellation unwinds in the service,
    which tells nobody when it is done."""
    with anyio.fail_after(within):
        while True:
            if await probe():
                return
            await anyio.sleep(0.02)


async def _stream_until_the_whole_answer(lines: AsyncIterator[str], text_of: Callable[[dict[str, Any]], str]) -> str:
    """Reads SSE ``data:`` lines until the answer's text is all there; returns the last line read."""
    received = ""
    async for line in lines:
        if line.startswith("data: {"):
            received += text_of(json.loads(line.removeprefix("data: ")))
            if received.strip() == ANSWER:
                return line
    raise AssertionError(f"the stream ended after {len(received)} characters")


def _run_text(event: dict[str, Any]) -> str:
    return str(event["delta"]) if event.get("type") == "text" else ""


def _assert_one_estimated_row(tmp_path: Path, run_id: str | None, *, output: int = ESTIMATED_OUTPUT) -> int:
    rows = _usage_log(tmp_path)
    assert len(rows) == 1, rows
    row_run, input_tokens, output_tokens, estimated, provider = rows[0]
    assert (row_run, output_tokens, estimated, provider) == (run_id, output, 1, None)
    assert input_tokens > 0, "the prompt was sent: it is counted too"
    return input_tokens + output_tokens


async def test_a_client_hanging_up_after_the_text_has_its_call_counted_and_its_next_run_refused(
    upstreams: Upstreams, tmp_path: Path, redis_prefix: str
) -> None:
    upstreams.llm.push(fake_openai.text_then_hang(ANSWER))
    async with _agent(upstreams, tmp_path, redis_prefix) as http:
        async with http.stream("POST", "/api/v1/agent/run", json=_run(stream=True), headers=as_caller(KEY)) as run:
            assert run.status_code == 200
            run_id = run.headers["x-agent-run-id"]
            await _stream_until_the_whole_answer(run.aiter_lines(), _run_text)
        # The client left with the whole answer (onDisconnect: cancel); the provider never said what it used.

        async def stored_cancelled() -> bool:
            record = (await http.get(f"/api/v1/agent/runs/{run_id}", headers=as_caller(KEY))).json()
            return bool(record["status"] == "cancelled")

        await _eventually(stored_cancelled)
        counted = _assert_one_estimated_row(tmp_path, run_id)
        assert await _counted(redis_prefix) == counted
        record = (await http.get(f"/api/v1/agent/runs/{run_id}", headers=as_caller(KEY))).json()
        assert record["usage"]["inputTokens"] + record["usage"]["outputTokens"] == counted
        assert counted >= WORDS, f"{counted} tokens counted for the {WORDS} the provider streamed"
        # 3,000 of 3,000 tokens: no second long answer for free.
        refused = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(KEY))
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "budget_exhausted"


async def test_a_run_cancelled_through_the_api_mid_call_counts_the_call_in_its_done_event(
    upstreams: Upstreams, tmp_path: Path, redis_prefix: str
) -> None:
    upstreams.llm.push(fake_openai.text_then_hang(ANSWER))
    async with _agent(upstreams, tmp_path, redis_prefix) as http:
        async with http.stream("POST", "/api/v1/agent/run", json=_run(stream=True), headers=as_caller(KEY)) as run:
            run_id = run.headers["x-agent-run-id"]
            lines = run.aiter_lines()
            await _stream_until_the_whole_answer(lines, _run_text)
            cancelled = await http.post(f"/api/v1/agent/runs/{run_id}/cancel", headers=as_caller(KEY))
            assert cancelled.status_code == 200, cancelled.text
            done = [json.loads(line[6:]) async for line in lines if line.startswith("data: {")][-1]
        assert (done["type"], done["finishReason"]) == ("done", "cancelled")
        counted = _assert_one_estimated_row(tmp_path, run_id)
        assert done["usage"]["inputTokens"] + done["usage"]["outputTokens"] == counted
        assert cancelled.json()["usage"]["outputTokens"] == ESTIMATED_OUTPUT
        assert await _counted(redis_prefix) == counted


async def test_a_run_whose_deadline_cuts_its_call_counts_the_call_and_reports_it_in_its_usage(
    upstreams: Upstreams, tmp_path: Path, redis_prefix: str
) -> None:
    upstreams.llm.push(fake_openai.text_then_hang(ANSWER))
    async with _agent(upstreams, tmp_path, redis_prefix) as http:
        # Not streamed to its caller: under a budget the call is streamed from completion-service all the same.
        answered = await http.post("/api/v1/agent/run", json=_run(deadlineSeconds=1), headers=as_caller(KEY))
        assert answered.status_code == 200, answered.text
        result = answered.json()
        assert result["finishReason"] == "deadline"
        counted = _assert_one_estimated_row(tmp_path, answered.headers["x-agent-run-id"])
        assert result["usage"]["inputTokens"] + result["usage"]["outputTokens"] == counted
        assert await _counted(redis_prefix) == counted


async def test_a_caller_not_streaming_that_hangs_up_mid_call_has_the_call_counted(
    upstreams: Upstreams, tmp_path: Path, redis_prefix: str
) -> None:
    upstreams.llm.push(fake_openai.text_then_hang(ANSWER))
    async with _agent(upstreams, tmp_path, redis_prefix) as http:

        async def ask() -> None:
            await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(KEY))

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(ask)
            with anyio.fail_after(10):
                await upstreams.llm.wait_for_request(1)
            task_group.cancel_scope.cancel()  # the caller hangs up without reading anything

        async def counted() -> bool:
            return len(_usage_log(tmp_path)) == 1

        await _eventually(counted)
        [(_, input_tokens, output_tokens, estimated, _)] = _usage_log(tmp_path)
        assert estimated == 1
        assert input_tokens > 0
        assert await _counted(redis_prefix) == input_tokens + output_tokens


async def test_a_plain_completion_of_the_openai_front_cut_off_by_its_client_is_counted(
    upstreams: Upstreams, tmp_path: Path, redis_prefix: str
) -> None:
    upstreams.llm.push(fake_openai.text_then_hang(ANSWER))
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "write at length"}], "stream": True}
    headers = {**as_caller(KEY), "X-Agent-Disabled": "true"}

    def chunk_text(chunk: dict[str, Any]) -> str:
        return "".join(choice["delta"].get("content") or "" for choice in chunk.get("choices", []))

    async with _agent(upstreams, tmp_path, redis_prefix) as http:
        async with http.stream("POST", "/v1/chat/completions", json=chat, headers=headers) as response:
            assert response.status_code == 200
            await _stream_until_the_whole_answer(response.aiter_lines(), chunk_text)

        async def logged() -> bool:
            return len(_usage_log(tmp_path)) == 1

        await _eventually(logged)
        counted = _assert_one_estimated_row(tmp_path, None)
        assert await _counted(redis_prefix) == counted


async def test_under_a_cost_budget_a_cut_off_call_costs_its_estimate_at_the_models_prices(
    tmp_path: Path, redis_prefix: str
) -> None:
    catalog = [{"name": "priced", "provider": "openai", "model": "gpt-4o", "prices": PRICES}]
    async with running_upstreams(catalog=catalog) as upstreams, _agent(upstreams, tmp_path, redis_prefix) as http:
        upstreams.llm.push(fake_openai.text_then_hang(ANSWER))
        body = {**_run(stream=True), "model": "priced"}
        async with http.stream("POST", "/api/v1/agent/run", json=body, headers=as_caller(GLOBEX_KEY)) as run:
            assert run.status_code == 200
            await _stream_until_the_whole_answer(run.aiter_lines(), _run_text)

        async def logged() -> bool:
            return len(_usage_log(tmp_path)) == 1

        await _eventually(logged)
        [(_, input_tokens, output_tokens, estimated, _)] = _usage_log(tmp_path)
        assert (output_tokens, estimated) == (ESTIMATED_OUTPUT, 1)
        cost = (input_tokens * PRICES["inputPerMillionUsd"] + output_tokens * PRICES["outputPerMillionUsd"]) / 1e6
        with sqlite3.connect(tmp_path / "runs.db") as connection:
            [(logged_cost,)] = connection.execute("SELECT cost_usd FROM usage_log").fetchall()
        assert logged_cost == pytest.approx(cost)
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            key = f"{redis_prefix}spend:{month_start(datetime.now(UTC)):%Y-%m}:globex"
            assert int(await client.hget(key, "micros") or 0) == round(cost * 1_000_000)  # $0.0302 of $0.02
        finally:
            await client.aclose()
        refused = await http.post(
            "/api/v1/agent/run", json={**_run(), "model": "priced"}, headers=as_caller(GLOBEX_KEY)
        )
        assert refused.status_code == 429, refused.text
        assert "tenant_monthly_cost" in refused.json()["error"]["message"]
