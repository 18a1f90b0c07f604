"""Every tenant's servers, in memory and in step with the store, and what the tenant API does with them.

Loaded from the store at startup (``load``), then re-synced whenever the store's revision moves (read every
``sync_seconds``: one cheap query) by reading only the servers written and deleted since the revision this replica
has, so a change made on any replica reaches this one within about a second, and a change of one tenant's server
costs the others nothing; a change made here is applied here at once. A server whose URL, transport or headers
changed, or that was switched off or deleted, has its session closed at once: its calls in flight end, and no new
call reaches it.

Registering or enabling a server connects to it and lists its tools in the background, and every listing a session
makes is kept in the store (``record_listing``), so every replica lists the server's tools without opening a session
of its own.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp_types import Tool

from mcp_client_service.config.options import ConnectionOptions
from mcp_client_service.config.servers_file import HttpServerConfig
from mcp_client_service.connection.server_connection import ServerConnection
from mcp_client_service.registry.catalog import Away, NameCollision, ServerTools, ToolCatalog
from mcp_client_service.registry.server_registry import ServerRegistry
from mcp_client_service.tenants.catalogs import TenantCatalogs, parse_tools
from mcp_client_service.tenants.configs import is_per_user, masked_url, server_config
from mcp_client_service.tenants.sessions import (
    ConnectionMaker,
    SessionKey,
    SessionLimitReached,
    TenantSessions,
)
from mcp_client_service.tenants.store_api import ServerRow, TenantStore
from suite_common.logging import get_logger
from suite_common.wire import ServerAuth, ServerAuthorization, ServerAuthView, TenantServer, ToolInfo

__all__ = ["ServerGone", "TenantServers", "TenantSettings"]

_log = get_logger("mcp_client_service.tenants.servers")

_RELIST_SECONDS = 30.0
"""A server never listed (its first listing failed) is listed again when its catalog is used, at most this often."""


class ServerGone(LookupError):
    """The tenant has no such enabled server now (never had, deleted, or switched off)."""


@dataclass(frozen=True)
class TenantSettings:
    """The bounds and timings of tenant servers (``MCP_CLIENT_TENANT_*``)."""

    sync_seconds: float = 1.0
    idle_seconds: float = 300.0
    max_sessions: int = 256
    max_sessions_per_tenant: int = 8


@dataclass(frozen=True)
class _Known:
    """A stored server as this replica uses it: the row, its connection config (or why it has none), its tools."""

    row: ServerRow
    config: HttpServerConfig | None
    problem: str | None
    stored_tools: tuple[Tool, ...]
    recorded: tuple[list[dict[str, Any]] | None, str | None]
    """The listing and error last kept in the store (the row's, or since then this replica's)."""


def _connects_the_same(a: ServerRow, b: ServerRow) -> bool:
    return (
        a.url == b.url
        and a.transport == b.transport
        and dict(a.headers) == dict(b.headers)
        and (a.auth or None) == (b.auth or None)
    )


def _dump_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    return [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in tools]


class TenantServers:
    """The tenants' own servers: rows, sessions and catalogs. ``load(store)`` then ``run()`` (until cancelled).

    Made before its store is open (the app's routes and router hold it from the start); ``load`` gives it the store.
    """

    def __init__(
        self,
        store: TenantStore | None,
        registry: ServerRegistry,
        options: ConnectionOptions,
        *,
        collision: NameCollision = "first_wins",
        settings: TenantSettings | None = None,
        make_connection: ConnectionMaker | None = None,
    ) -> None:
        """``make_connection``: how a session's connection is made (the gateway's picks an OAuth server's token by
        the session's key); default, a plain ``ServerConnection``."""
        self._store = store
        self.settings = settings = settings or TenantSettings()
        self._registry = registry
        self.options = options
        self.sessions = TenantSessions(
            options,
            idle_seconds=settings.idle_seconds,
            max_sessions=settings.max_sessions,
            max_per_tenant=settings.max_sessions_per_tenant,
            on_change=self._session_changed,
            make_connection=make_connection,
        )
        self.catalogs = TenantCatalogs(collision=collision, shared=self._shared_tools, own=self._own_tools)
        self._known: dict[str, dict[str, _Known]] = {}
        """Per tenant, its servers by name, in creation order."""
        self.revision: int | None = None
        """The store's revision this replica's view was loaded at; ``None`` before ``load``."""
        self._task_group: TaskGroup | None = None
        self._sync_lock = anyio.Lock()
        self._changed: anyio.Event | None = None
        self._writes = 0
        """Changes this replica made (``adopt``, ``forget``): a sync that raced one is not adopted."""
        self._listing: dict[tuple[str, str], float] = {}
        """Servers being listed in the background, or last tried (``time.monotonic``) and never listed."""

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_until(self, condition: Callable[[TenantServers], bool]) -> None:
        """Return once ``condition(self)`` holds, re-checked on every change of a server or a session (bound it)."""
        while not condition(self):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    @property
    def connect_wait(self) -> float:
        """How long a call waits for a server's session to open and list its tools."""
        return self.options.connect_timeout + self.options.list_timeout

    # --- the view, in step with the store ----------------------------------------------------------

    @property
    def store(self) -> TenantStore:
        assert self._store is not None, "the tenant servers have no store yet: load(store) first"
        return self._store

    async def load(self, store: TenantStore | None = None) -> None:
        """Read every tenant's servers from ``store`` (or the one given before), at startup, before serving."""
        self._store = store or self._store
        revision, rows = await self.store.load_all()
        self._adopt(revision, rows)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Sessions, re-syncing and background listings, until cancelled (which closes every session).
        Started (``TaskGroup.start``) once sessions can be opened."""
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            await tg.start(self.sessions.run)
            task_status.started()
            try:
                while True:
                    await anyio.sleep(self.settings.sync_seconds)
                    await self._sync_logged()
            finally:
                self._task_group = None

    async def _sync_logged(self) -> None:
        try:
            await self.sync()
        except Exception as error:  # the store is away: serve what is known, try again at the next tick
            _log.warning("mcp_tenant_sync_failed", error=f"{type(error).__name__}: {error}")

    async def sync(self) -> bool:
        """Read what changed if the store's revision moved; whether this replica's view changed."""
        async with self._sync_lock:
            since = self.revision
            if since is None:
                await self.load()
                return True
            if await self.store.revision() == since:
                return False
            writes = self._writes
            revision, rows, deleted = await self.store.changes_since(since)
            if writes != self._writes:
                # A change made here meanwhile may be newer than what was read: read again at the next tick,
                # rather than undo it (a server registered here would be forgotten until then).
                return False
            for tenant, name in deleted:  # first: a server deleted and registered again is in both
                self._drop(tenant, name)
            for row in sorted(rows, key=lambda row: row.created_at):
                self._put(row)
            self.revision = revision
            return True

    def _adopt(self, revision: int, rows: Sequence[ServerRow]) -> None:
        by_tenant: dict[str, list[ServerRow]] = {}
        for row in rows:
            by_tenant.setdefault(row.tenant, []).append(row)
        for tenant in set(self._known) - set(by_tenant):
            for name in list(self._known[tenant]):
                self._drop(tenant, name)
        for tenant, tenant_rows in by_tenant.items():
            names = {row.name for row in tenant_rows}
            for name in set(self._known.get(tenant, {})) - names:
                self._drop(tenant, name)
            for row in sorted(tenant_rows, key=lambda row: row.created_at):
                self._put(row)
        self.revision = revision

    def adopt(self, row: ServerRow) -> None:
        """A server this replica has just stored (registered or changed): applied at once."""
        self._writes += 1
        self._put(row)

    def forget(self, tenant: str, name: str) -> None:
        """A server this replica has just deleted: gone at once."""
        self._writes += 1
        self._drop(tenant, name)

    def _put(self, row: ServerRow) -> None:
        """Adopt one stored server: its session closes if it now connects differently or is switched off."""
        tenant_known = self._known.setdefault(row.tenant, {})
        before = tenant_known.get(row.name)
        if before is not None and before.row == row:
            return
        if before is not None and (not row.enabled or not _connects_the_same(before.row, row)):
            self.sessions.close_server(row.tenant, row.name, "its settings changed" if row.enabled else "switched off")
        tenant_known[row.name] = self._known_row(row)
        self.catalogs.changed(row.tenant)
        self._notify()

    def _drop(self, tenant: str, name: str) -> None:
        tenant_known = self._known.get(tenant, {})
        if tenant_known.pop(name, None) is None:
            return
        self._listing.pop((tenant, name), None)
        self.sessions.close_server(tenant, name, "deleted")
        if tenant_known:
            self.catalogs.changed(tenant)
        else:
            self._known.pop(tenant, None)
            self.catalogs.forget(tenant)
        self._notify()

    @staticmethod
    def _known_row(row: ServerRow) -> _Known:
        config: HttpServerConfig | None = None
        problem = row.headers_problem
        if problem is not None:
            # Never connected without its headers (it would be refused, or worse, served anonymously): failed,
            # saying why, while every other server loads and serves.
            _log.error("mcp_tenant_server_headers_unreadable", tenant=row.tenant, server=row.name, error=problem)
        else:
            try:
                config = server_config(row.url, row.transport, row.headers, row.allowed_tools, row.auth)
            except ValueError as error:
                problem = str(error)
        return _Known(
            row=row,
            config=config,
            problem=problem,
            stored_tools=parse_tools(row.tools),
            recorded=(row.tools, row.last_error),
        )

    def config_of(self, tenant: str, name: str) -> HttpServerConfig | None:
        """The connection config of ``tenant``'s enabled server ``name``; ``None``: it has none such now."""
        known = self._known.get(tenant, {}).get(name)
        return known.config if known is not None and known.row.enabled else None

    def is_per_user(self, tenant: str, name: str) -> bool:
        """Whether ``tenant``'s server ``name`` holds OAuth tokens per end user (a session per user)."""
        known = self._known.get(tenant, {}).get(name)
        return known is not None and is_per_user(known.row.auth)

    def is_shared(self, name: str) -> bool:
        """Whether ``name`` is a server of the servers file (a tenant's server may not take its name)."""
        return name in self._registry.connections or name in self._registry.disabled

    def count(self) -> int:
        """Every tenant's servers together, as this replica knows them."""
        return sum(len(servers) for servers in self._known.values())

    def servers_of(self, tenant: str) -> list[ServerRow]:
        """The tenant's servers as this replica knows them (from the store, or its own changes), in creation order."""
        return [known.row for known in self._known.get(tenant, {}).values()]

    def recorded_listing(self, tenant: str, name: str) -> list[dict[str, Any]] | None:
        """The server's last listing this replica knows of (MCP Tool JSON); ``None``: never listed."""
        known = self._known.get(tenant, {}).get(name)
        return known.recorded[0] if known is not None else None

    # --- catalogs -----------------------------------------------------------------------------------

    def catalog(self, tenant: str | None) -> ToolCatalog:
        """The catalog of ``tenant``: the shared one for no tenant, or one without servers of its own."""
        if tenant is None or tenant not in self._known:
            return self._registry.catalog
        return self.catalogs.catalog(tenant)

    def _shared_tools(self) -> tuple[object, Sequence[ServerTools]]:
        version = self._registry.catalog.listing()
        return version, self._registry.server_tools()

    def _own_tools(self, tenant: str) -> list[ServerTools]:
        servers = []
        for name, known in self._known.get(tenant, {}).items():
            if not known.row.enabled or known.config is None:
                continue
            connection = self.sessions.latest(tenant, name)  # a per-user server's: any consented user's session
            offers = known.config.offers
            stored = known.stored_tools
            if connection is None and known.recorded[0] is None:
                self._list_if_due(tenant, name)  # never listed (its first listing failed, or was lost): try again
            if connection is None or (connection.connecting and not connection.first_attempt_done):
                # No session (or its first one opening): listed from the store, callable (a call opens a session).
                servers.append(ServerTools(server=name, ready=True, tools=stored, offers=offers, tenant=tenant))
                continue
            away = connection.away()
            servers.append(
                ServerTools(
                    server=name,
                    ready=away is None,
                    tools=connection.listing.tools,
                    known_tools=connection.listing.known_tools or stored,
                    offers=offers,
                    away=Away(reason=away[0], retry_at=away[1]) if away is not None else None,
                    tenant=tenant,
                )
            )
        return servers

    # --- sessions -----------------------------------------------------------------------------------

    @asynccontextmanager
    async def session(self, tenant: str, name: str, user: str = "") -> AsyncIterator[ServerConnection]:
        """The session of ``tenant``'s server ``name`` (``user``'s own, for a per-user server; ``""``: the one the
        tenant's runs share), opened if needed, once it serves or has failed.

        ``ServerGone`` if the tenant has no such enabled server now; ``SessionLimitReached`` at the bounds.
        """
        known = self._known.get(tenant, {}).get(name)
        if known is None or not known.row.enabled or known.config is None:
            raise ServerGone(name)
        async with self.sessions.using((tenant, name, user), known.config, wait=self.connect_wait) as connection:
            yield connection

    @asynccontextmanager
    async def user_session(self, tenant: str, name: str, user: str) -> AsyncIterator[ServerConnection]:
        """``user``'s own session of the servers file's per-user server ``name``, in the same pool as tenants'
        sessions, keyed by the CALLER's ``tenant`` (``""`` only for a call naming none): "alice" of two tenants are
        two principals, with a token and a session each. Made as the server's own connection would be
        (``ServerRegistry.user_connection``); a session opened with settings a reload has since changed is closed
        first.

        ``ServerGone`` if the servers file has no such per-user server now; ``SessionLimitReached`` at the bounds.
        """
        template = self._registry.connections.get(name)
        if template is None or not self._registry.is_per_user(name) or user == "":
            raise ServerGone(name)
        config = template.config
        assert isinstance(config, HttpServerConfig)
        key = (tenant, name, user)
        opened = self.sessions.get(key)
        if opened is not None and opened.config is not config:
            self.sessions.close(key, "its settings changed")
        make = self._registry.user_connection
        async with self.sessions.using(key, config, wait=self.connect_wait, make=make) as connection:
            yield connection

    def is_users_own(self, tenant: str, name: str) -> bool:
        """Whether (``tenant``, ``name``) names a servers-file per-user server for that tenant's callers (the tenant
        has no own server of that name)."""
        return self._registry.is_per_user(name) and name not in self._known.get(tenant, {})

    def close_user_sessions(self, name: str) -> None:
        """Close every user's session of the servers file's server ``name`` (a reload removed or changed it)."""
        for tenant in {key[0] for key in self.sessions.keys_of_server(name)}:
            if name not in self._known.get(tenant, {}):  # not a tenant's own server of that name
                self.sessions.close_server(tenant, name, "its settings changed")

    def _session_of(self, tenant: str, name: str, user: str) -> AbstractAsyncContextManager[ServerConnection]:
        """The session a listing of (``tenant``, ``name``) for ``user`` uses: the tenant's server's, else the
        servers file's per-user server's."""
        if user and self.is_users_own(tenant, name):
            return self.user_session(tenant, name, user)
        return self.session(tenant, name, user)

    def _session_changed(self, key: SessionKey) -> None:
        tenant, name, _ = key
        if tenant in self._known:  # (a servers-file per-user session of a tenant without servers: the registry's)
            self.catalogs.changed(tenant)
        self._notify()
        connection = self.sessions.get(key)
        known = self._known.get(tenant, {}).get(name)
        if connection is None or known is None or not connection.serving or self._task_group is None:
            return
        tools = _dump_tools(connection.listing.tools)
        if known.recorded != (tools, None):
            # Noted in memory at once, so that one listing is recorded once.
            self._known[tenant][name] = replace(known, stored_tools=connection.listing.tools, recorded=(tools, None))
            self._task_group.start_soon(self._record_listing, tenant, name, tools, None)

    async def _record_listing(
        self, tenant: str, name: str, tools: list[dict[str, Any]] | None, error: str | None
    ) -> None:
        try:
            await self.store.record_listing(tenant, name, tools, error)
        except Exception as failure:  # a listing not kept is kept at the next one; the call path is unaffected
            _log.warning(
                "mcp_tenant_listing_not_recorded",
                tenant=tenant,
                server=name,
                error=f"{type(failure).__name__}: {failure}",
            )

    def list_in_background(self, tenant: str, name: str, user: str = "") -> None:
        """Connect to a registered (or enabled) server and list its tools, now, without waiting for it. A per-user
        server is listed by a user's own session only (``user``: one who has just consented), which records its
        listing as the server's; without a user it is not listed (nobody's token to list it with)."""
        per_user = self.is_per_user(tenant, name) or self.is_users_own(tenant, name)
        if self._task_group is None or (per_user and not user):
            return
        self._listing[tenant, name] = math.inf  # in progress
        self._task_group.start_soon(self._list_now, tenant, name, user, name=f"mcp-tenant-list:{tenant}/{name}")

    def _list_if_due(self, tenant: str, name: str) -> None:
        """List a server never listed, unless that is in progress or was tried within ``_RELIST_SECONDS``."""
        if time.monotonic() >= self._listing.get((tenant, name), -math.inf) + _RELIST_SECONDS:
            self.list_in_background(tenant, name)

    async def _list_now(self, tenant: str, name: str, user: str) -> None:
        try:
            await self._list_once(tenant, name, user)
        finally:
            known = self._known.get(tenant, {}).get(name)
            if known is not None and known.recorded[0] is None:
                self._listing[tenant, name] = time.monotonic()  # tried, not listed: again when due
            else:
                self._listing.pop((tenant, name), None)

    async def _list_once(self, tenant: str, name: str, user: str) -> None:
        serving, error = False, "no session could be opened in time: every one was in use"
        with anyio.move_on_after(self.connect_wait):
            while True:
                try:
                    async with self._session_of(tenant, name, user) as connection:
                        serving, error = connection.serving, connection.last_error or "it did not answer in time"
                        # Waiting for a person's consent is not a failure: kept (idle-closed as any), it says where.
                        serving = serving or connection.consent is not None
                    break
                except SessionLimitReached:
                    await self.sessions.wait_for_room()  # in the background, a listing may wait its turn
                except ServerGone:
                    return  # deleted or switched off meanwhile
        if serving:
            return  # its listing is recorded as the session publishes it (``_session_changed``)
        # Nobody is waiting on it: no reconnecting in the background until a call asks for it again.
        self.sessions.close((tenant, name, user), "its first connection failed")
        known = self._known.get(tenant, {}).get(name)
        if known is not None and not user:  # one user's failed session says nothing of the server's
            self._known[tenant][name] = replace(known, recorded=(known.recorded[0], error))
            await self._record_listing(tenant, name, None, error)  # None: the tools listed before stay

    # --- answers ------------------------------------------------------------------------------------

    def describe(self, row: ServerRow) -> TenantServer:
        """``row`` as the tenant API answers it: settings (header names, never values), state, tools."""
        connection = self.sessions.latest(row.tenant, row.name) if row.enabled else None
        known = self._known.get(row.tenant, {}).get(row.name)
        if not row.enabled:
            state, last_error = "disabled", row.last_error
        elif connection is not None:
            state, last_error = connection.state, connection.last_error
        elif row.headers_problem is not None:
            state, last_error = "failed", row.headers_problem
        elif known is not None and known.problem is not None:
            state, last_error = "failed", known.problem
        else:
            state, last_error = ("failed" if row.last_error else "idle"), row.last_error
        tools = self._tool_infos(row, connection)
        auth = _auth_of(row)
        return TenantServer(
            name=row.name,
            url=masked_url(row.url),  # its secrets masked: headers are the place for them
            transport=row.transport,
            enabled=row.enabled,
            allowed_tools=list(row.allowed_tools) if row.allowed_tools is not None else None,
            header_names=sorted(row.headers),
            state=state,
            last_error=last_error,
            tool_count=len(tools),
            tools=tools,
            auth=ServerAuthView.of(auth) if auth is not None else None,
            authorization=_authorization(auth, connection, row) if auth is not None else None,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    def _tool_infos(self, row: ServerRow, connection: ServerConnection | None) -> list[ToolInfo]:
        tools = connection.listing.tools if connection is not None and connection.serving else parse_tools(row.tools)
        known = self._known.get(row.tenant, {}).get(row.name)
        catalog = self.catalog(row.tenant) if row.enabled and known is not None else None
        infos = []
        for tool in tools:
            entry = catalog.served(row.name, server_tool=tool.name) if catalog is not None else None
            if entry is not None:
                infos.append(entry.info())
            elif row.allowed_tools is None or tool.name in row.allowed_tools:
                infos.append(
                    ToolInfo(
                        name=tool.name,
                        description=tool.description or "",
                        input_schema=tool.input_schema,
                        server=row.name,
                        tenant=row.tenant,
                    )
                )
        return infos


def _auth_of(row: ServerRow) -> ServerAuth | None:
    """The row's ``auth`` block as the wire reads it; ``None`` if it has none (or one no longer readable as such)."""
    if row.auth is None:
        return None
    try:
        return ServerAuth.model_validate(row.auth)
    except ValueError:
        return None


def _authorization(auth: ServerAuth, connection: ServerConnection | None, row: ServerRow) -> ServerAuthorization:
    """Whether a token is held, as far as this replica sees: a session serves, or one listed the server (for a
    per-user server, some user consented); else a consent is required."""
    serving = connection is not None and connection.serving
    if auth.tokens == "machine" and connection is not None and connection.consent is not None:
        # The tenant's one session waits for its admin's consent: where to give it (never a user's URL).
        return ServerAuthorization(
            tokens="machine", state="required", authorization_url=connection.consent.authorization_url
        )
    state: Literal["required", "authorized"] = "authorized" if serving or row.tools is not None else "required"
    return ServerAuthorization(tokens=auth.tokens, state=state)
