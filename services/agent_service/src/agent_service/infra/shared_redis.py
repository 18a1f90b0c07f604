"""The one Redis client of a replica (``AGENT_REDIS_URL``), shared by whatever the replicas keep there together:
the run slots, the monthly spend, the tool-result cache.

Every call on it is bounded: the socket timeouts bound each connect and read, and ``bounded`` bounds a whole call,
a wait for a pooled connection included. Each user decides what an unreachable Redis means for it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import anyio
import redis.asyncio as aioredis
from redis.exceptions import RedisError

__all__ = ["REDIS_ERRORS", "REDIS_TIMEOUT_SECONDS", "bounded", "connect_redis"]

REDIS_TIMEOUT_SECONDS = 1.0
"""Bound of every connect and read: past it, the caller treats Redis as unavailable rather than waiting on it."""

REDIS_ERRORS = (RedisError, OSError, TimeoutError)
"""What a call on the shared client raises when Redis is unreachable, slow or refuses it."""

_T = TypeVar("_T")


def connect_redis(url: str) -> aioredis.Redis:
    """A client of ``url`` (nothing is connected until its first call: a Redis that is down does not stop a start)."""
    return aioredis.Redis.from_url(
        url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS
    )


async def bounded(call: Awaitable[_T]) -> _T:
    """``call``, given at most twice the socket timeout in all (a wait for a pooled connection included)."""
    with anyio.fail_after(REDIS_TIMEOUT_SECONDS * 2):
        return await call
