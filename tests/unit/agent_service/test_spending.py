"""Monthly budgets (``agent_service.admission.budgets``) on the in-process ledger: months, seeding, refusals,
the guard."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
import redis.asyncio as aioredis

from agent_service.admission.budgets import Budgets
from agent_service.admission.run_slots import LocalRunSlots, RunSlots, SlotClaim
from agent_service.admission.spend_ledgers import (
    LedgerUnavailable,
    Limits,
    LocalSpendLedger,
    RedisSpendLedger,
    SpendKey,
    Spent,
    month_start,
    next_month_start,
)
from agent_service.core.errors import UpstreamError
from agent_service.core.tenancy import TenantRules
from agent_service.store import StoreError
from suite_common.errors import ApiError
from suite_common.wire import Usage
from support.scripted import Scripted, call_tools
from unit.agent_service.test_loop import Recorder, echo, plan

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 11, 26, 22, 0, tzinfo=UTC)


def test_a_month_is_the_calendar_month_in_utc_and_resets_on_the_first_of_the_next() -> None:
    assert month_start(NOW) == datetime(2026, 11, 1, tzinfo=UTC)
    assert next_month_start(NOW) == datetime(2026, 12, 1, tzinfo=UTC)
    assert next_month_start(datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)) == datetime(2027, 1, 1, tzinfo=UTC)
    # 1 December 01:00 in UTC+2 is still November in UTC.
    east = datetime(2026, 12, 1, 1, 0, tzinfo=timezone(timedelta(hours=2)))
    assert month_start(east) == datetime(2026, 11, 1, tzinfo=UTC)


def test_redis_keys_are_one_per_tenant_month_and_per_tenant_user_month_under_the_prefix() -> None:
    ledger = RedisSpendLedger(aioredis.Redis(), key_prefix="agent:")  # naming connects to nothing
    assert ledger.key(SpendKey("acme", "2026-11")) == "agent:spend:2026-11:acme"
    assert ledger.key(SpendKey("acme", "2026-11", "user:7")) == "agent:spend:2026-11:acme:user:user:7"


class Source:
    """The run store's usage log, as a ``UsageSource``: what each (tenant, user) spent this month."""

    def __init__(self, spent: dict[tuple[str, str | None], Usage] | None = None, *, fails: bool = False) -> None:
        self.spent = spent or {}
        self.fails = fails
        self.asked: list[tuple[str, datetime, str | None]] = []

    async def __call__(self, tenant: str, since: datetime, *, user: str | None = None) -> Usage:
        self.asked.append((tenant, since, user))
        if self.fails:
            raise StoreError("the database is down")
        return self.spent.get((tenant, user), Usage())


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def spending(rules: TenantRules, source: Source | None = None, clock: Clock | None = None) -> Budgets:
    return Budgets(LocalSpendLedger(), rules={"acme": rules}, source=source, clock=clock or Clock(NOW))


async def refusal(spend: Budgets, tenant: str = "acme", user: str | None = None) -> ApiError:
    with pytest.raises(ApiError) as refused:
        await spend.admit(tenant, user)
    return refused.value


async def test_a_tenant_without_a_monthly_budget_has_no_guard_and_is_never_counted() -> None:
    source = Source()
    spend = spending(TenantRules(max_run_tokens=10), source)
    assert spend.guard("acme", "u1") is None
    assert spend.guard("unknown-tenant", None) is None
    await spend.admit("acme", "u1")
    assert source.asked == []


async def test_a_used_up_tenant_budget_refuses_new_runs_with_429_saying_which_and_when_it_resets() -> None:
    spend = spending(TenantRules(monthly_tokens=100))
    guard = spend.guard("acme", None)
    assert guard is not None
    await spend.admit("acme", None)
    await guard.spent(Usage(input_tokens=60, output_tokens=39))
    assert await guard.exhausted() is None
    await guard.spent(Usage(output_tokens=1))
    assert await guard.exhausted() == "tenant_monthly_tokens"
    refused = await refusal(spend)
    assert (refused.status, refused.code) == (429, "budget_exhausted")
    assert "Tenant 'acme'" in refused.message
    assert "tenant_monthly_tokens (monthly_tokens: 100 of 100 tokens in 2026-11)" in refused.message
    assert "resets at 2026-12-01 00:00 UTC" in refused.message
    assert refused.headers["Retry-After"] == str((4 * 24 + 2) * 3600)  # 22:00 on the 26th to midnight on the 1st


