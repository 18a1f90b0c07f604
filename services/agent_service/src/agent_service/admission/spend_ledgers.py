"""The counters of the monthly budgets (``agent_service.admission.budgets``): one per tenant-month and one per
tenant-user-month, tokens as integers and cost as integer micro-dollars, kept in a ``SpendLedger``.

``RedisSpendLedger``: in Redis, ``<prefix>spend:<YYYY-MM>:<tenant>[:user:<user>]`` hashes expiring a day after their
month ends, read and added to by one script per operation (so a tenant's and its user's counters move together),
seeded set-if-absent, and the per-tenant set of a month's end users (``<prefix>spend-users:<YYYY-MM>:<tenant>``).
``LocalSpendLedger``: the same in this process's memory, when the replicas share no Redis. Either raises
``LedgerUnavailable`` when it cannot be read or written; what the counters mean, and when they are seeded from the
run store's usage log (``UsageSource``), is the budgets' business.

``SpendLedger.admit`` checks a new run's counters against their limits and, when none is reached, takes its run slot:
in Redis with the slots in the same Redis (``RedisRunSlots`` on the same client), one script, so that a run is
admitted in one round trip (its slot is never taken when a budget refuses it); otherwise a read, then the slot.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import redis.asyncio as aioredis

from agent_service.admission.run_slots import TAKE_SLOT_LUA, RedisRunSlots, RunSlots, SlotClaim
from agent_service.infra.shared_redis import REDIS_ERRORS, bounded
from suite_common.wire import Usage

__all__ = [
    "MICROS_PER_USD",
    "LedgerUnavailable",
    "Limits",
    "LocalSpendLedger",
    "RedisSpendLedger",
    "SpendKey",
    "SpendLedger",
    "Spent",
    "UsageSource",
    "month_start",
    "next_month_start",
]

MICROS_PER_USD = 1_000_000

Limits = tuple[int | None, int | None]
"""A counter's limits for admission: tokens, micro-dollars (``None``: none of that kind)."""


def month_start(moment: datetime) -> datetime:
    """The first instant of ``moment``'s calendar month, in UTC."""
    moment = moment.astimezone(UTC)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month_start(moment: datetime) -> datetime:
    """When ``moment``'s month's budgets reset: the first instant of the next calendar month, in UTC."""
    start = month_start(moment)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


@dataclass(frozen=True, slots=True)
class SpendKey:
    """One counter: a tenant's in a month (``YYYY-MM``), or one of its end users'."""

    tenant: str
    month: str
    user: str | None = None


@dataclass(frozen=True, slots=True)
class Spent:
    tokens: int = 0
    micros: int = 0
    """US dollars times 1 000 000, so that counters add up exactly."""

    @classmethod
    def of(cls, usage: Usage) -> Spent:
        return cls(usage.total_tokens, round((usage.cost_usd or 0.0) * MICROS_PER_USD))

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.tokens + other.tokens, self.micros + other.micros)

    def __bool__(self) -> bool:
        return bool(self.tokens or self.micros)


class UsageSource(Protocol):
    """What a tenant (or one of its users, ``user``) spent since ``since``: the run store's usage log
    (``RunStore.usage_since``). Raises ``StoreError`` when it cannot be read."""

    async def __call__(self, tenant: str, since: datetime, *, user: str | None = None) -> Usage: ...


class LedgerUnavailable(Exception):
    """The counters cannot be read or seeded (Redis or the run store is unreachable)."""


def _reached(spent: Spent | None, limits: Limits) -> bool:
    tokens, micros = limits
    spent = spent or Spent()
    return (tokens is not None and spent.tokens >= tokens) or (micros is not None and spent.micros >= micros)


