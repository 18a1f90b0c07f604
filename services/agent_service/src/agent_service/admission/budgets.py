"""Monthly budgets of tokens and cost, per tenant and per end user: the one place they are counted and enforced.

A tenant's ``[tenants.<name>]`` in the callers file may give ``monthly_tokens`` and ``monthly_cost_usd`` (all its
users together) and ``user_monthly_tokens`` and ``user_monthly_cost_usd`` (each end user, ``X-User-Id``; a run
without a user counts toward the tenant's only). An end user's budget depends on the user's role (``X-User-Role``):
the role's own in ``role_monthly_tokens`` / ``role_monthly_cost_usd``, else none for ``admin`` and ``owner``, else
``user_monthly_*`` (``TenantRules.user_monthly_tokens_of``); one counter per user whatever the role, only its limit
changes. A month is a calendar month in UTC. ``Budgets`` enforces them:

- ``admit``: a new run of a tenant or user whose budget is used up is refused, 429 ``budget_exhausted``, saying which
  budget and when it resets, with ``Retry-After`` (seconds until the first day of next month, UTC); otherwise it
  gives the run its ``SpendGuard`` (``RunPlan.spending``), which the loop asks before every LLM call (used up: the
  run ends with finish reason ``budget`` and the budget's name) and tells each call's usage after it. A tenant
  without a monthly budget gets none: its runs cost nothing to check.

Round trips: ``admit`` checks the counters and takes the run's slot in one script when both are in one Redis
(``SpendLedger.admit``); without slots there it reads Redis only when this replica has not seen the counters within
``FRESH_SECONDS``. Adding a call's usage (one script per LLM call) answers the counters' new values, and the check
before the run's next call reads those (the run's first check reads what ``admit`` read). The add is sent off the
answer's path (``admission.pending``; inline at a counter's first use, below): the run's next check waits for it, a
new run of the tenant admitted on this replica too, and a run that ends before its last add was sent hands that
usage to its slot's release (``release``: one script). A run sees the other runs' spend as of its own last call:
fresh to within one call, which the overshoot below allows for anyway; on another replica, a run's last call is seen
at most one round trip after its answer (docs/callers.md, "Round trips").

The counters live in a ``SpendLedger``, one per tenant-month and one per tenant-user-month, tokens as integers and
cost as integer micro-dollars: in Redis (``<prefix>spend:<YYYY-MM>:<tenant>[:user:<user>]`` hashes, expiring a day
after their month ends) when the replicas share one, in this process's memory otherwise. A counter is seeded
(per process in memory; set-if-absent in Redis, atomically) from the run store's usage log (``UsageSource``), so a
restart or a flushed Redis does not hand a tenant a fresh budget; but only once there is something to count (the
store has spend of the month, or a call's usage is added): a run refused, or one admitted that makes no call, leaves
no counter behind.

A request costs nothing it could not be charged for. The tenant's budgets are checked first: while they are used up,
a request naming a new end user is refused without reading the store or touching Redis for that user. And each
tenant with per-user budgets has at most ``max_users`` distinct end users a month (``AGENT_MAX_USERS_PER_TENANT_MONTH``,
a set per tenant-month, ``<prefix>spend-users:<YYYY-MM>:<tenant>``): a new one past it is refused, 429
``too_many_users``, so that a caller inventing ``X-User-Id`` values cannot fill Redis (with ``noeviction``, a full Redis
refuses every tenant).

Fail closed: when the ledger (or the store seeding it) cannot be read, a new run of a tenant with a budget is
refused with 503 ``limits_unavailable``, and a run under way ends with the error ``limits_unavailable`` before its
next LLM call: a call that cannot be counted is not made. A usage that cannot be added after a call is logged and
added with the run's next one.

Budgets are checked before each call, not reserved: runs of one tenant in flight at once each make the call they
have started, so the month's spend can pass a budget by up to one LLM call per run in progress. A call whose add finds
no counter seeds it from the store (the month's calls before it) and adds itself: so a run whose counter was missing
when it last read it adds that call inline, before the call's usage row is written, not off the answer's path (else
the seed could hold the call's own row, and the call be counted twice). Another call's row written meanwhile may be
counted twice, or not at all: by at most one call per run in flight, and only at a counter's first use (a new month,
a new user, a flushed Redis).

A call cut off before its usage came (its client gone, its run cancelled or out of time) is counted with an estimate
(``agent_service.engine.metering``).

One Redis, not Redis Cluster: the tenant's and its user's counters are read and added to in one script, and the
suite's Redis client is not cluster-aware.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio
import redis.asyncio as aioredis

from agent_service.admission.pending import PendingWrites
from agent_service.admission.run_slots import SlotClaim
from agent_service.admission.spend_ledgers import (
    MICROS_PER_USD,
    LedgerUnavailable,
    Limits,
    LocalSpendLedger,
    RedisSpendLedger,
    SpendKey,
    SpendLedger,
    Spent,
    UsageSource,
    month_start,
    next_month_start,
)
from agent_service.core.errors import UpstreamError
from agent_service.core.limits import SpendGuard
from agent_service.core.tenancy import NO_RULES, TenantRules, UserRole
from agent_service.store import StoreError
from suite_common.errors import ApiError
from suite_common.logging import get_logger
from suite_common.wire import BudgetName, Usage

__all__ = ["FRESH_SECONDS", "Budgets", "open_budgets"]

_log = get_logger("agent_service.spending")


def _utc_now() -> datetime:
    return datetime.now(UTC)


FRESH_SECONDS = 1.0
"""A new run is admitted on counters this replica read or added to within this long, without asking Redis: under
load (runs of one tenant back to back), admission costs no round trip; a budget used up on another replica is seen
here at most this much later."""
_MAX_RECENT = 10_000

_KEPT_AFTER_MONTH = timedelta(days=1)
"""A counter outlives its month by this much (replicas' clocks need not agree to the second)."""

_NO_COUNTER = Spent()
"""A key found without a counter (nothing spent, none kept for nothing): by identity, among the counters read. A
run whose counters include it adds its next call inline (``_RunSpend.spent``): that add seeds the counter from the
store, which must not hold the call's own row yet."""


@dataclass(frozen=True, slots=True)
class _Budget:
    name: BudgetName
    setting: str
    """Its field in the callers file."""
    key: SpendKey
    kind: Literal["tokens", "cost"]
    limit: int
    """Tokens, or micro-dollars."""

    def used_up(self, spent: Spent) -> bool:
        return (spent.tokens if self.kind == "tokens" else spent.micros) >= self.limit


def _micros(usd: float) -> int:
    return round(usd * MICROS_PER_USD)


def _budgets(tenant: str, user: str | None, role: UserRole, rules: TenantRules, month: str) -> list[_Budget]:
    """The budgets a run of ``tenant`` (and ``user``, of ``role``) counts against, in the order they are checked."""
    budgets: list[_Budget] = []
    key = SpendKey(tenant, month)
    if rules.monthly_tokens is not None:
        budgets.append(_Budget("tenant_monthly_tokens", "monthly_tokens", key, "tokens", rules.monthly_tokens))
    if rules.monthly_cost_usd is not None:
        budgets.append(_Budget("tenant_monthly_cost", "monthly_cost_usd", key, "cost", _micros(rules.monthly_cost_usd)))
    if user is not None:
        key = SpendKey(tenant, month, user)
        tokens, setting = rules.user_monthly_tokens_of(role)
        if tokens is not None:
            budgets.append(_Budget("user_monthly_tokens", setting, key, "tokens", tokens))
        cost, setting = rules.user_monthly_cost_usd_of(role)
        if cost is not None:
            budgets.append(_Budget("user_monthly_cost", setting, key, "cost", _micros(cost)))
    return budgets


def _unavailable_message(problem: str) -> str:
    # ``problem`` (Redis's or the store's own words, with addresses) is logged where it is caught, never answered.
    return "The monthly budgets cannot be checked now"


class Budgets:
    """The monthly budgets of every tenant (``rules``: the callers file's tenants) over one ``ledger``; ``source``
    seeds a counter on its first use (``None``: runs are not stored, counters start at 0)."""

    def __init__(
        self,
        ledger: SpendLedger,
        *,
        rules: Mapping[str, TenantRules],
        source: UsageSource | None = None,
        clock: Callable[[], datetime] = _utc_now,
        fresh_seconds: float = FRESH_SECONDS,
        max_users: int = 0,
        pending: PendingWrites | None = None,
    ) -> None:
        """``max_users``: the most end users of one tenant with per-user budgets in a month (0: no bound).
        ``pending``: where adds to a shared ledger go off the answer's path (the replica's, with its slots' releases:
        a new run waits for both)."""
        self.ledger = ledger
        self.pending = pending if pending is not None else PendingWrites()
        self.max_users = max_users
        self.rules = rules
        self.source = source
        self.clock = clock
        self.fresh_seconds = fresh_seconds
        self._recent: dict[SpendKey, tuple[Spent, float]] = {}
        """Counters as this replica last read or added to them, with when (``time.monotonic``)."""

    def _fresh(self, keys: list[SpendKey]) -> dict[SpendKey, Spent] | None:
        """The counters of ``keys`` as this replica saw them within ``fresh_seconds``; ``None`` unless all were."""
        oldest = time.monotonic() - self.fresh_seconds
        seen = [self._recent.get(key) for key in keys]
        if any(entry is None or entry[1] < oldest for entry in seen):
            return None
        return {key: entry[0] for key, entry in zip(keys, seen, strict=True) if entry is not None}

    def _remember(self, counters: Mapping[SpendKey, Spent | None]) -> None:
        if len(self._recent) >= _MAX_RECENT:
            self._recent.clear()  # many users at once: what is dropped is read again, nothing more
        now = time.monotonic()
        for key, value in counters.items():
            if value is None:
                self._recent.pop(key, None)
            else:
                self._recent[key] = (value, now)

    def _budgets_now(self, tenant: str, user: str | None, role: UserRole) -> tuple[list[_Budget], datetime]:
        rules = self.rules.get(tenant, NO_RULES)
        if not rules.has_monthly_budget:
            return [], self.clock()
        now = self.clock()
        return _budgets(tenant, user, role, rules, f"{month_start(now):%Y-%m}"), now

    async def _spent(
        self, budgets: list[_Budget], keys: list[SpendKey], now: datetime, read: list[Spent | None] | None = None
    ) -> dict[SpendKey, Spent]:
        """Each key's counter (one that has none: what the store has); raises ``LedgerUnavailable``, and
        ``_TooManyUsers``. The tenant's key comes first: when one of its budgets is used up, the user's key is left
        out, neither seeded nor counted among the tenant's users (reading it touches nothing). ``read``: the
        counters as just read (else they are read here)."""
        values = dict(zip(keys, read if read is not None else await self.ledger.read(keys), strict=True))
        spent: dict[SpendKey, Spent] = {}
        for key, value in values.items():
            spent[key] = value if value is not None else await self._first_use(key, now)
            if key.user is None and any(budget.key == key and budget.used_up(spent[key]) for budget in budgets):
                break
        return spent

    async def _first_use(self, key: SpendKey, now: datetime) -> Spent:
        """A key without a counter: its user counted among the tenant's (at most ``max_users``), then what the store
        has of it, put in a counter only when it is something (a counter for nothing would be one per request)."""
        expires_at = next_month_start(now) + _KEPT_AFTER_MONTH
        if key.user is not None and self.max_users and not await self.ledger.join(key, self.max_users, expires_at):
            raise _TooManyUsers(key, self.max_users, now)
        spent = await self._from_store(key, now)
        return await self.ledger.seed(key, spent, expires_at) if spent else _NO_COUNTER

    async def _from_store(self, key: SpendKey, now: datetime) -> Spent:
        if self.source is None:
            return Spent()
        try:
            return Spent.of(await self.source(key.tenant, month_start(now), user=key.user))
        except StoreError as error:
            raise LedgerUnavailable(f"run store: {error}") from None

    async def used_up(
        self, tenant: str, user: str | None, known: dict[SpendKey, Spent] | None = None, *, role: UserRole = "user"
    ) -> tuple[_Budget, Spent, datetime] | None:
        """The first of the budgets of ``tenant`` and ``user`` (of ``role``) that is used up, with its counter and the
        time now; raises ``LedgerUnavailable``. ``known``: counters already read, used when they cover every budget
        (those read here are put in it)."""
        budgets, now = self._budgets_now(tenant, user, role)
        if not budgets:
            return None
        keys = list(dict.fromkeys(budget.key for budget in budgets))
        if known is not None and all(key in known for key in keys):  # a new month has new keys: read again
            spent = known
        else:
            fresh = self._fresh(keys)
            spent = fresh if fresh is not None else await self._spent(budgets, keys, now)
            if fresh is None:
                self._remember(spent)
            if known is not None:
                known.clear()
                known.update(spent)
        return _first_used_up(budgets, spent, now)

    async def admit(
        self, tenant: str, user: str | None, role: UserRole = "user", slot: SlotClaim | None = None
    ) -> SpendGuard | None:
        """The guard of a new run of ``tenant`` and ``user``, of ``role`` (``None`` when the tenant has no monthly
        budget); refuses the run when one of its budgets is used up: 429 ``budget_exhausted`` (or 503
        ``limits_unavailable`` when that cannot be known). ``slot``: the run's slot, taken once the budgets have
        let the run in (in the same round trip when the ledger and the slots share one Redis), never when they
        refuse it. What this replica started writing for ``tenant`` (adds, slots given back) is awaited first."""
        await self.pending.settled(tenant)
        if not self.rules.get(tenant, NO_RULES).has_monthly_budget:
            if slot is not None:
                await slot.take()
            return None
        known: dict[SpendKey, Spent] = {}
        try:
            if slot is not None and self.ledger.admits_with(slot.slots):
                found = await self._admitted(tenant, user, role, known, slot)
            else:
                found = await self.used_up(tenant, user, known, role=role)
                if found is None and slot is not None:
                    await slot.take()
        except _TooManyUsers as refused:
            raise refused.error() from None
        except LedgerUnavailable as error:
            _log.warning("spending_unavailable", tenant=tenant, error=str(error))
            raise ApiError(
                503,
                "limits_unavailable",
                f"{_unavailable_message(str(error))}; the run was not started.",
                headers={"Retry-After": "1"},
            ) from None
        if found is not None:
            raise _budget_exhausted(*found)
        return _RunSpend(self, tenant, user, role, known)

    async def _admitted(
        self, tenant: str, user: str | None, role: UserRole, known: dict[SpendKey, Spent], slot: SlotClaim
    ) -> tuple[_Budget, Spent, datetime] | None:
        """``admit`` in one round trip: the counters checked and the slot taken by one script (``SpendLedger.admit``).
        A counter's first use (none in Redis) costs more: the store read and the counter seeded as ``used_up`` does,
        then the script again with what is still missing counted as zero. The budget used up, as ``used_up``; the
        counters read are put in ``known``."""
        budgets, now = self._budgets_now(tenant, user, role)
        keys = list(dict.fromkeys(budget.key for budget in budgets))
        limits = [_limits(budgets, key) for key in keys]
        taken, read = await self.ledger.admit(keys, limits, slot, unseeded_as_zero=False)
        if not taken:  # a budget used up, or a counter's first use
            spent = await self._spent(budgets, keys, now, read)
            self._remember(spent)
            if (found := _first_used_up(budgets, spent, now)) is not None:
                return found
            taken, read = await self.ledger.admit(keys, limits, slot, unseeded_as_zero=True)
        spent = {key: value if value is not None else _NO_COUNTER for key, value in zip(keys, read, strict=True)}
        self._remember(spent)
        known.update(spent)
        if taken:
            return None
        if (found := _first_used_up(budgets, spent, now)) is None:
            # Not taken, yet no budget used up (the script and these limits disagree): never a run without a slot.
            raise LedgerUnavailable("the admission script took no slot and found no budget used up")
        return found

    def guard(self, tenant: str, user: str | None, role: UserRole = "user") -> SpendGuard | None:
        """The guard of a run admitted earlier (taken over after a crash), of ``user`` of ``role``; ``None`` when the
        tenant has no monthly budget. Its first check reads the counters."""
        has_budget = self.rules.get(tenant, NO_RULES).has_monthly_budget
        return _RunSpend(self, tenant, user, role, {}) if has_budget else None

    async def record(
        self,
        tenant: str,
        user: str | None,
        spent: Spent,
        *,
        role: UserRole = "user",
        releasing: SlotClaim | None = None,
    ) -> dict[SpendKey, Spent | None]:
        """Add one call's ``spent`` to the counters of the budgets of ``tenant`` and ``user`` (of ``role``); their new
        values. ``releasing``: a slot given back in the same round trip (a run's last add, ``release``)."""
        budgets, now = self._budgets_now(tenant, user, role)
        if not budgets or not spent:
            if releasing is not None:
                await releasing.slots.release(releasing.tenant, releasing.run_id)
            return {}
        keys = list(dict.fromkeys(budget.key for budget in budgets))
        if releasing is None:
            added = await self.ledger.add(keys, spent)
        else:
            added = await self.ledger.add_releasing(keys, spent, releasing)
        counters = dict(zip(keys, added, strict=True))
        unseeded = [key for key, value in counters.items() if value is None]
        if unseeded:
            # These counters' first usage: seeded from the store (the month's calls before this one, whose row is
            # written after this: a run whose counters were missing adds inline, ``_RunSpend.spent``), then this call
            # added. A store that cannot say leaves them to the next check.
            try:
                for key in unseeded:
                    await self.ledger.seed(
                        key, await self._from_store(key, now), next_month_start(now) + _KEPT_AFTER_MONTH
                    )
                counters.update(zip(unseeded, await self.ledger.add(unseeded, spent), strict=True))
            except LedgerUnavailable as error:
                _log.warning("spending_not_seeded", tenant=tenant, error=str(error))
        self._remember(counters)
        return counters

    def release(self, slot: SlotClaim, spending: SpendGuard | None) -> Coroutine[Any, Any, None]:
        """The write that gives ``slot`` back as its run ends, to be started at once (``pending``): with the usage
        of the run's last calls that no add has sent yet (``spending``'s, with what an earlier add failed to add),
        in one round trip when the counters and the slots share one Redis; the slot alone otherwise (that usage is
        then its add's)."""
        if isinstance(spending, _RunSpend) and self.ledger.admits_with(slot.slots):
            unsent = spending.take_unsent()
            if unsent or spending.unrecorded:  # ``send`` adds the unrecorded: nothing is dropped with the slot
                return spending.send(unsent, releasing=slot)
        return slot.slots.release(slot.tenant, slot.run_id)


def _first_used_up(
    budgets: list[_Budget], spent: Mapping[SpendKey, Spent], now: datetime
) -> tuple[_Budget, Spent, datetime] | None:
    return next(((b, spent[b.key], now) for b in budgets if b.key in spent and b.used_up(spent[b.key])), None)


def _limits(budgets: list[_Budget], key: SpendKey) -> Limits:
    """``key``'s lowest limits of each kind, for the admission script."""
    tokens = [budget.limit for budget in budgets if budget.key == key and budget.kind == "tokens"]
    micros = [budget.limit for budget in budgets if budget.key == key and budget.kind == "cost"]
    return min(tokens, default=None), min(micros, default=None)


class _TooManyUsers(Exception):
    """A new end user of a tenant that has had ``most`` this month."""

    def __init__(self, key: SpendKey, most: int, now: datetime) -> None:
        super().__init__(key.tenant)
        self.key, self.most, self.now = key, most, now

    def error(self) -> ApiError:
        resets = next_month_start(self.now)
        retry_after = max(1, math.ceil((resets - self.now).total_seconds()))
        return ApiError(
            429,
            "too_many_users",
            f"Tenant {self.key.tenant!r} has had {self.most} end users (X-User-Id) in {self.key.month}, the most one "
            f"tenant may have (AGENT_MAX_USERS_PER_TENANT_MONTH); a new one can start at {resets:%Y-%m-%d %H:%M} UTC.",
            headers={"Retry-After": str(retry_after)},
        )


def _budget_exhausted(budget: _Budget, spent: Spent, now: datetime) -> ApiError:
    resets = next_month_start(now)
    retry_after = max(1, math.ceil((resets - now).total_seconds()))
    key = budget.key
    whose = f"Tenant {key.tenant!r}" if key.user is None else f"The end user {key.user!r} of tenant {key.tenant!r}"
    if budget.kind == "tokens":
        amounts = f"{spent.tokens} of {budget.limit} tokens"
    else:
        amounts = f"${spent.micros / MICROS_PER_USD:.2f} of ${budget.limit / MICROS_PER_USD:.2f}"
    return ApiError(
        429,
        "budget_exhausted",
        f"{whose} has used up its monthly budget {budget.name} ({budget.setting}: {amounts} in {key.month}); "
        f"it resets at {resets:%Y-%m-%d %H:%M} UTC.",
        headers={"Retry-After": str(retry_after)},
    )


class _RunSpend:
    """One run's ``SpendGuard``."""

    def __init__(
        self, spending: Budgets, tenant: str, user: str | None, role: UserRole, known: dict[SpendKey, Spent]
    ) -> None:
        self.spending = spending
        self.tenant = tenant
        self.user = user
        self.role = role
        self._known = known
        """The counters as the run last read or added to them: its next check needs no round trip."""
        self._unrecorded = Spent()
        """Usage whose adding failed: added with the next call's."""
        self._unsent = Spent()
        """Usage of calls made that no add has sent yet: its add (``_adding``) sends it, or the slot's release
        (``Budgets.release``) when the run ends first."""
        self._adding: asyncio.Task[None] | None = None
        """The last call's add, sent off the answer's path (a shared ledger): the next check waits for it."""

    async def exhausted(self) -> BudgetName | None:
        if self._adding is not None:  # started at the last call's end: done by now, unless the run went on at once
            await asyncio.wait([self._adding])
        try:
            found = await self.spending.used_up(self.tenant, self.user, self._known, role=self.role)
        except _TooManyUsers as refused:  # a run taken over after its user's count was lost (a flushed Redis)
            error = refused.error()
            raise UpstreamError(error.code, error.message, status=429, headers=error.headers) from None
        except LedgerUnavailable as error:
            _log.warning("spending_unavailable", tenant=self.tenant, error=str(error))
            message = f"{_unavailable_message(str(error))}; the run was stopped before its next LLM call."
            raise UpstreamError("limits_unavailable", message, status=503, headers={"Retry-After": "1"}) from None
        return found[0].name if found is not None else None

    async def spent(self, usage: Usage) -> None:
        spent = Spent.of(usage)
        if not spent:
            return
        self._unsent += spent
        if not self.spending.ledger.shared or self._no_counter():
            # In this process: no round trip to take off the path. Or a counter's first use: the add seeds it from
            # the store, so it is made before this call's usage row is written (else the row is counted, then the
            # call added again: twice).
            with anyio.CancelScope(shield=True):  # the call was made: it counts even when the run is being cancelled
                await self._add(self._adding)
            self._adding = None
            return
        # Off the answer's path: the add's round trip overlaps the run's tool calls, or follows its answer. In a task
        # of its own, so that it is made even when the run is being cancelled (the call was made: it counts). Each
        # add follows the run's previous one, so that the counters it answers are the newest. A run that ends
        # before the task has started hands its usage to the slot's release instead (``take_unsent``).
        self._adding = self.spending.pending.start(self.tenant, self._add(self._adding))

    @property
    def unrecorded(self) -> Spent:
        """Usage an earlier add failed to add: the next add's (or the slot's release's)."""
        return self._unrecorded

    def _no_counter(self) -> bool:
        """Whether one of the run's counters was found missing when last read (its first use is still to come)."""
        return any(value is _NO_COUNTER for value in self._known.values())

    def take_unsent(self) -> Spent:
        """The usage no add has sent yet, now the caller's to send."""
        unsent, self._unsent = self._unsent, Spent()
        return unsent

    async def _add(self, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        unsent = self.take_unsent()
        if unsent or self._unrecorded:
            await self.send(unsent)

    async def send(self, spent: Spent, *, releasing: SlotClaim | None = None) -> None:
        """Add ``spent`` (with what an earlier add failed to), and give ``releasing`` back in the same round trip."""
        spent += self._unrecorded
        self._unrecorded = Spent()
        try:
            counters = await self.spending.record(self.tenant, self.user, spent, role=self.role, releasing=releasing)
        except LedgerUnavailable as error:
            _log.warning("spending_not_recorded", tenant=self.tenant, tokens=spent.tokens, error=str(error))
            self._unrecorded += spent
            self._known.clear()  # the next check reads them
            return
        for key, value in counters.items():
            if value is None:  # gone (a flushed Redis): the next check seeds it again from the store
                self._known.pop(key, None)
            else:
                self._known[key] = value


def open_budgets(
    redis: aioredis.Redis | None,
    *,
    rules: Mapping[str, TenantRules],
    source: UsageSource | None,
    key_prefix: str = "agent:",
    max_users: int = 0,
    pending: PendingWrites | None = None,
) -> Budgets:
    """The service's budgets: on its shared Redis client when there is one, in this process otherwise. ``pending``:
    the replica's writes off the answer's path (``Budgets``)."""
    ledger: SpendLedger = RedisSpendLedger(redis, key_prefix=key_prefix) if redis is not None else LocalSpendLedger()
    return Budgets(ledger, rules=rules, source=source, max_users=max_users, pending=pending)
