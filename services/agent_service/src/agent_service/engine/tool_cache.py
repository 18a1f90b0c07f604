"""The tool-result cache: an identical call within a TTL gets the earlier call's result, and no tool is called.

Identical means the same tenant, MCP server, tool and arguments, the arguments compared as canonical JSON (sorted
keys, no whitespace), so the order the model wrote them in never matters. What is cached:

- only tools annotated ``readOnlyHint: true`` (for ``AGENT_TOOL_CACHE_SECONDS``) or named in
  ``AGENT_TOOL_CACHE_TTLS`` (pattern → seconds; a pattern as in the callers file: a tool's name,
  ``<server>:<tool>`` or ``<server>:*``); a TTL of 0 caches nothing;
- only a result the tool returned without ``isError``: a failed call, or a tool's error, is never reused;
- for a tenant whose runtime sets ``toolCacheSeconds``, never longer than that (0: its runs neither read nor write
  the cache).

The value is the result as the model saw it (already cut to ``AGENT_TOOL_RESULT_MAX_CHARS``), signed with
HMAC-SHA256 under ``AGENT_TOOL_CACHE_PEPPER`` over the full cache key and the value: whoever can write to Redis
without the pepper can neither forge a result nor move one to another key (another tenant's, another tool's), and
changing the pepper invalidates every value at once. A value that fails the check is a miss (counted as
``rejected``), never an error.

Two stores: Redis (the replica's shared client, ``<AGENT_REDIS_KEY_PREFIX>tool-cache:<sha256 of the identity>``,
expiring by Redis's own ``PX``) when ``AGENT_REDIS_URL`` is set, this process's memory otherwise (a bounded LRU).
Redis unreachable or slow is a miss, logged, and the call goes on: the cache never fails a run.

A store in Redis is sent off the answer's path (``start_write``: the replica's ``admission.pending.PendingWrites``,
under the run's tenant): its round trip overlaps the run's next LLM call, or follows its answer. What is stored is
served all the same to whatever asks for it on this replica: a lookup of a key whose store is under way here gets
the value being stored (no round trip); a new run of the tenant admitted here waits for the tenant's writes under
way; the service's shutdown waits for them all (bounded). Another replica sees the value at most one Redis round
trip after the answer of the run that stored it. While Redis fails (the cache's last call on it did), and past
``MAX_STORES_UNDER_WAY``, a store is awaited instead: no pile of writes each waiting out its bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import redis.asyncio as aioredis

from agent_service.core.tenancy import tool_matches
from agent_service.infra.shared_redis import REDIS_ERRORS, bounded
from agent_service.infra.telemetry import RunTelemetry
from agent_service.settings import AgentSettings
from suite_common.logging import get_logger
from suite_common.wire import CallerContext, ToolInfo

__all__ = [
    "MAX_STORES_UNDER_WAY",
    "CacheStore",
    "MemoryStore",
    "RedisStore",
    "ToolCache",
    "ToolCachePolicy",
    "WriteStarter",
    "cache_key",
    "canonical_arguments",
    "open_tool_cache",
    "sign",
]

_log = get_logger("agent_service.tool_cache")

CacheOutcome = Literal["hit", "miss", "store", "rejected", "error"]

_VERSION = b"v1"

MAX_STORES_UNDER_WAY = 1000
"""Stores in Redis sent off the answer's path and not finished yet, at most: past it, a store is awaited."""

WriteStarter = Callable[[str, Coroutine[Any, Any, None]], "asyncio.Task[None]"]
"""Starts a write to the shared Redis in a task of its own, counted among a tenant's (``PendingWrites.start``)."""


def canonical_arguments(arguments: Mapping[str, Any]) -> str:
    """The arguments as one string whatever order their keys came in: sorted keys, no whitespace."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def cache_key(
    key_prefix: str,
    tenant: str,
    server: str,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    user: str | None = None,
    role: str | None = None,
) -> str:
    """``<prefix>tool-cache:<sha256 of (tenant, user, role, server, tool, canonical arguments)>``: the identity
    hashed, so that nothing of a tenant's calls shows in Redis's key space; raises ``ValueError`` for arguments that
    are no JSON. The end user and role are part of it: a tool learns whom a call acts for
    (``_meta["io.loopsuite/caller"]``) and may answer each user from that user's own data, so one user's result is
    never another's, nor an admin's a guest's."""
    identity = json.dumps([tenant, user, role, server, tool, canonical_arguments(arguments)], separators=(",", ":"))
    return f"{key_prefix}tool-cache:{hashlib.sha256(identity.encode('utf-8')).hexdigest()}"


def _specificity(pattern: str) -> int:
    """``<server>:<tool>`` (0) before a tool's name (1) before ``<server>:*`` (2)."""
    _, colon, tool = pattern.partition(":")
    if not colon:
        return 1
    return 2 if tool == "*" else 0


