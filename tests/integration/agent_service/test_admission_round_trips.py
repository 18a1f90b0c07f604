"""Admission in one round trip: a new run's slot and its tenant's and user's monthly budgets checked by one Redis
script, each LLM call's add and the slot's release sent off the answer's path, and what still waits for them.

Redis is the real one at 127.0.0.1:6379; each test keeps to keys of its own prefix (``redis_prefix``). The round trips
are counted with Redis's ``MONITOR``: the commands sent with a key of the test's prefix (a script's own commands are
shown apart, and not counted).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis.asyncio as aioredis

from agent_service.admission.budgets import Budgets
from agent_service.admission.pending import PendingWrites
from agent_service.admission.run_slots import RedisRunSlots, SlotClaim
from agent_service.admission.spend_ledgers import RedisSpendLedger, SpendKey, Spent, month_start
from agent_service.core.tenancy import TenantRules
from agent_service.infra.shared_redis import connect_redis
from suite_common.errors import ApiError
from suite_common.wire import Usage
from support import fake_openai
from support.caller_keys import as_caller, key_entry
from support.databases import REDIS_URL
from support.processes import polled
from support.stacks import Upstreams, running_agent

pytestmark = pytest.mark.anyio

RULES = {
    "acme": TenantRules(monthly_tokens=1000, user_monthly_tokens=500),
    "warm-up": TenantRules(monthly_tokens=1000, user_monthly_tokens=500),
}


class Sent:
    """The commands sent to Redis with a key of a prefix while a ``monitored`` block ran (and ``counting``), by name,
    in the order Redis ran them."""

    def __init__(self, counting: bool) -> None:
        self.commands: list[str] = []
        self.counting = counting


@asynccontextmanager
async def monitored(prefix: str, *, counting: bool = True) -> AsyncIterator[Sent]:
    """Counts, with ``MONITOR``, what is sent with a key of ``prefix`` from its start (or from when ``counting`` is
    set) to its end: a marker command sent at the end says when every earlier one has been seen."""
    sent = Sent(counting)
    client = aioredis.Redis.from_url(REDIS_URL, socket_timeout=10)
    marker = f"{prefix}end-of-count"
    seen_all = anyio.Event()
    try:
        async with client.monitor() as monitor, anyio.create_task_group() as task_group:  # MONITOR is on here

            async def listen() -> None:
                while True:
                    seen = await monitor.next_command()
                    command = str(seen["command"])
                    if marker in command:
                        seen_all.set()
                        return
                    if sent.counting and seen["client_type"] != "lua" and prefix in command:
                        sent.commands.append(command.split(" ", 1)[0].lower())

            task_group.start_soon(listen)
            yield sent
            other = aioredis.Redis.from_url(REDIS_URL)
            try:
                await other.get(marker)
            finally:
                await other.aclose()
            with anyio.fail_after(10):
                await seen_all.wait()
    finally:
        await client.aclose()


@asynccontextmanager
async def limits(prefix: str) -> AsyncIterator[tuple[Budgets, RedisRunSlots]]:
    """The budgets and the run slots of one replica, on one Redis client as the service has them."""
    client = connect_redis(REDIS_URL)
    try:
        budgets = Budgets(RedisSpendLedger(client, key_prefix=prefix), rules=RULES)
        slots = RedisRunSlots(client, 15, key_prefix=prefix)
        # A run of another tenant first, so that Redis has every script loaded (a script Redis has not seen costs a
        # round trip more, once per Redis: NOSCRIPT, then loaded).
        await _seed(budgets, SpendKey("warm-up", _month()), 0)
        await _seed(budgets, SpendKey("warm-up", _month(), "u"), 0)
        guard = await budgets.admit("warm-up", "u", slot=SlotClaim(slots, "warm-up", "warm-run", 4))
        for _ in range(2):
            assert guard is not None
            await guard.spent(Usage(input_tokens=1))
            assert await guard.exhausted() is None
        await budgets.release(SlotClaim(slots, "warm-up", "warm-run", 4), guard)
        await slots.release("warm-up", "warm-run")
        yield budgets, slots
    finally:
        await client.aclose()


def _month() -> str:
    return f"{month_start(datetime.now(UTC)):%Y-%m}"


async def _slots_held(prefix: str, tenant: str = "acme") -> list[bytes]:
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        held: list[Any] = await client.zrange(f"{prefix}run-slots:{tenant}", 0, -1)
        return [bytes(member) for member in held]
    finally:
        await client.aclose()


async def _user_tokens(prefix: str, user: str) -> int:
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        return int(await client.hget(f"{prefix}spend:{_month()}:acme:user:{user}", "tokens") or 0)
    finally:
        await client.aclose()


async def _seed(budgets: Budgets, key: SpendKey, tokens: int) -> None:
    await budgets.ledger.seed(key, Spent(tokens), datetime(2100, 1, 1, tzinfo=UTC))


async def test_a_run_is_admitted_with_its_slot_and_both_budgets_in_one_evalsha_and_its_add_is_not_awaited(
    redis_prefix: str,
) -> None:
    async with limits(redis_prefix) as (budgets, slots):
        await _seed(budgets, SpendKey("acme", _month()), 10)
        await _seed(budgets, SpendKey("acme", _month(), "alice"), 10)
        async with monitored(redis_prefix) as admission:
            guard = await budgets.admit("acme", "alice", slot=SlotClaim(slots, "acme", "run-1", 4))
        assert admission.commands == ["evalsha"]
        assert await _slots_held(redis_prefix) == [b"run-1"]
        assert guard is not None
        async with monitored(redis_prefix) as check:
            assert await guard.exhausted() is None  # the counters admission read: nothing asked
        assert check.commands == []

        async with monitored(redis_prefix) as call:
            await guard.spent(Usage(input_tokens=40, output_tokens=2))
            assert budgets.pending.pending("acme") == 1, "the add is under way, not awaited by the call's end"
            assert await guard.exhausted() is None  # the next check waits for it
            assert budgets.pending.pending("acme") == 0
        assert call.commands == ["evalsha"]
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            assert int(await client.hget(f"{redis_prefix}spend:{_month()}:acme", "tokens") or 0) == 52
            assert int(await client.hget(f"{redis_prefix}spend:{_month()}:acme:user:alice", "tokens") or 0) == 52
        finally:
            await client.aclose()


async def test_a_used_up_budget_refuses_in_the_same_script_and_takes_no_slot(redis_prefix: str) -> None:
    async with limits(redis_prefix) as (budgets, slots):
        await _seed(budgets, SpendKey("acme", _month()), 100)
        await _seed(budgets, SpendKey("acme", _month(), "alice"), 500)  # alice's 500 used up
        async with monitored(redis_prefix) as refused_user:
            with pytest.raises(ApiError) as refusal:
                await budgets.admit("acme", "alice", slot=SlotClaim(slots, "acme", "run-1", 4))
        assert (refusal.value.status, refusal.value.code) == (429, "budget_exhausted")
        assert "The end user 'alice' of tenant 'acme'" in refusal.value.message
        assert refused_user.commands == ["evalsha"]
        assert await _slots_held(redis_prefix) == []

        await _seed(budgets, SpendKey("acme", _month(), "bob"), 0)
        await budgets.ledger.add([SpendKey("acme", _month())], Spent(900))  # the tenant's 1000 used up
        with pytest.raises(ApiError) as refusal:
            await budgets.admit("acme", "bob", slot=SlotClaim(slots, "acme", "run-2", 4))
        assert refusal.value.code == "budget_exhausted"
        assert "Tenant 'acme'" in refusal.value.message
        assert await _slots_held(redis_prefix) == []


async def test_a_tenant_at_its_cap_is_refused_by_the_same_script_with_429_and_retry_after(redis_prefix: str) -> None:
    async with limits(redis_prefix) as (budgets, slots):
        await _seed(budgets, SpendKey("acme", _month()), 1)
        await budgets.admit("acme", None, slot=SlotClaim(slots, "acme", "run-1", 1))
        with pytest.raises(ApiError) as refusal:
            await budgets.admit("acme", None, slot=SlotClaim(slots, "acme", "run-2", 1))
        assert (refusal.value.status, refusal.value.code) == (429, "too_many_runs")
        assert 1 <= int(refusal.value.headers["Retry-After"]) <= 15
        assert await _slots_held(redis_prefix) == [b"run-1"]


async def test_a_counters_first_use_is_seeded_then_admitted_and_leaves_no_counter_for_nothing(
    redis_prefix: str,
) -> None:
    async with limits(redis_prefix) as (budgets, slots):
        async with monitored(redis_prefix) as first:
            guard = await budgets.admit("acme", "carol", slot=SlotClaim(slots, "acme", "run-1", 4))
        assert guard is not None
        # Read by the script, found missing (nothing in the store either), admitted by the script again.
        assert first.commands == ["evalsha", "evalsha"]
        assert await _slots_held(redis_prefix) == [b"run-1"]
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            assert [key async for key in client.scan_iter(match=f"{redis_prefix}spend:*acme*")] == []
        finally:
            await client.aclose()


async def test_an_add_sent_off_the_path_is_seen_by_the_tenants_next_admission_on_this_replica(
    redis_prefix: str,
) -> None:
    async with limits(redis_prefix) as (budgets, slots):
        await _seed(budgets, SpendKey("acme", _month()), 0)
        guard = await budgets.admit("acme", None, slot=SlotClaim(slots, "acme", "run-1", 4))
        assert guard is not None
        await guard.spent(Usage(input_tokens=1000))  # the run's last call uses the tenant's 1000 up; not awaited
        assert budgets.pending.pending("acme") == 1
        with pytest.raises(ApiError) as refusal:  # no yield in between: only waiting for the add can refuse it
            await budgets.admit("acme", None, slot=SlotClaim(slots, "acme", "run-2", 4))
        assert refusal.value.code == "budget_exhausted"


async def test_a_write_left_under_way_is_finished_before_the_shutdown_ends(redis_prefix: str) -> None:
    async with limits(redis_prefix) as (_, slots):
        await slots.acquire("acme", "run-1", 4)
        pending = PendingWrites()
        let_go = anyio.Event()

        async def release_once_let_go() -> None:
            await let_go.wait()
            await slots.release("acme", "run-1")

        pending.start("acme", release_once_let_go())
        drained = anyio.Event()

        async def shut_down() -> None:
            await pending.drain()
            drained.set()

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(shut_down)
            await anyio.wait_all_tasks_blocked()
            assert not drained.is_set(), "the shutdown waits for the write"
            let_go.set()
        assert await _slots_held(redis_prefix) == []


# --- through agent-service ----------------------------------------------------------------------------------

KEY = "acme-key-for-round-trips"


async def test_a_run_through_agent_service_costs_one_evalsha_to_admit_one_per_llm_call_and_one_zrem(
    upstreams: Upstreams, redis_prefix: str, tmp_path: Path
) -> None:
    callers = tmp_path / "callers.toml"
    callers.write_text(
        "[tenants.acme]\nmonthly_tokens = 1000000\nuser_monthly_tokens = 100000\nmax_concurrent_runs = 4\n\n"
        + key_entry("acme-app", "acme", KEY, trusted=True)
    )
    body: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": ["echo"]}
    async with (
        monitored(redis_prefix, counting=False) as sent,
        running_agent(
            upstreams.completion_url,
            upstreams.gateway,
            database_url="",
            callers_file=callers,
            redis_url=REDIS_URL,
            redis_key_prefix=redis_prefix,
            lease_seconds=60,  # the keeper renews slots every 20 s: not while the run is counted
        ) as agent_url,
        httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
    ):
        for _ in range(2):  # the first run seeds the counters; the second is counted
            upstreams.llm.push(fake_openai.tool_calls(("call_1", "echo", {"text": "x"})), fake_openai.text("ok"))
        first = await http.post("/api/v1/agent/run", json=body, headers=as_caller(KEY, "alice"))
        assert first.status_code == 200, first.text
        spent = first.json()["usage"]["inputTokens"] + first.json()["usage"]["outputTokens"]

        async def first_run_written() -> bool:  # its last add and its release are sent after its answer
            return await _slots_held(redis_prefix) == [] and await _user_tokens(redis_prefix, "alice") == spent

        await polled(first_run_written, 10)
        sent.counting = True
        second = await http.post("/api/v1/agent/run", json=body, headers=as_caller(KEY, "alice"))
        assert second.status_code == 200, second.text
        assert second.json()["iterations"] == 2
    # The service has stopped: the writes it sent after the answer are done (the shutdown waits for them).
    assert sent.commands[0] == "evalsha", sent.commands  # admission: the slot and both budgets
    # Then the first call's add, then the second's with the slot's release (the run ended before its add was sent).
    assert Counter(sent.commands) == {"evalsha": 3}, sent.commands
    assert await _slots_held(redis_prefix) == []
