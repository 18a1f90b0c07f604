"""``DriverPool``'s own bookkeeping, on stand-in connections (the PostgreSQL side is test_run_store_pool's): a
connection idle too long is cut at once, not closed politely (a proxy may have dropped it without a word, and a
polite close would hold the checkout for its timeout), and the older ones left by a burst go with it."""

from __future__ import annotations

from typing import cast

import asyncpg
import pytest

from suite_common.sql.driver_pool import DriverPool

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _StandIn:
    """What the pool asks of a connection, and no ``close``: a stale one must be cut, not closed politely."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cut = False

    def is_closed(self) -> bool:
        return self.cut

    def is_in_transaction(self) -> bool:
        return False

    def terminate(self) -> None:
        self.cut = True


async def test_connections_idle_too_long_are_cut_oldest_first_and_a_fresh_one_is_opened_in_their_place() -> None:
    opened: list[_StandIn] = []

    async def connect() -> asyncpg.Connection:
        opened.append(_StandIn(f"c{len(opened)}"))
        return cast(asyncpg.Connection, opened[-1])

    pool = DriverPool(connect, size=3, idle_seconds=60.0, acquire_timeout=1.0)
    burst = [await pool.acquire() for _ in range(3)]
    for connection in burst:
        pool.release(connection)
    assert pool.size() == 3

    pool._idle_seconds = -1.0  # every idle connection: idle too long
    fresh = await pool.acquire()

    assert [connection.cut for connection in opened[:3]] == [True, True, True]
    assert fresh is opened[3]
    assert pool.size() == 1
