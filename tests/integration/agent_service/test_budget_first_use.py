"""A counter's first use with its adds off the answer's path: each call counted once, and nothing an add failed to
send dropped with the run's slot.

A counter missing in Redis is seeded from the run store by the add that finds it missing. The add of a run whose
counter was missing is therefore made inline, before the call's usage row is written (a plain completion's
``log_usage``, a run's end step): sent off the path, it could seed from a store already holding the call's row, then add
the call again. Redis is the real one at 127.0.0.1:6379 (keys of the test's ``redis_prefix``); the end-to-end tests
run agent-service on a PostgreSQL database of their own.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from agent_service.admission.budgets import Budgets
from agent_service.admission.run_slots import RedisRunSlots, SlotClaim
from agent_service.admission.spend_ledgers import LedgerUnavailable, RedisSpendLedger, SpendKey, Spent, month_start
from agent_service.core.tenancy import TenantRules
from agent_service.infra.shared_redis import connect_redis
from suite_common.wire import Usage
from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.databases import REDIS_URL
from support.stacks import Upstreams, running_agent

pytestmark = pytest.mark.anyio

RULES = {"acme": TenantRules(monthly_tokens=100_000, user_monthly_tokens=50_000)}


def _month() -> str:
    return f"{month_start(datetime.now(UTC)):%Y-%m}"


async def _tokens(prefix: str, tenant: str = "acme", user: str | None = None) -> int:
    client = aioredis.Redis.from_url(REDIS_URL)
    name = f"{prefix}spend:{_month()}:{tenant}" + ("" if user is None else f":user:{user}")
    try:
        return int(await client.hget(name, "tokens") or 0)
    finally:
        await client.aclose()


class UsageLog:
    """The run store's usage log, as a ``UsageSource``: the rows written so far, per (tenant, user)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str | None, Usage]] = []

    async def __call__(self, tenant: str, since: datetime, *, user: str | None = None) -> Usage:
        mine = [usage for row_tenant, row_user, usage in self.rows if row_tenant == tenant and user in (None, row_user)]
        return Usage(input_tokens=sum(usage.input_tokens for usage in mine))


class FailingOnce(RedisSpendLedger):
    """Redis counters whose first add fails (Redis unreachable for that one round trip)."""

    failed = False

    async def add(self, keys: Sequence[SpendKey], spent: Spent) -> list[Spent | None]:
        if not self.failed:
            self.failed = True
            raise LedgerUnavailable("Redis: TimeoutError")
        return await super().add(keys, spent)


log = UsageLog()


@asynccontextmanager
async def replica(prefix: str, ledger: type[RedisSpendLedger] = RedisSpendLedger) -> AsyncIterator[Budgets]:
    client = connect_redis(REDIS_URL)
    try:
        yield Budgets(ledger(client, key_prefix=prefix), rules=RULES, source=log)
    finally:
        await client.aclose()


async def test_a_calls_add_that_finds_no_counter_is_made_before_its_row_is_written_and_counts_it_once(
    redis_prefix: str,
) -> None:
    tenant = "acme"
    async with replica(redis_prefix) as budgets:
        slots = RedisRunSlots(budgets.ledger.client, 15, key_prefix=redis_prefix)  # type: ignore[attr-defined]
        guard = await budgets.admit(tenant, "alice", slot=SlotClaim(slots, tenant, "run-1", 4))
        assert guard is not None
        call = Usage(input_tokens=6)
        await guard.spent(call)
        # The call's row is written right after its usage is told (no yield in between): an add still under way
        # would seed the counter from a log holding it, then add it again.
        log.rows.append((tenant, "alice", call))
        try:
            assert await guard.exhausted() is None
            assert await _tokens(redis_prefix) == 6
            assert await _tokens(redis_prefix, user="alice") == 6
            # Seeded now: the next call's add goes off the answer's path again.
            await guard.spent(Usage(input_tokens=4))
            assert budgets.pending.pending(tenant) == 1
            assert await guard.exhausted() is None
            assert await _tokens(redis_prefix) == 10
        finally:
            log.rows.clear()
        await budgets.release(SlotClaim(slots, tenant, "run-1", 4), guard)