async def test_a_cost_budget_counts_micro_dollars_exactly() -> None:
    spend = spending(TenantRules(monthly_cost_usd=0.3))
    guard = spend.guard("acme", None)
    assert guard is not None
    await spend.admit("acme", None)
    for _ in range(2):
        await guard.spent(Usage(input_tokens=1, cost_usd=0.1))
    await guard.spent(Usage(input_tokens=1))  # a model without a price: no cost
    assert await guard.exhausted() is None
    await guard.spent(Usage(cost_usd=0.1))  # 0.1 + 0.1 + 0.1 is 0.3 here, not 0.30000000000000004 short of it
    assert await guard.exhausted() == "tenant_monthly_cost"
    assert "$0.30 of $0.30" in (await refusal(spend)).message


async def test_a_user_budget_stops_that_user_only_and_runs_without_a_user_count_for_the_tenant_only() -> None:
    spend = spending(TenantRules(monthly_tokens=1000, user_monthly_tokens=50))
    alice, bob, nobody = spend.guard("acme", "alice"), spend.guard("acme", "bob"), spend.guard("acme", None)
    assert alice is not None
    assert bob is not None
    assert nobody is not None
    await spend.admit("acme", "alice")
    await alice.spent(Usage(input_tokens=50))
    await nobody.spent(Usage(input_tokens=500))
    assert await alice.exhausted() == "user_monthly_tokens"
    assert await bob.exhausted() is None
    refused = await refusal(spend, user="alice")
    assert "The end user 'alice' of tenant 'acme'" in refused.message
    assert "user_monthly_tokens (user_monthly_tokens: 50 of 50 tokens" in refused.message
    await spend.admit("acme", "bob")
    await spend.admit("acme", None)  # the tenant's 1000 hold 550
    await bob.spent(Usage(input_tokens=450))  # the tenant's budget is everyone's: bob's 450 use it up
    assert (await refusal(spend, user="carol")).message.startswith("Tenant 'acme' has used up")


async def test_counters_start_from_the_stores_usage_this_month_once_per_key() -> None:
    source = Source({("acme", None): Usage(input_tokens=90), ("acme", "alice"): Usage(input_tokens=40)})
    spend = spending(TenantRules(monthly_tokens=100, user_monthly_tokens=45), source)
    guard = spend.guard("acme", "alice")
    assert guard is not None
    await spend.admit("acme", "alice")
    assert set(source.asked) == {
        ("acme", datetime(2026, 11, 1, tzinfo=UTC), None),
        ("acme", datetime(2026, 11, 1, tzinfo=UTC), "alice"),
    }
    await guard.spent(Usage(input_tokens=5))
    assert await guard.exhausted() == "user_monthly_tokens"  # 40 + 5, seeded once, then counted here
    assert len(source.asked) == 2


async def test_a_new_month_starts_new_counters_seeded_from_that_month() -> None:
    clock = Clock(NOW)
    source = Source()
    spend = spending(TenantRules(monthly_tokens=10), source, clock)
    guard = spend.guard("acme", None)
    assert guard is not None
    await spend.admit("acme", None)
    await guard.spent(Usage(input_tokens=10))
    assert await guard.exhausted() == "tenant_monthly_tokens"
    clock.now = datetime(2026, 12, 1, 0, 0, 1, tzinfo=UTC)
    assert await guard.exhausted() is None
    assert source.asked[-1] == ("acme", datetime(2026, 12, 1, tzinfo=UTC), None)


async def test_a_store_that_cannot_seed_refuses_new_runs_with_503_and_stops_runs_under_way() -> None:
    spend = spending(TenantRules(monthly_tokens=10), Source(fails=True))
    refused = await refusal(spend)
    assert (refused.status, refused.code, refused.headers["Retry-After"]) == (503, "limits_unavailable", "1")
    guard = spend.guard("acme", None)
    assert guard is not None
    with pytest.raises(UpstreamError) as stopped:
        await guard.exhausted()
    assert (stopped.value.status, stopped.value.code) == (503, "limits_unavailable")


