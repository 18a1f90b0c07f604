"""Throwaway PostgreSQL databases for tests: created on the local server (127.0.0.1:5432, user postgres, trust
auth) and dropped afterwards. PostgreSQL being unreachable fails the test: CI has it, and a skip would hide
that the PostgreSQL half of the store was never tested."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

__all__ = [
    "ADMIN_DSN",
    "POSTGRES_HOST",
    "REDIS_URL",
    "fresh_database",
    "fresh_postgres_database",
    "redis_key_prefix",
]

POSTGRES_HOST = "127.0.0.1:5432"
ADMIN_DSN = f"postgresql://postgres@{POSTGRES_HOST}/test"
REDIS_URL = "redis://127.0.0.1:6379/0"
"""The Redis of this machine and CI's (it keeps nothing on disk); tests keep apart by key prefix."""
"""Where databases are created and dropped from (the server's ``test`` database)."""
_CONNECT_TIMEOUT_SECONDS = 5.0


async def _admin(statement: str) -> None:
    try:
        connection = await asyncpg.connect(ADMIN_DSN, timeout=_CONNECT_TIMEOUT_SECONDS)
    except (OSError, asyncpg.PostgresError) as exc:
        raise RuntimeError(f"PostgreSQL at {POSTGRES_HOST} is needed by this test and is unreachable: {exc}") from exc
    try:
        await connection.execute(statement, timeout=30)
    finally:
        await connection.close()


def _run_apart(statement: Coroutine[Any, Any, None]) -> None:
    # On a thread of its own, so that the helper works in sync fixtures and inside a running event loop alike.
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(asyncio.run, statement).result()


@contextmanager
def fresh_postgres_database(prefix: str = "agent") -> Iterator[str]:
    """Create an empty database, yield its ``postgresql://`` URL, drop it (with any connection left to it)."""
    name = f"{prefix}_{secrets.token_hex(6)}"
    _run_apart(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql://postgres@{POSTGRES_HOST}/{name}"
    finally:
        _run_apart(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def fresh_database(backend: str, folder: Path, prefix: str) -> Iterator[str]:
    """An empty database of the test's own on ``backend`` as a URL: ``sqlite``, a file ``<prefix>.db`` in
    ``folder``; ``postgresql``, one of ``fresh_postgres_database``."""
    if backend == "sqlite":
        yield f"sqlite:///{folder}/{prefix}.db"
    else:
        with fresh_postgres_database(prefix) as url:
            yield url


@asynccontextmanager
async def redis_key_prefix() -> AsyncIterator[str]:
    """A Redis key prefix of the block's own (``test-<uuid>:``); its keys are deleted at the end. Fails (never skips)
    without Redis at ``REDIS_URL``."""
    prefix = f"test-{uuid.uuid4().hex[:12]}:"
    client = aioredis.Redis.from_url(REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        await client.ping()
    except OSError as error:  # redis-py's ConnectionError is an OSError too
        pytest.fail(f"Redis at {REDIS_URL} is unreachable ({error}): this test needs it")
    try:
        yield prefix
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