class SpendLedger(ABC):
    """The month's counters; a key that was never seeded reads as ``None``."""

    shared = False
    """Kept outside this process (each call a round trip): a run's adds are made off the answer's path."""

    def admits_with(self, slots: RunSlots) -> bool:
        """Whether ``admit`` reads these counters and takes a slot of ``slots`` in one round trip."""
        return False

    async def admit(
        self, keys: Sequence[SpendKey], limits: Sequence[Limits], claim: SlotClaim, *, unseeded_as_zero: bool
    ) -> tuple[bool, list[Spent | None]]:
        """Take ``claim``'s slot unless a counter of ``keys`` has reached its ``limits`` (in order) or, unless
        ``unseeded_as_zero``, one was never seeded; whether it was taken, and the counters as ``read``. Raises
        ``LedgerUnavailable``, and the slot's own refusals (429 ``too_many_runs``, 503 ``limits_unavailable``)."""
        counters = await self.read(keys)
        unseeded = not unseeded_as_zero and None in counters
        if unseeded or any(_reached(spent, limit) for spent, limit in zip(counters, limits, strict=True)):
            return False, counters
        await claim.take()
        return True, counters

    @abstractmethod
    async def read(self, keys: Sequence[SpendKey]) -> list[Spent | None]:
        """The counters of ``keys``, in order; raises ``LedgerUnavailable``."""

    @abstractmethod
    async def seed(self, key: SpendKey, spent: Spent, expires_at: datetime) -> Spent:
        """Set ``key`` to ``spent`` unless it is set already (then it is left as it is); returns its value. Raises
        ``LedgerUnavailable``."""

    @abstractmethod
    async def add(self, keys: Sequence[SpendKey], spent: Spent) -> list[Spent | None]:
        """Add ``spent`` to each of ``keys`` that is seeded (``None`` for one that is not: the caller seeds it and adds
        again); returns their new values, as ``read``. Raises ``LedgerUnavailable``."""

    async def add_releasing(self, keys: Sequence[SpendKey], spent: Spent, slot: SlotClaim) -> list[Spent | None]:
        """``add``, and ``slot`` given back (``RunSlots.release``): in one round trip when ``admits_with`` its slots.
        Raises ``LedgerUnavailable`` (the slot is given back all the same)."""
        try:
            return await self.add(keys, spent)
        finally:
            await slot.slots.release(slot.tenant, slot.run_id)

    @abstractmethod
    async def join(self, key: SpendKey, most: int, expires_at: datetime) -> bool:
        """Count ``key``'s end user among its tenant's users of the month, unless ``most`` are counted already
        (``False``; one counted already is ``True`` again). Raises ``LedgerUnavailable``."""


class LocalSpendLedger(SpendLedger):
    """The counters in this process's memory: one replica (``AGENT_REDIS_URL`` empty)."""

    def __init__(self) -> None:
        self._spent: dict[SpendKey, Spent] = {}
        self._users: dict[tuple[str, str], set[str]] = {}
        """(tenant, month) → its end users counted."""
        self._month = ""
        """The newest month seeded: when a newer one starts, the months before are over and dropped."""

    def _new_month(self, month: str) -> None:
        if month > self._month:  # once a month, not per key: many end users make many keys
            self._spent = {known: value for known, value in self._spent.items() if known.month >= month}
            self._users = {known: users for known, users in self._users.items() if known[1] >= month}
            self._month = month

    async def read(self, keys: Sequence[SpendKey]) -> list[Spent | None]:
        return [self._spent.get(key) for key in keys]

    async def seed(self, key: SpendKey, spent: Spent, expires_at: datetime) -> Spent:
        if key not in self._spent:
            self._new_month(key.month)
            self._spent[key] = spent
        return self._spent[key]

    async def add(self, keys: Sequence[SpendKey], spent: Spent) -> list[Spent | None]:
        for key in keys:
            if key in self._spent:
                self._spent[key] += spent
        return [self._spent.get(key) for key in keys]

    async def join(self, key: SpendKey, most: int, expires_at: datetime) -> bool:
        if key.user is None:
            return True
        self._new_month(key.month)
        users = self._users.setdefault((key.tenant, key.month), set())
        if key.user not in users:
            if len(users) >= most:
                return False
            users.add(key.user)
        return True


# KEYS: the counters. Returns tokens, micros for each (-1, -1: never seeded).
_READ = """
local values = {}
for index = 1, #KEYS do
  local fields = redis.call('HMGET', KEYS[index], 'tokens', 'micros')
  values[#values + 1] = tonumber(fields[1]) or -1
  values[#values + 1] = tonumber(fields[2]) or -1
end
return values
"""