class FlakyLedger(LocalSpendLedger):
    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def add(self, keys: Sequence[SpendKey], spent: Spent) -> list[Spent | None]:
        if self.down:
            raise LedgerUnavailable("Redis: ConnectionError")
        return await super().add(keys, spent)


async def test_a_usage_that_could_not_be_added_is_added_with_the_next_call() -> None:
    ledger = FlakyLedger()
    spend = Budgets(ledger, rules={"acme": TenantRules(monthly_tokens=30)}, clock=Clock(NOW))
    guard = spend.guard("acme", None)
    assert guard is not None
    await spend.admit("acme", None)
    ledger.down = True
    await guard.spent(Usage(input_tokens=15))  # logged, kept
    ledger.down = False
    assert await guard.exhausted() is None
    await guard.spent(Usage(input_tokens=15))
    assert await guard.exhausted() == "tenant_monthly_tokens"


async def test_a_run_of_a_tenant_crossing_its_monthly_budget_ends_with_budget_and_the_next_is_refused() -> None:
    # Each scripted call is 15 tokens: the budget of 40 lets three calls start (0, 15, 30 spent before each).
    spend = spending(TenantRules(monthly_tokens=40))
    scripted = Scripted([call_tools((f"c{i}", "echo", {"q": str(i)})) for i in range(5)], {"echo": echo})
    await spend.admit("acme", None)
    run_plan = replace(plan("echo"), spending=spend.guard("acme", None))
    outcome = await scripted.loop().run(run_plan, Recorder(), stream_text=True)
    assert (outcome.finish_reason, outcome.budget, outcome.iterations) == ("budget", "tenant_monthly_tokens", 3)
    assert (await refusal(spend)).code == "budget_exhausted"


class CountingLedger(LocalSpendLedger):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def read(self, keys: Sequence[SpendKey]) -> list[Spent | None]:
        self.reads += 1
        return await super().read(keys)


async def test_a_run_checks_its_budgets_on_the_counters_its_own_last_call_added_to_without_another_round_trip() -> None:
    ledger = CountingLedger()
    spend = Budgets(ledger, rules={"acme": TenantRules(monthly_tokens=30, user_monthly_tokens=100)}, clock=Clock(NOW))
    guard = await spend.admit("acme", "alice")
    assert guard is not None
    assert ledger.reads == 1  # admit's read: the one round trip before the run's first call
    assert await guard.exhausted() is None
    await guard.spent(Usage(input_tokens=10, output_tokens=5))
    other = await spend.admit("acme", "bob")  # another run of the tenant spends meanwhile
    assert other is not None
    await other.spent(Usage(input_tokens=10, output_tokens=0))
    reads = ledger.reads
    assert await guard.exhausted() is None  # 15 of 30 as its own call left them: bob's 10 not seen yet
    await guard.spent(Usage(input_tokens=5, output_tokens=0))  # the add answers 30: bob's included
    assert await guard.exhausted() == "tenant_monthly_tokens"
    assert ledger.reads == reads, "checks between calls read no counters"


async def test_a_new_run_is_admitted_on_counters_this_replica_saw_within_a_second_without_a_round_trip() -> None:
    rules = {"acme": TenantRules(monthly_tokens=30)}
    ledger = CountingLedger()
    spend = Budgets(ledger, rules=rules, clock=Clock(NOW))
    first = await spend.admit("acme", None)
    assert first is not None
    await first.spent(Usage(input_tokens=30))  # the add answers 30 of 30
    reads = ledger.reads
    refused = await refusal(spend)  # on the counters the add answered: no read
    assert (refused.status, refused.code) == (429, "budget_exhausted")
    assert ledger.reads == reads
    stale = Budgets(ledger, rules=rules, clock=Clock(NOW), fresh_seconds=0)  # nothing seen is fresh: Redis asked
    await refusal(stale)
    assert ledger.reads == reads + 1


