"""Concurrency per tenant: a run holds one of its tenant's slots from the moment it is admitted to its end.

A slot is a lease, not a counter: it carries an expiry (``AGENT_LEASE_SECONDS`` ahead), renewed with the run's own
lease by the replica executing it, and released on every way out of the run. A replica that dies renews nothing, so
its slots expire by themselves; nothing can leak.

Two backends behind one interface, ``RunSlots``:

- ``LocalRunSlots``: in this process's memory (``AGENT_REDIS_URL`` empty): one replica, or each replica its own cap;
- ``RedisRunSlots``: shared by every replica, one sorted set per tenant (``<prefix>run-slots:<tenant>``; member: the
  run id, score: its slot's expiry in Redis's own clock, milliseconds), so replicas' clocks need not agree.
  Admission is one Lua script (drop expired slots, count, add under the cap), atomic across replicas; with monthly
  budgets in the same Redis, the same script checks them first (``SpendLedger.admit``): one round trip per run.

A slot is given back as its run ends, off the answer's path (``RunExecutor.release_slot``, ``pending``): the next
run of its tenant on the same replica waits for it, one on another replica may find it held for one round trip more.

Redis unreachable or slow: a new run is refused with 503 ``limits_unavailable`` (fail closed: a cap that silently
stops holding would let one tenant take every replica); a renewal or release that fails is logged, and the slot
expires on its own.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis

from agent_service.infra.shared_redis import REDIS_ERRORS, bounded
from suite_common.errors import ApiError
from suite_common.logging import get_logger

__all__ = [
    "TAKE_SLOT_LUA",
    "UNCAPPED",
    "LocalRunSlots",
    "NoRunSlots",
    "RedisRunSlots",
    "RunSlots",
    "SlotClaim",
    "open_run_slots",
    "too_many_runs",
]

_log = get_logger("agent_service.run_slots")

UNCAPPED = 2**31
"""A cap no tenant reaches: a run taken over after a crash was admitted once and is not refused again, but its slot
still counts against its tenant's cap (see ``LeaseKeeper._hold_slot``)."""


def too_many_runs(tenant: str, cap: int, retry_after_seconds: float) -> ApiError:
    """429 ``too_many_runs``; ``Retry-After``: when the soonest slot expires at the latest (a whole second, ≥ 1)."""
    seconds = max(1, math.ceil(retry_after_seconds))
    return ApiError(
        429,
        "too_many_runs",
        f"Tenant {tenant!r} has {cap} runs in progress, its cap (AGENT_MAX_CONCURRENT_RUNS_PER_TENANT); "
        "retry once one has ended.",
        headers={"Retry-After": str(seconds)},
    )


def limits_unavailable() -> ApiError:
    """503 ``limits_unavailable``; what Redis said (an address, a driver's words) is for the log, not the caller."""
    return ApiError(
        503,
        "limits_unavailable",
        "The run limits cannot be checked now; the run was not started. Try again shortly.",
        headers={"Retry-After": "1"},
    )


class RunSlots(ABC):
    """Slots of runs in progress, per tenant; a slot lasts ``ttl_seconds`` unless renewed."""

    shared = False
    """Kept outside this process (each call a round trip): given back off the answer's path. In this process: at
    once."""

    def __init__(self, ttl_seconds: float) -> None:
        self.ttl_seconds = ttl_seconds

    @abstractmethod
    async def acquire(self, tenant: str, run_id: str, cap: int) -> None:
        """Take a slot for ``run_id`` (again, if it holds one: renewed); raises the 429 ``too_many_runs`` when the
        tenant holds ``cap`` unexpired slots already, or the 503 ``limits_unavailable``."""

    @abstractmethod
    async def renew(self, tenant: str, run_ids: Sequence[str]) -> None:
        """Push the expiry of these runs' slots ``ttl_seconds`` ahead; a slot that has expired is not taken again."""

    @abstractmethod
    async def release(self, tenant: str, run_id: str) -> None:
        """Give the slot back (none held: nothing happens)."""


@dataclass(frozen=True, slots=True)
class SlotClaim:
    """The slot a new run asks for: ``run_id``'s among ``tenant``'s, under ``cap``; taken after the monthly budgets
    are checked, in the same round trip when both are in one Redis (``SpendLedger.admit``)."""

    slots: RunSlots
    tenant: str
    run_id: str
    cap: int

    async def take(self) -> None:
        await self.slots.acquire(self.tenant, self.run_id, self.cap)


class NoRunSlots(RunSlots):
    """No cap at all (``AGENT_MAX_CONCURRENT_RUNS_PER_TENANT=0``): nothing is counted, nothing refused."""

    async def acquire(self, tenant: str, run_id: str, cap: int) -> None:
        return None

    async def renew(self, tenant: str, run_ids: Sequence[str]) -> None:
        return None

    async def release(self, tenant: str, run_id: str) -> None:
        return None


