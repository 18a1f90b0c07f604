"""The usage log and ``GET /api/v1/agent/usage`` through the real services.

agent-service stores in SQLite, with a callers file of two tenants (``acme``: a trusted key and an untrusted one;
``globex``); the tools are the echo MCP server's behind a real mcp-client-service; only the LLM is scripted (it
reports token usage as OpenAI does). Each LLM call of a run is one row of the usage log; the endpoint sums the
caller's tenant's rows per model.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.stacks import AgentStack, running_agent, running_stack

pytestmark = pytest.mark.anyio

ACME_KEY = "acme-" + uuid.uuid4().hex
ACME_APP_KEY = "acme-app-" + uuid.uuid4().hex
GLOBEX_KEY = "globex-" + uuid.uuid4().hex


CALLERS_FILE = f"""
[tenants.acme]
[tenants.globex]

{key_entry("acme-platform", "acme", ACME_KEY, trusted=True)}

{key_entry("acme-app", "acme", ACME_APP_KEY)}

{key_entry("globex-app", "globex", GLOBEX_KEY, trusted=True)}
"""


@dataclass
class Stack(AgentStack):
    database: Path
    unstored_url: str
    """An agent-service alike but storing no runs (``AGENT_DATABASE_URL=""``)."""


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    folder = tmp_path_factory.mktemp("usage")
    callers = folder / "callers.toml"
    callers.write_text(CALLERS_FILE)
    database = folder / "runs.db"
    async with (
        running_stack(database_url=f"sqlite:///{database}", callers_file=callers) as stack,
        running_agent(stack.completion_url, stack.gateway, database_url="", callers_file=callers) as unstored_url,
    ):
        yield Stack(**vars(stack), database=database, unstored_url=unstored_url)


async def _two_call_run(stack: Stack, key: str, user: str | None = None) -> dict[str, Any]:
    """A run of two LLM calls (a tool call, then the answer); returns it as ``GET /runs/{id}`` reads it."""
    stack.llm.push(fake_openai.tool_calls(("call_1", "echo", {"text": "usage"})), fake_openai.text("All done."))
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "echo usage please"}], "tools": ["echo"]}
    response = await stack.http.post("/api/v1/agent/run", json=body, headers=as_caller(key, user))
    assert response.status_code == 200, response.text
    assert response.json()["iterations"] == 2
    run = await stack.http.get(f"/api/v1/agent/runs/{response.json()['runId']}", headers=as_caller(key))
    assert run.status_code == 200, run.text
    view: dict[str, Any] = run.json()
    return view


async def _usage(stack: Stack, key: str, **params: str) -> dict[str, Any]:
    response = await stack.http.get("/api/v1/agent/usage", params=params, headers=as_caller(key))
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def _logged(stack: Stack, run_id: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(stack.database) as connection:
        return connection.execute(
            "SELECT tenant, user_id, caller, model, provider, input_tokens, output_tokens FROM usage_log "
            "WHERE run_id = ? ORDER BY id",
            (run_id,),
        ).fetchall()


async def test_each_llm_call_of_a_run_is_one_usage_row_with_the_tokens_the_provider_reported(stack: Stack) -> None:
    first_request = len(stack.llm.requests)
    run = await _two_call_run(stack, ACME_KEY, "user-rows")

    rows = _logged(stack, run["runId"])
    asked = stack.llm.requests[first_request:]
    assert len(rows) == len(asked) == 2
    assert [row[:5] for row in rows] == [("acme", "user-rows", "acme-platform", "gpt-4o", "openai")] * 2
    # Each row's input tokens are what the provider counted for that call (the second call's prompt is longer).
    assert [row[5] for row in rows] == [fake_openai._prompt_tokens(body) for body in asked]
    assert (sum(row[5] for row in rows), sum(row[6] for row in rows)) == (
        run["usage"]["inputTokens"],
        run["usage"]["outputTokens"],
    )
    assert run["user"] == "user-rows"


async def test_the_usage_endpoint_matches_the_sum_of_the_llm_calls_of_the_tenants_runs(stack: Stack) -> None:
    start = (datetime.now(UTC) - timedelta(milliseconds=1)).isoformat()
    runs = [await _two_call_run(stack, key) for key in (ACME_KEY, ACME_APP_KEY, ACME_KEY)]
    await _two_call_run(stack, GLOBEX_KEY)  # another tenant's: not in acme's report

    report = await _usage(stack, ACME_APP_KEY, **{"from": start})

    tokens = (sum(run["usage"]["inputTokens"] for run in runs), sum(run["usage"]["outputTokens"] for run in runs))
    assert report["tenant"] == "acme"
    assert [(line["model"], line["calls"]) for line in report["models"]] == [("gpt-4o", 6)]
    assert (report["models"][0]["inputTokens"], report["models"][0]["outputTokens"]) == tokens
    assert report["total"] == {"calls": 6, "inputTokens": tokens[0], "outputTokens": tokens[1]}  # no price: no cost
    assert datetime.fromisoformat(report["from"]) == datetime.fromisoformat(start)
    assert datetime.fromisoformat(report["to"]) <= datetime.now(UTC)


async def test_another_tenants_usage_is_not_visible(stack: Stack) -> None:
    start = (datetime.now(UTC) - timedelta(milliseconds=1)).isoformat()
    await _two_call_run(stack, ACME_KEY, "user-acme-only")

    acme = await _usage(stack, ACME_APP_KEY, **{"from": start})
    assert acme["total"]["calls"] == 2
    globex = await _usage(stack, GLOBEX_KEY, **{"from": start})
    assert (globex["tenant"], globex["models"], globex["total"]["calls"]) == ("globex", [], 0)
    filtered = await _usage(stack, GLOBEX_KEY, **{"from": start, "user": "user-acme-only"})
    assert filtered["models"] == []


async def test_usage_is_filtered_to_one_end_user(stack: Stack) -> None:
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    mine = await _two_call_run(stack, ACME_KEY, alice)
    await _two_call_run(stack, ACME_KEY, bob)

    report = await _usage(stack, ACME_APP_KEY, user=alice)  # this month so far, any key of the tenant
    assert report["user"] == alice
    assert report["total"] == {
        "calls": 2,
        "inputTokens": mine["usage"]["inputTokens"],
        "outputTokens": mine["usage"]["outputTokens"],
    }


async def test_a_plain_completion_of_the_openai_front_is_logged_too(stack: Stack) -> None:
    user = f"front-{uuid.uuid4().hex[:8]}"
    stack.llm.push(fake_openai.text("plain answer"))
    response = await stack.http.post(
        "/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "just answer"}]},
        headers={**as_caller(ACME_KEY, user), "X-Agent-Disabled": "true"},
    )
    assert response.status_code == 200, response.text
    reported = response.json()["usage"]

    report = await _usage(stack, ACME_KEY, user=user)
    assert report["total"] == {
        "calls": 1,
        "inputTokens": reported["prompt_tokens"],
        "outputTokens": reported["completion_tokens"],
    }


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"from": "yesterday"}, "from must be an ISO 8601 date"),
        ({"to": "2026-13-01"}, "to must be an ISO 8601 date"),
        ({"from": "2026-11-02", "to": "2026-11-01"}, "is after to"),
        ({"from": "2024-01-01", "to": "2025-01-02T00:00:01Z"}, "longer than 366 days"),
        ({"user": ""}, "user must be an X-User-Id: 1 to 128 printable ASCII characters without spaces"),
        ({"user": "a\x00b"}, "user must be an X-User-Id"),  # a NUL: PostgreSQL refused it, a 503
        ({"user": "two words"}, "user must be an X-User-Id"),
    ],
)
async def test_a_bad_range_or_user_is_a_400_that_says_why(stack: Stack, params: dict[str, str], says: str) -> None:
    response = await stack.http.get("/api/v1/agent/usage", params=params, headers=as_caller(ACME_KEY))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert says in response.json()["error"]["message"]


async def test_dates_and_times_without_an_offset_are_utc_and_a_whole_leap_year_is_allowed(stack: Stack) -> None:
    report = await _usage(stack, ACME_KEY, **{"from": "2024-01-01", "to": "2025-01-01T00:00:00"})
    assert (report["from"], report["to"]) == ("2024-01-01T00:00:00+00:00", "2025-01-01T00:00:00+00:00")
    shifted = await _usage(stack, ACME_KEY, **{"from": "2026-11-01T02:00:00+02:00", "to": "2026-11-02"})
    assert shifted["from"] == "2026-11-01T00:00:00+00:00"
    assert shifted["total"]["calls"] == 0


async def test_the_usage_endpoint_needs_a_key_and_stored_runs(stack: Stack) -> None:
    assert (await stack.http.get("/api/v1/agent/usage")).status_code == 401
    async with httpx.AsyncClient(base_url=stack.unstored_url, timeout=30) as http:
        response = await http.get("/api/v1/agent/usage", headers=as_caller(ACME_KEY))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "runs_not_stored"