async def test_a_call_counted_before_its_counter_exists_starts_the_counter_from_the_store_and_adds_the_call() -> None:
    source = Source({("acme", None): Usage(input_tokens=4)})
    ledger = LocalSpendLedger()
    spend = Budgets(ledger, rules={"acme": TenantRules(monthly_tokens=10)}, source=source, clock=Clock(NOW))
    guard = spend.guard("acme", None)
    assert guard is not None
    await guard.spent(Usage(input_tokens=6))  # a run taken over, or a flushed Redis: no counter yet
    assert await ledger.read([SpendKey("acme", "2026-11")]) == [Spent(10, 0)]
    assert (await refusal(spend)).code == "budget_exhausted"


async def test_a_user_with_nothing_spent_gets_no_counter_until_a_call_is_counted() -> None:
    ledger = LocalSpendLedger()
    spend = Budgets(ledger, rules={"acme": TenantRules(user_monthly_tokens=50)}, source=Source(), clock=Clock(NOW))
    alice = SpendKey("acme", "2026-11", "alice")
    guard = await spend.admit("acme", "alice")
    assert guard is not None
    assert await ledger.read([alice]) == [None], "admitted, nothing spent: nothing to keep"
    await guard.spent(Usage(input_tokens=20))
    assert await ledger.read([alice]) == [Spent(20, 0)]


async def test_while_the_tenants_budget_is_used_up_a_new_user_is_refused_without_reading_or_keeping_anything() -> None:
    source = Source({("acme", None): Usage(input_tokens=100)})
    ledger = LocalSpendLedger()
    rules = {"acme": TenantRules(monthly_tokens=100, user_monthly_tokens=50)}
    spend = Budgets(ledger, rules=rules, source=source, clock=Clock(NOW), max_users=5)
    for index in range(300):
        assert (await refusal(spend, user=f"user-{index}")).code == "budget_exhausted"
    assert [user for _, _, user in source.asked] == [None], "the tenant's sum only, read once"
    assert await ledger.read([SpendKey("acme", "2026-11", "user-0")]) == [None]
    assert await ledger.join(SpendKey("acme", "2026-11", "late"), 1, NOW), "no user was counted toward the bound"


async def test_a_tenant_with_per_user_budgets_has_at_most_max_users_end_users_a_month_then_new_ones_are_429() -> None:
    clock = Clock(NOW)
    rules = {"acme": TenantRules(user_monthly_tokens=50)}
    spend = Budgets(LocalSpendLedger(), rules=rules, source=Source(), clock=clock, max_users=3)
    for user in ("u1", "u2", "u3"):
        assert await spend.admit("acme", user) is not None
    refused = await refusal(spend, user="u4")
    assert (refused.status, refused.code) == (429, "too_many_users")
    assert "Tenant 'acme' has had 3 end users (X-User-Id) in 2026-11" in refused.message
    assert "AGENT_MAX_USERS_PER_TENANT_MONTH" in refused.message
    assert refused.headers["Retry-After"] == str((4 * 24 + 2) * 3600)
    assert await spend.admit("acme", "u2") is not None, "a user counted already goes on"
    await spend.admit("acme", None)  # no user: nothing to bound
    clock.now = datetime(2026, 12, 1, 0, 0, 1, tzinfo=UTC)
    assert await spend.admit("acme", "u4") is not None, "a new month counts its users anew"


class DisagreeingLedger(LocalSpendLedger):
    """Counters read with their slots in one round trip, whose script takes no slot with no budget used up."""

    def admits_with(self, slots: RunSlots) -> bool:
        return True

    async def admit(
        self, keys: Sequence[SpendKey], limits: Sequence[Limits], claim: SlotClaim, *, unseeded_as_zero: bool
    ) -> tuple[bool, list[Spent | None]]:
        return False, [Spent(1) for _ in keys]


async def test_a_slot_not_taken_with_no_budget_used_up_refuses_the_run_with_503_never_admits_it_slotless() -> None:
    spend = Budgets(DisagreeingLedger(), rules={"acme": TenantRules(monthly_tokens=100)}, clock=Clock(NOW))
    slots = LocalRunSlots(15)
    with pytest.raises(ApiError) as refused:
        await spend.admit("acme", None, slot=SlotClaim(slots, "acme", "run-1", 4))
    assert (refused.value.status, refused.value.code) == (503, "limits_unavailable")