class LocalRunSlots(RunSlots):
    """Slots in this process: tenant → {run id: expiry on the monotonic clock}."""

    def __init__(self, ttl_seconds: float) -> None:
        super().__init__(ttl_seconds)
        self._slots: dict[str, dict[str, float]] = {}

    def _live(self, tenant: str, now: float) -> dict[str, float]:
        slots = self._slots.setdefault(tenant, {})
        for run_id in [run_id for run_id, expiry in slots.items() if expiry <= now]:
            del slots[run_id]
        return slots

    async def acquire(self, tenant: str, run_id: str, cap: int) -> None:
        now = time.monotonic()
        slots = self._live(tenant, now)
        if run_id not in slots and len(slots) >= cap:
            raise too_many_runs(tenant, cap, min(slots.values()) - now)
        slots[run_id] = now + self.ttl_seconds

    async def renew(self, tenant: str, run_ids: Sequence[str]) -> None:
        now = time.monotonic()
        slots = self._live(tenant, now)
        for run_id in run_ids:
            if run_id in slots:
                slots[run_id] = now + self.ttl_seconds

    async def release(self, tenant: str, run_id: str) -> None:
        slots = self._slots.get(tenant)
        if slots is not None:
            slots.pop(run_id, None)
            if not slots:
                del self._slots[tenant]


# Takes a slot of the sorted set ``key`` for ``run_id`` under ``cap``: 0 when taken, otherwise the milliseconds until
# the soonest slot expires. The key itself expires with its last slot, so idle tenants leave nothing behind. The
# budgets' admission script takes a slot with it (``spend_ledgers``); ``_ACQUIRE`` below does the same alone.
TAKE_SLOT_LUA = """
local function take_slot(key, run_id, ttl, cap)
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if not redis.call('ZSCORE', key, run_id) and redis.call('ZCARD', key) >= cap then
    local soonest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return math.max(1, tonumber(soonest[2]) - now)
  end
  redis.call('ZADD', key, now + ttl, run_id)
  redis.call('PEXPIRE', key, ttl)
  return 0
end
"""

# KEYS[1]: the tenant's sorted set. ARGV: run id, TTL (ms), cap. Returns what ``take_slot`` does. Kept as earlier
# versions had it, word for word: the same script (the same SHA in Redis's script cache) while replicas of two
# versions run side by side in a rolling update.
_ACQUIRE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local soonest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(soonest[2]) - now)
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return 0
"""

# KEYS[1]: the tenant's sorted set. ARGV[1]: TTL (ms), ARGV[2..]: run ids. ``XX``: an expired (dropped) slot stays
# dropped: its run may already count elsewhere, or the cap was given to another run meanwhile.
_RENEW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local ttl = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for index = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[index])
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 0
"""


class RedisRunSlots(RunSlots):
    """Slots shared by every replica in Redis: ``<prefix>run-slots:<tenant>`` sorted sets."""

    shared = True

    def __init__(self, client: aioredis.Redis, ttl_seconds: float, *, key_prefix: str = "agent:") -> None:
        super().__init__(ttl_seconds)
        self.client = client
        self.key_prefix = key_prefix
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)

    def key(self, tenant: str) -> str:
        return f"{self.key_prefix}run-slots:{tenant}"

    @property
    def ttl_ms(self) -> int:
        return max(1, round(self.ttl_seconds * 1000))

    async def acquire(self, tenant: str, run_id: str, cap: int) -> None:
        try:
            wait_ms = await bounded(self._acquire(keys=[self.key(tenant)], args=[run_id, self.ttl_ms, cap]))
        except REDIS_ERRORS as error:
            _log.warning("run_slots_unavailable", tenant=tenant, error=f"{type(error).__name__}: {error}")
            raise limits_unavailable() from None
        self.check_taken(tenant, cap, int(wait_ms))

    @staticmethod
    def check_taken(tenant: str, cap: int, wait_ms: int) -> None:
        """What ``take_slot`` answered: 0, taken; otherwise the 429 ``too_many_runs``."""
        if wait_ms > 0:
            raise too_many_runs(tenant, cap, wait_ms / 1000)

    async def renew(self, tenant: str, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        try:
            await bounded(self._renew(keys=[self.key(tenant)], args=[self.ttl_ms, *run_ids]))
        except REDIS_ERRORS as error:  # the slots expire on their own if this goes on
            _log.warning("run_slots_not_renewed", tenant=tenant, runs=len(run_ids), error=str(error))

    async def release(self, tenant: str, run_id: str) -> None:
        try:
            await bounded(self.client.zrem(self.key(tenant), run_id))
        except REDIS_ERRORS as error:  # the slot expires on its own
            _log.warning("run_slot_not_released", tenant=tenant, run_id=run_id, error=str(error))


def open_run_slots(
    redis: aioredis.Redis | None, ttl_seconds: float, *, key_prefix: str = "agent:", cap: int = 1
) -> RunSlots:
    """Slots on the service's shared Redis client when there is one, in-process ones otherwise, none when ``cap``
    is 0 (a Redis that is down refuses runs, it does not stop the service from starting)."""
    if cap == 0:
        return NoRunSlots(ttl_seconds)
    if redis is not None:
        return RedisRunSlots(redis, ttl_seconds, key_prefix=key_prefix)
    return LocalRunSlots(ttl_seconds)
