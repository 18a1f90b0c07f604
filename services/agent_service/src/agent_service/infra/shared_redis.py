"""The one Redis client of a replica (``AGENT_REDIS_URL``), shared by whatever the replicas keep there together:
the run slots, the monthly spend, the tool-result cache.

Every call on it is bounded: the connect timeout bounds each connect, and ``bounded`` bounds a whole call (its
connects, retries and reads, and a wait for a pooled connection). Each user decides what an unreachable Redis means
for it.

The bounds cost as little CPU as they can, each call's share of agent-service's Redis CPU being most of it
(docs/performance.md): one ``asyncio.timeout`` per call rather than an anyio cancel scope, and no socket timeout,
under which redis-py would start a task of its own for every command it sends (``asyncio.wait_for`` on Python 3.11)
and a timer for every reply it reads. Without a socket timeout, a slow reply is waited for (within ``bounded``)
rather than the command sent again by redis-py's retries: a script that adds is never run twice for one call.
Replies are parsed by hiredis (C) when it is installed, as it is with agent-service's dependencies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

__all__ = ["REDIS_ERRORS", "REDIS_TIMEOUT_SECONDS", "bounded", "connect_redis"]

REDIS_TIMEOUT_SECONDS = 1.0
"""Bound of every connect, and half the bound of a whole call: past it, the caller treats Redis as unavailable rather
than waiting on it."""

REDIS_ERRORS = (RedisError, OSError, TimeoutError)
"""What a call on the shared client raises when Redis is unreachable, slow or refuses it."""

_T = TypeVar("_T")


def connect_redis(url: str) -> aioredis.Redis:
    """A client of ``url`` (nothing is connected until its first call: a Redis that is down does not stop a start).
    Its reads have no timeout of their own: each call is made through ``bounded``, which cuts it as a whole (a call
    cut mid-read closes its connection: redis-py never hands out a connection with a reply left unread)."""
    return aioredis.Redis.from_url(url, socket_timeout=None, socket_connect_timeout=REDIS_TIMEOUT_SECONDS)


async def bounded(call: Awaitable[_T]) -> _T:
    """``call``, given at most twice ``REDIS_TIMEOUT_SECONDS`` in all; raises ``TimeoutError`` past it."""
    async with asyncio.timeout(REDIS_TIMEOUT_SECONDS * 2):
        return await call