# KEYS[1]: the counter. ARGV: tokens, micros, expiry (Unix seconds). Set only if absent: the first seed wins.
_SEED = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'tokens', ARGV[1], 'micros', ARGV[2])
  redis.call('EXPIREAT', KEYS[1], ARGV[3])
end
local fields = redis.call('HMGET', KEYS[1], 'tokens', 'micros')
return {tonumber(fields[1]) or 0, tonumber(fields[2]) or 0}
"""

# KEYS: the counters. ARGV: tokens, micros. Only to a seeded counter: creating one here would start it from this
# call alone, a fresh budget; the next check seeds it from the store instead. Returns the new tokens, micros of each
# (-1, -1: never seeded), as _READ does.
_ADD_TO = """
local function add_to(first)
  local values = {}
  for index = first, #KEYS do
    if redis.call('EXISTS', KEYS[index]) == 1 then
      values[#values + 1] = redis.call('HINCRBY', KEYS[index], 'tokens', ARGV[1])
      values[#values + 1] = redis.call('HINCRBY', KEYS[index], 'micros', ARGV[2])
    else
      values[#values + 1] = -1
      values[#values + 1] = -1
    end
  end
  return values
end
"""
_ADD = _ADD_TO + "return add_to(1)\n"

# KEYS[1]: the tenant's run slots; KEYS[2..]: the counters. ARGV: tokens, micros, the run id whose slot is given back.
# A run's last add and its slot's release in one round trip; returns what _ADD does.
_ADD_RELEASING = _ADD_TO + "redis.call('ZREM', KEYS[1], ARGV[3])\nreturn add_to(2)\n"


# KEYS[1]: the tenant's run slots; KEYS[2..]: the counters, the tenant's first. ARGV: run id, slot TTL (ms), cap,
# unseeded as zero (1) or not (0), then each counter's limits: tokens, micros (-1: none). The counters are checked
# first: one reached (or never seeded, unless as zero) takes no slot. Returns the slot's answer (0: taken, -1: not
# asked, else the milliseconds until the soonest slot expires), then tokens, micros of each counter, as _READ.
_ADMIT = (
    TAKE_SLOT_LUA
    + """
local values = {}
local go = true
for index = 2, #KEYS do
  local fields = redis.call('HMGET', KEYS[index], 'tokens', 'micros')
  local tokens, micros = tonumber(fields[1]), tonumber(fields[2])
  if tokens == nil then
    values[#values + 1] = -1
    values[#values + 1] = -1
    go = go and ARGV[4] == '1'
    tokens, micros = 0, 0
  else
    values[#values + 1] = tokens
    values[#values + 1] = micros or 0
  end
  local most_tokens, most_micros = tonumber(ARGV[2 * index + 1]), tonumber(ARGV[2 * index + 2])
  if (most_tokens >= 0 and tokens >= most_tokens) or (most_micros >= 0 and (micros or 0) >= most_micros) then
    go = false
  end
end
local slot = -1
if go then
  slot = take_slot(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
end
table.insert(values, 1, slot)
return values
"""
)

# KEYS[1]: the tenant-month's set of end users. ARGV: the user, the most it may hold, its expiry (Unix seconds).
# Returns 1 when the user is in it (now or already), 0 when it is full.
_JOIN = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  return 1
end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('EXPIREAT', KEYS[1], ARGV[3])
return 1
"""


class RedisSpendLedger(SpendLedger):
    """The counters in the replicas' shared Redis: ``<prefix>spend:<YYYY-MM>:<tenant>[:user:<user>]`` hashes."""

    shared = True

    def __init__(self, client: aioredis.Redis, *, key_prefix: str = "agent:") -> None:
        self.client = client
        self.key_prefix = key_prefix
        self._read = client.register_script(_READ)
        self._seed = client.register_script(_SEED)
        self._add = client.register_script(_ADD)
        self._join = client.register_script(_JOIN)
        self._admit = client.register_script(_ADMIT)
        self._add_releasing = client.register_script(_ADD_RELEASING)

    def admits_with(self, slots: RunSlots) -> bool:
        return isinstance(slots, RedisRunSlots) and slots.client is self.client

    async def admit(
        self, keys: Sequence[SpendKey], limits: Sequence[Limits], claim: SlotClaim, *, unseeded_as_zero: bool
    ) -> tuple[bool, list[Spent | None]]:
        slots = claim.slots
        if not isinstance(slots, RedisRunSlots) or slots.client is not self.client:
            return await super().admit(keys, limits, claim, unseeded_as_zero=unseeded_as_zero)
        args: list[str | int] = [claim.run_id, slots.ttl_ms, claim.cap, int(unseeded_as_zero)]
        for tokens, micros in limits:
            args += [-1 if tokens is None else tokens, -1 if micros is None else micros]
        names = [slots.key(claim.tenant), *(self.key(key) for key in keys)]
        try:
            slot, *values = await bounded(self._admit(keys=names, args=args))
        except REDIS_ERRORS as error:
            raise LedgerUnavailable(f"Redis: {type(error).__name__}: {error}") from None
        if int(slot) < 0:
            return False, _counters(values)
        slots.check_taken(claim.tenant, claim.cap, int(slot))
        return True, _counters(values)

    def key(self, key: SpendKey) -> str:
        name = f"{self.key_prefix}spend:{key.month}:{key.tenant}"  # a tenant's name has no ':'
        return name if key.user is None else f"{name}:user:{key.user}"

    def users_key(self, key: SpendKey) -> str:
        return f"{self.key_prefix}spend-users:{key.month}:{key.tenant}"

    async def read(self, keys: Sequence[SpendKey]) -> list[Spent | None]:
        try:
            values = await bounded(self._read(keys=[self.key(key) for key in keys]))
        except REDIS_ERRORS as error:
            raise LedgerUnavailable(f"Redis: {type(error).__name__}: {error}") from None
        return _counters(values)

    async def seed(self, key: SpendKey, spent: Spent, expires_at: datetime) -> Spent:
        expiry = math.ceil(expires_at.timestamp())
        try:
            tokens, micros = await bounded(self._seed(keys=[self.key(key)], args=[spent.tokens, spent.micros, expiry]))
        except REDIS_ERRORS as error:
            raise LedgerUnavailable(f"Redis: {type(error).__name__}: {error}") from None
        return Spent(int(tokens), int(micros))

    async def add(self, keys: Sequence[SpendKey], spent: Spent) -> list[Spent | None]:
        try:
            values = await bounded(self._add(keys=[self.key(key) for key in keys], args=[spent.tokens, spent.micros]))
        except REDIS_ERRORS as error:
            raise LedgerUnavailable(f"Redis: {type(error).__name__}: {error}") from None
        return _counters(values)

    async def add_releasing(self, keys: Sequence[SpendKey], spent: Spent, slot: SlotClaim) -> list[Spent | None]:
        slots = slot.slots
        if not isinstance(slots, RedisRunSlots) or slots.client is not self.client:
            return await super().add_releasing(keys, spent, slot)
        names = [slots.key(slot.tenant), *(self.key(key) for key in keys)]
        try:
            values = await bounded(self._add_releasing(keys=names, args=[spent.tokens, spent.micros, slot.run_id]))
        except REDIS_ERRORS as error:  # the slot expires on its own
            raise LedgerUnavailable(f"Redis: {type(error).__name__}: {error}") from None
        return _counters(values)

    async def join(self, key: SpendKey, most: int, expires_at: datetime) -> bool:
        if key.user is None:
            return True
        expiry = math.ceil(expires_at.timestamp())
        try:
            joined = await bounded(self._join(keys=[self.users_key(key)], args=[key.user, most, expiry]))
        except REDIS_ERRORS as error:
            raise LedgerUnavailable(f"Redis: {type(error).__name__}: {error}") from None
        return int(joined) == 1


def _counters(values: Sequence[int]) -> list[Spent | None]:
    """The replies of ``_READ`` and ``_ADD``: tokens, micros per key; -1 for a key never seeded."""
    pairs = [(int(values[index]), int(values[index + 1])) for index in range(0, len(values), 2)]
    return [None if tokens < 0 else Spent(tokens, max(micros, 0)) for tokens, micros in pairs]
