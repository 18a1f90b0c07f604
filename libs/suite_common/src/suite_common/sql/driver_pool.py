"""The pool of asyncpg connections behind a store's hot path (``PostgresDatabase.on_driver``).

asyncpg's own pool wraps every checkout in tasks of its own (``wait_for`` for the acquire's timeout, ``shield`` for
the return), resets the connection and re-arms its idle timer on every return: about 0.1 to 0.25 ms of the client's
CPU per checkout, measured, more than the one statement a hot-path write is. Here a checkout takes an idle connection
at once (the one returned last: the warmest), opens one when none is idle and the pool is below its size, and
otherwise waits, bounded, for one to come back; a return puts it back, or hands it to the first waiter.

A connection is never reused after its body failed (an error, a cancellation, a timeout): its state is unknown (a
statement cut off, a transaction left open), so it is closed and its place given to the next checkout. One idle
longer than ``idle_seconds`` is cut at the next checkout, as SQLAlchemy's pool recycles its own (a proxy's idle
timeout may have closed it under the store's feet).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable

import asyncpg

__all__ = ["DriverPool"]


class DriverPool:
    """At most ``size`` connections from ``connect``, opened when first needed and kept."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        *,
        size: int,
        idle_seconds: float,
        acquire_timeout: float,
    ) -> None:
        self._connect = connect
        self._size = size
        self._idle_seconds = idle_seconds
        self._acquire_timeout = acquire_timeout
        self._idle: deque[tuple[asyncpg.Connection, float]] = deque()
        """Connections returned, each with when (``time.monotonic``); the newest last."""
        self._open = 0
        """Connections open or being opened, idle or checked out."""
        self._waiters: deque[asyncio.Future[asyncpg.Connection | None]] = deque()
        """Checkouts waiting for a connection; ``None`` handed to one: a place freed, open a connection in it."""
        self._closed = False

    def size(self) -> int:
        """The connections open now (or being opened), idle or checked out."""
        return self._open

    async def acquire(self) -> asyncpg.Connection:
        """A connection for one body; give it back with ``release`` (or ``discard`` when the body failed).
        ``TimeoutError`` when none came free within ``acquire_timeout``."""
        if self._closed:
            raise asyncpg.InterfaceError("the pool is closed")
        # Idle so long that a proxy may have dropped it: cut, oldest first (they lead), whether this checkout would
        # have taken it or not, so that a burst's extra connections do not stay open for ever. Cut, not closed
        # politely: a connection a proxy dropped without a word would hold the checkout for the close's timeout.
        expired_before = time.monotonic() - self._idle_seconds
        while self._idle and self._idle[0][1] < expired_before:
            self._open -= 1
            self._idle.popleft()[0].terminate()
        while self._idle:
            connection, _ = self._idle.pop()
            if not connection.is_closed():
                return connection
            self._open -= 1  # closed by the server: replaced, in the same place
        if self._open < self._size:
            self._open += 1
            return await self._open_one()
        waiter: asyncio.Future[asyncpg.Connection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self._acquire_timeout):
                handed = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Handed a connection (or a place) just as the wait ended: passed on, not lost.
                given = waiter.result()
                if given is None:
                    self._free_place()
                else:
                    self.release(given)
            else:
                waiter.cancel()
            raise
        return handed if handed is not None else await self._open_one()

    def release(self, connection: asyncpg.Connection) -> None:
        """Give back a connection whose body succeeded."""
        if self._closed or connection.is_closed() or connection.is_in_transaction():
            self.discard(connection)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        self._idle.append((connection, time.monotonic()))

    def discard(self, connection: asyncpg.Connection) -> None:
        """Close a connection whose body failed, and free its place."""
        if not connection.is_closed():
            connection.terminate()
        self._free_place()

    async def close(self) -> None:
        """Close the idle connections; those checked out are closed when they come back."""
        self._closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(asyncpg.InterfaceError("the pool is closed"))
        idle, self._idle = self._idle, deque()
        self._open -= len(idle)
        for connection, _ in idle:
            await _close(connection)

    async def _open_one(self) -> asyncpg.Connection:
        """Open a connection in a place already counted in ``_open``."""
        try:
            return await self._connect()
        except BaseException:
            self._free_place()
            raise

    def _free_place(self) -> None:
        if not self._closed:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the place goes to the waiter, which opens its own connection
                    return
        self._open -= 1


async def _close(connection: asyncpg.Connection) -> None:
    """Close politely (the server ends the session at once), or cut it if the server does not answer."""
    if connection.is_closed():
        return
    try:
        await connection.close(timeout=5.0)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        connection.terminate()
