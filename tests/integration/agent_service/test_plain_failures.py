"""What a caller is told when Redis or the run store fails: a code and a plain message, never an internal address
or a driver's words (those go to the log). Redis is one at a closed port; the store is a PostgreSQL database
dropped under the running service."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from structlog.testing import capture_logs

from support.caller_keys import as_caller, key_entry
from support.databases import ADMIN_DSN, fresh_postgres_database
from support.servers import free_port
from support.stacks import Upstreams, running_agent

pytestmark = pytest.mark.anyio

BUDGET_KEY = "budget-" + uuid.uuid4().hex

INTERNAL_WORDS = ("127.0.0.1", "Error", "errno", "connect", "asyncpg", "does not exist", "Redis", "postgres")
"""What Redis's and the drivers' own messages are made of, and what a caller's answer must not contain."""


def _assert_plain(body: str, *, port: int | None = None) -> None:
    for word in INTERNAL_WORDS:
        assert word not in body, body
    if port is not None:
        assert str(port) not in body, body


def _run() -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], "tools": ["echo"]}


async def test_redis_unreachable_for_the_run_slots_is_a_503_that_names_no_address(upstreams: Upstreams) -> None:
    port = free_port()
    with capture_logs() as logs:
        async with (
            running_agent(
                upstreams.completion_url, upstreams.gateway, database_url="", redis_url=f"redis://127.0.0.1:{port}/0"
            ) as agent_url,
            httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
        ):
            refused = await http.post("/api/v1/agent/run", json=_run())
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "limits_unavailable"
    _assert_plain(refused.text, port=port)
    # The operator still learns why, from the log.
    assert any(str(port) in str(line.get("error", "")) for line in logs if line["event"] == "run_slots_unavailable")


async def test_redis_unreachable_for_the_budgets_is_a_503_that_names_no_address(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    callers = tmp_path / "callers.toml"
    callers.write_text(f"[tenants.acme]\nmonthly_tokens = 1000\n\n{key_entry('acme-app', 'acme', BUDGET_KEY)}\n")
    port = free_port()
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url="",
            callers_file=callers,
            redis_url=f"redis://127.0.0.1:{port}/0",
            max_concurrent_runs_per_tenant=0,  # no slots: only the budgets need Redis here
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        refused = await http.post("/api/v1/agent/run", json=_run(), headers=as_caller(BUDGET_KEY))
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "limits_unavailable"
    _assert_plain(refused.text, port=port)


async def test_a_run_store_gone_answers_503_and_readyz_without_the_drivers_words(upstreams: Upstreams) -> None:
    with fresh_postgres_database() as database_url:
        async with (
            running_agent(upstreams.completion_url, upstreams.gateway, database_url=database_url) as agent_url,
            httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
        ):
            assert (await http.get("/readyz")).status_code == 200
            admin = await asyncpg.connect(ADMIN_DSN)
            try:
                await admin.execute(f'DROP DATABASE "{database_url.rsplit("/", 1)[1]}" WITH (FORCE)')
            finally:
                await admin.close()
            with capture_logs() as logs:
                run = await http.get("/api/v1/agent/runs/run_gone")
                conversations = await http.get("/api/v1/agent/conversations")
                ready = await http.get("/readyz")
    for response in (run, conversations):
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "store_unavailable"
        assert response.headers["Retry-After"] == "1"
        _assert_plain(response.text)
    assert ready.status_code == 503, ready.text
    assert "run-store" in ready.text
    _assert_plain(ready.text)
    # Why is in the log: the driver's own words.
    logged = {line["event"]: line.get("error") for line in logs}
    assert logged["store_unavailable"]
    assert logged["run_store_not_ready"]