@dataclass(frozen=True)
class ToolCachePolicy:
    """Which tools are cached, and for how long."""

    read_only_seconds: float
    """For a tool annotated ``readOnlyHint: true`` that no pattern names."""
    ttls: Mapping[str, float]
    """Pattern → seconds: a tool it names is cached even without ``readOnlyHint``; 0 never."""

    def ttl(self, tool: ToolInfo) -> float:
        """Seconds a result of ``tool`` is reused (0: never): the most specific pattern that names it, else
        ``read_only_seconds`` for a read-only tool."""
        for pattern in sorted(self.ttls, key=_specificity):
            if tool_matches(pattern, tool.server, tool.name, tool.server_tool):
                return self.ttls[pattern]
        read_only = (tool.annotations or {}).get("readOnlyHint") is True
        return self.read_only_seconds if read_only else 0.0


def sign(pepper: bytes, key: str, content: str) -> bytes:
    """The stored value: ``v1.<hex HMAC-SHA256(pepper, key NUL content)>.<content>``; the MAC covers the key, so
    the value is good under that key only."""
    body = content.encode("utf-8")
    mac = hmac.new(pepper, key.encode("utf-8") + b"\0" + body, hashlib.sha256).hexdigest().encode("ascii")
    return b".".join((_VERSION, mac, body))


def _verified(pepper: bytes, key: str, value: bytes) -> str | None:
    """The content of ``value`` if it was signed under ``key`` with ``pepper``; None for anything else."""
    version, _, rest = value.partition(b".")
    body = rest.partition(b".")[2]
    if version != _VERSION:
        return None
    try:
        content = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return content if hmac.compare_digest(sign(pepper, key, content), value) else None


class CacheStore(ABC):
    """Where signed values are kept; a store that cannot answer raises one of ``REDIS_ERRORS``."""

    shared = False
    """Kept outside this process (each call a round trip): a store is made off the answer's path."""

    @abstractmethod
    async def get(self, key: str) -> bytes | None: ...

    @abstractmethod
    async def set(self, key: str, value: bytes, seconds: float) -> None: ...


