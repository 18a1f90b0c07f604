"""The open sessions to tenants' servers: opened on first use, shared, closed when idle, bounded.

10,000 tenants with a server each must not mean 10,000 open sessions. A tenant server's session opens when it is
first used (a call, or the listing that follows its registration), is shared by every run of its tenant, and closes
after ``idle_seconds`` without a call. There are at most ``max_sessions`` open in all and ``max_per_tenant`` per
tenant: at a bound, the least recently used idle session (no call in flight, nobody waiting on it) is closed to make
room; when none is idle, opening another raises ``SessionLimitReached`` (the call answers 503 ``tool_unavailable``).

Each session is a ``ServerConnection``, as for a shared server: breaker, reconnects with backoff, probes,
redaction of its header values and its listing, all the same.

A session's key carries the end user: ``""`` for a session the tenant's runs share, the user's id for a server whose
OAuth tokens are per user (each user's calls go on a session opened with their own token). The tenant ``""`` is the
deployment's servers file, for a tenant's own server's key; a per-user server of the servers file is keyed by the
*caller's* tenant (``X-Tenant-Id``; ``""`` only for a call that names none), so that user "alice" of one tenant and
"alice" of another never share a session nor a token. Such a session is made like that server's own connection
(``open(..., make=)``: the registry's options and base directory), every other one by the pool's maker. Every
session of a server can be closed at once (``close_server``: its settings changed), or one user's only (``close``:
that user's token was revoked).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup, TaskStatus

from mcp_client_service.config.options import ConnectionOptions
from mcp_client_service.config.servers_file import HttpServerConfig
from mcp_client_service.connection.server_connection import ServerConnection
from suite_common.logging import get_logger

__all__ = ["ConnectionMaker", "SessionKey", "SessionLimitReached", "TenantSessions"]

_log = get_logger("mcp_client_service.tenants.sessions")

SessionKey = tuple[str, str, str]
"""(tenant, server, the end user: ``""`` for a session the tenant's runs share). The tenant is the server's owner
for a tenant's own server, the caller's for a per-user server of the servers file."""

ConnectionMaker = Callable[[SessionKey, HttpServerConfig, Callable[[], None]], ServerConnection]
"""How a session's connection is made: (its key, the server's config, what it calls on every change). The gateway's
makes an OAuth server's connection with the token of the key's principal."""


class SessionLimitReached(Exception):
    """No session can be opened now: a bound is reached and every open session is in use."""


@dataclass(eq=False)
class _Session:
    connection: ServerConnection
    scope: anyio.CancelScope
    last_used: float
    users: int = 0
    """Callers holding it (waiting for it to connect, or calling): it is not idle while any is."""

    def idle(self) -> bool:
        return self.users == 0 and self.connection.calls.in_flight == 0


class TenantSessions:
    """The open sessions to tenant servers, least recently used first. ``run()`` must be running to open any."""

    def __init__(
        self,
        options: ConnectionOptions,
        *,
        idle_seconds: float,
        max_sessions: int,
        max_per_tenant: int,
        on_change: Callable[[SessionKey], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
        make_connection: ConnectionMaker | None = None,
    ) -> None:
        self.options = options
        self._make_connection = make_connection or self._connection
        self.idle_seconds = idle_seconds
        self.max_sessions = max_sessions
        self.max_per_tenant = max_per_tenant
        self._on_change = on_change
        self._clock = clock
        self._open: OrderedDict[SessionKey, _Session] = OrderedDict()
        self._per_tenant: dict[str, int] = {}
        self._task_group: TaskGroup | None = None
        self._changed: anyio.Event | None = None
        self._stopped = anyio.Event()
        self._room: anyio.Event | None = None

    def _connection(self, key: SessionKey, config: HttpServerConfig, on_change: Callable[[], None]) -> ServerConnection:
        """A plain session's connection (no OAuth token to pick): the server's name, its config, the options."""
        return ServerConnection(key[1], config, self.options, on_change=on_change)

    def __len__(self) -> int:
        return len(self._open)

    def count(self, tenant: str) -> int:
        return self._per_tenant.get(tenant, 0)

    def get(self, key: SessionKey) -> ServerConnection | None:
        """The open session of ``key``, if there is one (nothing is opened)."""
        session = self._open.get(key)
        return session.connection if session is not None else None

    def keys_of(self, tenant: str, server: str) -> Iterator[SessionKey]:
        """The keys of the open sessions of ``tenant``'s ``server``, every user's, least recently used first."""
        return (key for key in list(self._open) if key[0] == tenant and key[1] == server)

    def keys_of_server(self, server: str) -> Iterator[SessionKey]:
        """The keys of the open sessions of every tenant's ``server`` (a servers-file per-user server's, each keyed by
        its caller's tenant)."""
        return (key for key in list(self._open) if key[1] == server)

    def latest(self, tenant: str, server: str) -> ServerConnection | None:
        """The most recently used open session of the server, whoever's (a per-user server's catalog is what any
        consented user's session last listed)."""
        keys = list(self.keys_of(tenant, server))
        return self._open[keys[-1]].connection if keys else None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the sessions until cancelled: close idle ones as their time passes; cancelling closes all."""
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            task_status.started()
            try:
                while True:
                    with anyio.move_on_after(self._close_idle()):
                        await self._stopped.wait()  # never set: the loop ends by cancellation
            finally:
                self._task_group = None
                for key in list(self._open):
                    self.close(key, "the gateway is stopping")

    def _close_idle(self) -> float:
        """Close the sessions idle for ``idle_seconds``; seconds until the next one may be."""
        now = self._clock()
        next_check = self.idle_seconds
        for key, session in list(self._open.items()):
            if not session.idle():
                continue
            left = session.last_used + self.idle_seconds - now
            if left <= 0:
                self.close(key, "idle")
            else:
                next_check = min(next_check, left)
        return max(next_check, 0.05)

    def open(self, key: SessionKey, config: HttpServerConfig, make: ConnectionMaker | None = None) -> ServerConnection:
        """The session of ``key``, opened now (connecting in the background) if it is not open; ``make``: how its
        connection is made, when not as the pool makes its tenants' (a servers-file server's per-user session).

        At a bound, the least recently used idle session is closed first; ``SessionLimitReached`` if none is idle.
        """
        session = self._open.get(key)
        if session is not None:
            self._open.move_to_end(key)
            return session.connection
        assert self._task_group is not None, "the tenant sessions are not running"
        tenant = key[0]
        if self.count(tenant) >= self.max_per_tenant:
            self._make_room(tenant, f"its tenant has {self.max_per_tenant} sessions open, in use")
        if len(self._open) >= self.max_sessions:
            self._make_room(None, f"the gateway has {self.max_sessions} tenant sessions open, in use")
        connection = (make or self._make_connection)(key, config, lambda: self._changed_now(key))
        session = _Session(connection=connection, scope=anyio.CancelScope(), last_used=self._clock())
        self._open[key] = session
        self._per_tenant[tenant] = self.count(tenant) + 1
        self._task_group.start_soon(self._supervise, session, name=f"mcp-tenant-server:{key[0]}/{key[1]}")
        opened = len(self._open)
        _log.info("mcp_tenant_session_opened", tenant=tenant, server=key[1], user=key[2] or None, open_sessions=opened)
        return connection

    def _make_room(self, tenant: str | None, why: str) -> None:
        """Close the least recently used idle session (of ``tenant``, else any); raise if none is idle."""
        for key, session in self._open.items():
            if (tenant is None or key[0] == tenant) and session.idle():
                self.close(key, "the least recently used, to make room")
                return
        raise SessionLimitReached(f"no session to the server can be opened now: {why}")

    async def _supervise(self, session: _Session) -> None:
        with session.scope:
            await session.connection.run()

    def close(self, key: SessionKey, reason: str) -> None:
        """Close the session of ``key`` (its calls in flight end with it), if it is open."""
        session = self._open.pop(key, None)
        if session is None:
            return
        tenant = key[0]
        left = self.count(tenant) - 1
        if left > 0:
            self._per_tenant[tenant] = left
        else:
            self._per_tenant.pop(tenant, None)
        session.scope.cancel()
        _log.info("mcp_tenant_session_closed", tenant=tenant, server=key[1], user=key[2] or None, reason=reason)
        self._changed_now(key)
        self._made_room()

    def close_server(self, tenant: str, server: str, reason: str) -> None:
        """Close every session of ``tenant``'s ``server``, every user's (its settings changed, it is gone)."""
        for key in list(self.keys_of(tenant, server)):
            self.close(key, reason)

    def _changed_now(self, key: SessionKey) -> None:
        self._on_change(key)
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    @asynccontextmanager
    async def using(
        self, key: SessionKey, config: HttpServerConfig, *, wait: float, make: ConnectionMaker | None = None
    ) -> AsyncIterator[ServerConnection]:
        """The session of ``key`` (opened if needed, see ``open``), once it serves or its first attempt has failed
        (within ``wait`` seconds); it is not idle until the block ends, which counts as its last use."""
        connection = self.open(key, config, make)
        session = self._open[key]
        session.users += 1
        try:
            if not _settled(connection):  # an open session (every call but the first) skips the timed wait's scope
                with anyio.move_on_after(wait):
                    await self._wait_settled(connection)
            yield connection
        finally:
            session.users -= 1
            session.last_used = self._clock()
            if session.users == 0:
                self._made_room()

    def _made_room(self) -> None:
        if self._room is not None:
            self._room.set()
            self._room = None

    async def wait_for_room(self) -> None:
        """Until a session is released or closed: room for another may have been made (bound it)."""
        if self._room is None:
            self._room = anyio.Event()
        await self._room.wait()

    async def _wait_settled(self, connection: ServerConnection) -> None:
        """Until ``connection`` serves, or has failed since it was opened (it keeps retrying meanwhile)."""
        while not _settled(connection):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()


def _settled(connection: ServerConnection) -> bool:
    """``connection`` serves, or has failed since it was opened (it keeps retrying meanwhile)."""
    return connection.serving or (connection.first_attempt_done and not connection.connecting)