async def test_a_usage_an_add_failed_to_send_goes_with_the_slots_release_when_nothing_else_is_unsent(
    redis_prefix: str,
) -> None:
    async with replica(redis_prefix, FailingOnce) as budgets:
        slots = RedisRunSlots(budgets.ledger.client, 15, key_prefix=redis_prefix)  # type: ignore[attr-defined]
        await budgets.ledger.seed(SpendKey("acme", _month()), Spent(100), datetime(2100, 1, 1, tzinfo=UTC))
        claim = SlotClaim(slots, "acme", "run-1", 4)
        guard = await budgets.admit("acme", None, slot=claim)
        assert guard is not None
        await guard.spent(Usage(input_tokens=7))
        await budgets.pending.settled("acme")  # that add failed: its usage waits for the next one
        assert await _tokens(redis_prefix) == 100
        await budgets.release(claim, guard)  # the run ends with nothing else unsent
        assert await _tokens(redis_prefix) == 107
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            assert await client.zrange(f"{redis_prefix}run-slots:acme", 0, -1) == []
        finally:
            await client.aclose()


# --- through agent-service, on PostgreSQL ----------------------------------------------------------------------

KEY = "hooli-" + uuid.uuid4().hex


@asynccontextmanager
async def agent(
    upstreams: Upstreams, tmp_path: Path, redis_prefix: str, database_url: str
) -> AsyncIterator[httpx.AsyncClient]:
    """agent-service on PostgreSQL and Redis, tenant ``hooli`` with monthly budgets; a client of it."""
    callers = tmp_path / "callers.toml"
    callers.write_text(
        "[tenants.hooli]\nmonthly_tokens = 100000\nuser_monthly_tokens = 50000\n\n"
        + key_entry("hooli-app", "hooli", KEY, trusted=True)
    )
    async with (
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url=database_url,
            callers_file=callers,
            redis_url=REDIS_URL,
            redis_key_prefix=redis_prefix,
        ) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        yield http


@pytest.mark.parametrize("attempt", range(2))
async def test_a_plain_completion_first_of_the_month_is_counted_once(
    upstreams: Upstreams, tmp_path: Path, redis_prefix: str, own_postgres_url: str, attempt: int
) -> None:
    async with agent(upstreams, tmp_path, redis_prefix, own_postgres_url) as http:
        upstreams.llm.push(fake_openai.text("done"))
        chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
        answer = await http.post(
            "/v1/chat/completions", json=chat, headers={**as_caller(KEY), "X-Agent-Disabled": "true"}
        )
        assert answer.status_code == 200, answer.text
        used = answer.json()["usage"]["total_tokens"]
    # The service has stopped: what it sent after the answer is written.
    assert await _tokens(redis_prefix, "hooli") == used


async def test_a_runs_calls_first_of_the_month_are_counted_once(
    upstreams: Upstreams, tmp_path: Path, redis_prefix: str, own_postgres_url: str
) -> None:
    async with agent(upstreams, tmp_path, redis_prefix, own_postgres_url) as http:
        upstreams.llm.push(fake_openai.tool_calls(("c1", "echo", {"text": "x"})), fake_openai.text("done"))
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": ["echo"]}
        answer = await http.post("/api/v1/agent/run", json=body, headers={**as_caller(KEY), "X-User-Id": "u1"})
        assert answer.status_code == 200, answer.text
        used = answer.json()["usage"]["inputTokens"] + answer.json()["usage"]["outputTokens"]
    assert await _tokens(redis_prefix, "hooli") == used
    assert await _tokens(redis_prefix, "hooli", user="u1") == used