class MemoryStore(CacheStore):
    """This process's memory: at most ``max_entries`` values, the least recently used dropped first."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._values: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    async def get(self, key: str) -> bytes | None:
        entry = self._values.get(key)
        if entry is None:
            return None
        expiry, value = entry
        if expiry <= time.monotonic():
            del self._values[key]
            return None
        self._values.move_to_end(key)
        return value

    async def set(self, key: str, value: bytes, seconds: float) -> None:
        self._values[key] = (time.monotonic() + seconds, value)
        self._values.move_to_end(key)
        while len(self._values) > self.max_entries:
            self._values.popitem(last=False)

    def __len__(self) -> int:
        """Values held, expired ones not yet dropped included."""
        return len(self._values)


class RedisStore(CacheStore):
    """The replica's shared Redis client; each value expires by Redis's own clock."""

    shared = True

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis

    async def get(self, key: str) -> bytes | None:
        value = await bounded(self.redis.get(key))
        return value.encode("utf-8") if isinstance(value, str) else value  # bytes: the client does not decode

    async def set(self, key: str, value: bytes, seconds: float) -> None:
        await bounded(self.redis.set(key, value, px=max(1, round(seconds * 1000))))


class ToolCache:
    """Looks calls up and remembers their results, under ``policy``, in ``store``, signed with ``pepper``; counts
    each outcome in ``telemetry`` (``agent_tool_cache_total``)."""

    def __init__(
        self,
        policy: ToolCachePolicy,
        store: CacheStore,
        pepper: bytes,
        *,
        key_prefix: str = "",
        telemetry: RunTelemetry | None = None,
        start_write: WriteStarter | None = None,
    ) -> None:
        """``start_write``: where a store in a shared store goes off the answer's path (``None``: awaited)."""
        self.policy = policy
        self.store = store
        self._pepper = pepper
        self.key_prefix = key_prefix
        self.telemetry = telemetry or RunTelemetry.disabled()
        self.start_write = start_write
        self._storing: dict[str, tuple[str]] = {}
        """Key → (content,): the stores under way off the answer's path (a 1-tuple: its own identity marks whose
        store it is when two runs store one key)."""
        self._failing = False
        """The cache's last call on the store failed: stores are awaited until one succeeds."""

    def key(self, caller: CallerContext, server: str, tool: str, arguments: Mapping[str, Any]) -> str:
        return cache_key(self.key_prefix, caller.tenant, server, tool, arguments, user=caller.user, role=caller.role)

    def ttl(self, tool: ToolInfo, max_seconds: float | None = None) -> float:
        """Seconds a result of ``tool`` is reused (0: never): the policy's, at most ``max_seconds`` (the run's
        tenant's ``toolCacheSeconds``; ``None``: no such limit)."""
        ttl = self.policy.ttl(tool)
        return ttl if max_seconds is None else min(ttl, max_seconds)

    def _key_of(
        self, caller: CallerContext, tool: ToolInfo, arguments: Mapping[str, Any], max_seconds: float | None
    ) -> str | None:
        """The key of a call that may be cached; None for a tool the policy (or the tenant) does not cache (or
        arguments that are no JSON: a NaN, say)."""
        if self.ttl(tool, max_seconds) <= 0:
            return None
        try:
            return self.key(caller, tool.server, tool.name, arguments)
        except ValueError:
            return None

    async def lookup(
        self, caller: CallerContext, tool: ToolInfo, arguments: Mapping[str, Any], *, max_seconds: float | None = None
    ) -> str | None:
        """The earlier result of this call for the same tenant, user and role, or None (not cached, not cacheable, or
        not to be trusted). ``max_seconds``: the tenant's limit of a result's lifetime (0: never cached)."""
        key = self._key_of(caller, tool, arguments, max_seconds)
        if key is None:
            return None
        storing = self._storing.get(key)
        if storing is not None:  # stored by this replica, the write still under way: what it writes
            self._count("hit")
            return storing[0]
        try:
            value = await self.store.get(key)
        except REDIS_ERRORS as error:
            self._failed("get", error)
            return None
        self._failing = False
        if value is None:
            self._count("miss")
            return None
        content = _verified(self._pepper, key, value)
        if content is None:  # forged, moved from another key, or signed with another pepper
            self._count("rejected")
            _log.warning("tool_cache_value_rejected", tool=tool.name, server=tool.server)
            return None
        self._count("hit")
        return content

    async def remember(
        self,
        caller: CallerContext,
        tool: ToolInfo,
        arguments: Mapping[str, Any],
        content: str,
        *,
        max_seconds: float | None = None,
    ) -> None:
        """Keep a successful result of this call for its TTL (nothing for a tool the policy does not cache), at most
        ``max_seconds`` (the tenant's limit): in a shared store, sent off the answer's path (see the module)."""
        key = self._key_of(caller, tool, arguments, max_seconds)
        if key is None:
            return
        value, seconds = sign(self._pepper, key, content), self.ttl(tool, max_seconds)
        if (
            self.start_write is None
            or not self.store.shared
            or self._failing
            or len(self._storing) >= MAX_STORES_UNDER_WAY
        ):
            await self._store(key, value, seconds)
            return
        storing = (content,)
        self._storing[key] = storing
        task = self.start_write(caller.tenant, self._store(key, value, seconds))
        task.add_done_callback(lambda _: self._stored(key, storing))

    async def _store(self, key: str, value: bytes, seconds: float) -> None:
        try:
            await self.store.set(key, value, seconds)
        except REDIS_ERRORS as error:
            self._failed("set", error)
            return
        self._failing = False
        self._count("store")

    def _stored(self, key: str, storing: tuple[str]) -> None:
        if self._storing.get(key) is storing:  # not another run's store of the same key, started since
            del self._storing[key]

    def stores_under_way(self) -> int:
        """Stores sent off the answer's path and not finished yet."""
        return len(self._storing)

    def _failed(self, operation: str, error: BaseException) -> None:
        self._failing = True
        self._count("error")
        _log.warning("tool_cache_unavailable", operation=operation, error=f"{type(error).__name__}: {error}")

    def _count(self, outcome: CacheOutcome) -> None:
        self.telemetry.tool_cache(outcome)


def open_tool_cache(
    settings: AgentSettings,
    redis: aioredis.Redis | None,
    telemetry: RunTelemetry | None = None,
    start_write: WriteStarter | None = None,
) -> ToolCache | None:
    """The cache the settings describe, on ``redis`` (the replica's shared client) when there is one; None when
    no tool can be cached. ``start_write``: where its stores in Redis go off the answer's path (the replica's
    ``PendingWrites.start``; ``None``: awaited)."""
    if not settings.tool_cache_on:
        return None
    policy = ToolCachePolicy(settings.tool_cache_seconds, dict(settings.tool_cache_ttls))
    given = settings.tool_cache_pepper
    pepper = given.get_secret_value().strip().encode("utf-8") if given is not None else b""
    store: CacheStore
    if redis is not None:
        if not pepper:  # the settings refuse this already; a cache no replica could check is worse than none
            raise ValueError("AGENT_TOOL_CACHE_PEPPER is required for a tool-result cache in Redis")
        store = RedisStore(redis)
    else:
        pepper = pepper or secrets.token_bytes(32)  # this process's own: nothing outside it reads the values
        store = MemoryStore(settings.tool_cache_max_entries)
    return ToolCache(
        policy, store, pepper, key_prefix=settings.redis_key_prefix, telemetry=telemetry, start_write=start_write
    )
