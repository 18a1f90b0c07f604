"""The tenant server store: the MCP servers tenants register at runtime, kept in the gateway's own database.

SQLite (one replica) or PostgreSQL (any number), through ``suite_common.sql``. Every method is one short
transaction; every failure is a ``StoreError`` (``ServerExists``, ``TooManyServers``, ``SecretsKeyMissing`` and
``SecretsUnreadable`` are its kinds), never a driver's own exception. Times are the replica's wall clock, in UTC.

Every write also bumps ``registry_revision``'s counter in its own transaction and stamps the rows it changed (or the
deletion it made, in ``tenant_server_deletions``) with the new revision, so a replica learns of any change by reading
one number (``revision``) and then reads only what changed since the revision it has (``changes_since``); it reads
everything once, at startup (``load_all``). Header values are encrypted at rest (``store.secrets``) and handed out
decrypted, never shown by ``repr``; a row no key decrypts is handed out without them, saying why
(``StoredServer.headers_problem``), so that one such row never keeps the others from loading.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, get_args

import sqlalchemy as sa
from cryptography.fernet import InvalidToken
from sqlalchemy import Connection

from mcp_client_service.store.schema import (
    REVISION_ROW,
    oauth_clients,
    oauth_consents,
    oauth_tokens,
    registry_revision,
    tenant_server_deletions,
    tenant_servers,
)
from mcp_client_service.store.secrets import SecretsBox
from suite_common.sql import (
    Database,
    Migrations,
    StoreError,
    StoreName,
    compact_json,
    database_url,
    open_database,
)

__all__ = [
    "MAX_LISTING_BYTES",
    "MIGRATIONS",
    "STORE_NAME",
    "UNCHANGED",
    "SecretsKeyMissing",
    "SecretsUnreadable",
    "ServerExists",
    "StoredServer",
    "TenantServerStore",
    "TooManyServers",
    "Transport",
    "open_tenant_store",
]

Transport = Literal["streamable-http", "sse"]
_TRANSPORTS: tuple[str, ...] = get_args(Transport)

STORE_NAME = StoreName(label="tenant server store", application="mcp-client-service", example_file="mcp_client.db")
MIGRATIONS = Migrations(
    Path(__file__).parent / "migrations",
    lock_key=0x6D6370636C69,  # "mcpcli": distinct from agent-service's, should both stores share a database
    # Its own version table, so that the gateway's store may live in the same database as agent-service's.
    version_table="mcp_client_alembic_version",
    command="python -m mcp_client_service.store migrate",
)


class ServerExists(StoreError):
    """The tenant already has a server of this name."""


class TooManyServers(StoreError):
    """The tenant already has as many servers as it may."""


class SecretsKeyMissing(StoreError):
    """Header values are to be stored or read, and no ``MCP_CLIENT_SECRETS_KEY`` is set."""


class SecretsUnreadable(StoreError):
    """Stored header values that none of the keys decrypts: the key they were encrypted with is not among them."""


@dataclass(frozen=True)
class StoredServer:
    """One tenant server, as stored (its header values decrypted)."""

    tenant: str
    name: str
    url: str
    transport: Transport
    headers: Mapping[str, str] = field(repr=False)
    """Decrypted: never logged, never answered."""
    enabled: bool
    allowed_tools: tuple[str, ...] | None
    """The tools of the server its tenant's runs may use; ``None``: all of them."""
    tools: list[dict[str, Any]] | None
    """Its last listing (MCP Tool JSON objects); ``None``: never listed."""
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    headers_problem: str | None = None
    """Why its stored header values (or ``auth`` block) could not be decrypted (``headers`` is then empty): no key
    set, or none of the keys is the one they were encrypted with. ``None``: they were (or it has none)."""
    auth: Mapping[str, Any] | None = field(default=None, repr=False)
    """Its ``auth`` block (OAuth) as written (``wire.ServerAuth`` JSON), decrypted: its client secret is never
    logged nor answered. ``None``: not behind OAuth."""


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()
"""``update``'s default: the field keeps its value."""

_COLUMNS = (
    tenant_servers.c.tenant,
    tenant_servers.c.name,
    tenant_servers.c.url,
    tenant_servers.c.transport,
    tenant_servers.c.headers_encrypted,
    tenant_servers.c.auth_encrypted,
    tenant_servers.c.enabled,
    tenant_servers.c.allowed_tools,
    tenant_servers.c.tools,
    tenant_servers.c.last_error,
    tenant_servers.c.created_at,
    tenant_servers.c.updated_at,
)
_IN_ORDER = (tenant_servers.c.created_at, tenant_servers.c.name)
"""A tenant's servers in the order they were created (the collision policy's order)."""
_KEY_SETTING = "MCP_CLIENT_SECRETS_KEY"

MAX_LISTING_BYTES = 1_000_000
"""The largest listing kept (its tools' compact JSON): every replica reads a changed listing, so one server listing
megabytes of tools must not make every replica read megabytes. A larger one keeps the previous listing, with an
error saying why."""


async def open_tenant_store(url: str, *, secrets: SecretsBox | None, migrate: bool = True) -> TenantServerStore:
    """The store at ``url`` (``sqlite:///path``: the folder is created; ``postgresql://...``). ``migrate``: bring
    the schema to the newest revision first (replicas starting at once take turns); without, a schema at another
    revision is a ``StoreError`` that says what to run. ``secrets``: the keys of header values (``None``: servers
    with headers can be neither stored nor read). ``ValueError`` for a URL the store does not take."""
    database = open_database(database_url(url, STORE_NAME), STORE_NAME)
    try:
        if migrate:
            await MIGRATIONS.upgrade(database)
        else:
            await MIGRATIONS.check(database, migrate_setting="MCP_CLIENT_DATABASE_MIGRATE")
    except BaseException:
        await database.dispose()
        raise
    return TenantServerStore(database, secrets)


class TenantServerStore:
    """Tenant servers on SQLite or PostgreSQL. Use ``open_tenant_store``."""

    def __init__(self, database: Database, secrets: SecretsBox | None) -> None:
        self._db = database
        self._secrets = secrets

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.backend

    @property
    def database(self) -> Database:
        """The store's database, which the OAuth vault (``oauth.vault``) shares."""
        return self._db

    async def close(self) -> None:
        await self._db.dispose()

    async def revision(self) -> int:
        """The registry's revision: it changes with every write of any replica."""
        return await self._db.run("read the registry's revision", _revision_on, write=False)

    async def load_all(self) -> tuple[int, list[StoredServer]]:
        """The revision and every tenant's servers (by tenant, then in creation order), read in one transaction."""

        def load(connection: Connection) -> tuple[int, list[sa.Row[Any]]]:
            # The revision first: on PostgreSQL each statement sees what was committed when it began, so rows newer
            # than the revision only cost one more reload, while the other order could miss a change for good.
            revision = _revision_on(connection)
            rows = connection.execute(sa.select(*_COLUMNS).order_by(tenant_servers.c.tenant, *_IN_ORDER)).all()
            return revision, list(rows)

        revision, rows = await self._db.run("load every tenant's servers", load, write=False)
        return revision, [self._server(row) for row in rows]

    async def changes_since(
        self, revision: int
    ) -> tuple[int, builtins.list[StoredServer], builtins.list[tuple[str, str]]]:
        """What changed after ``revision``: the revision now, the servers written since (in creation order) and the
        (tenant, name) of those deleted since. A server deleted and registered again is in both: apply the
        deletions first."""

        def read(connection: Connection) -> tuple[int, list[sa.Row[Any]], list[tuple[str, str]]]:
            # The revision first, as in load_all: a change committed meanwhile is read again next time, never lost.
            now = _revision_on(connection)
            rows = connection.execute(
                sa.select(*_COLUMNS).where(tenant_servers.c.revision > revision).order_by(*_IN_ORDER)
            ).all()
            deleted = connection.execute(
                sa.select(tenant_server_deletions.c.tenant, tenant_server_deletions.c.name).where(
                    tenant_server_deletions.c.revision > revision
                )
            ).all()
            return now, list(rows), [(row.tenant, row.name) for row in deleted]

        now, rows, deleted = await self._db.run(f"read the changes since revision {revision}", read, write=False)
        return now, [self._server(row) for row in rows], deleted

    async def list(self, tenant: str) -> list[StoredServer]:
        """``tenant``'s servers, in creation order. (Below this method ``list`` names it in the class's
        annotations: they say ``builtins.list``.)"""

        def select(connection: Connection) -> list[sa.Row[Any]]:
            query = sa.select(*_COLUMNS).where(tenant_servers.c.tenant == tenant).order_by(*_IN_ORDER)
            return list(connection.execute(query).all())

        rows = await self._db.run(f"list the servers of tenant {tenant}", select, write=False)
        return [self._server(row) for row in rows]

    async def get(self, tenant: str, name: str) -> StoredServer | None:
        def select(connection: Connection) -> sa.Row[Any] | None:
            return connection.execute(sa.select(*_COLUMNS).where(*_key(tenant, name))).first()

        row = await self._db.run(f"read server {name} of tenant {tenant}", select, write=False)
        return None if row is None else self._server(row)

    async def create(
        self,
        tenant: str,
        name: str,
        url: str,
        transport: Transport,
        headers: Mapping[str, str],
        enabled: bool,
        allowed_tools: Sequence[str] | None,
        *,
        max_servers: int | None,
        auth: Mapping[str, Any] | None = None,
    ) -> StoredServer:
        """Store a new server (never listed yet). ``ServerExists`` when the tenant has one of this name,
        ``TooManyServers`` when it has ``max_servers`` already (``None``: no bound), ``SecretsKeyMissing`` for
        headers without a key."""
        _check_transport(transport)
        sealed = self._seal(headers)
        sealed_auth = self._seal_auth(auth)
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "tenant": tenant,
            "name": name,
            "url": url,
            "transport": transport,
            "headers_encrypted": sealed,
            "auth_encrypted": sealed_auth,
            "enabled": enabled,
            "allowed_tools": None if allowed_tools is None else list(allowed_tools),
            "tools": None,
            "last_error": None,
            "created_at": now,
            "updated_at": now,
        }

        def insert(connection: Connection) -> None:
            # The revision's row first: its lock makes concurrent writers (of every replica) take turns, so that
            # the count below is still true when the row is inserted.
            values["revision"] = _bump(connection)
            if connection.execute(sa.select(sa.literal(1)).where(*_key(tenant, name))).first() is not None:
                raise ServerExists(f"Tenant {tenant} already has a server named {name}.")
            if max_servers is not None:
                count = connection.execute(
                    sa.select(sa.func.count()).select_from(tenant_servers).where(tenant_servers.c.tenant == tenant)
                ).scalar_one()
                if count >= max_servers:
                    raise TooManyServers(
                        f"Tenant {tenant} has {count} servers already, the most it may have ({max_servers})."
                    )
            connection.execute(tenant_servers.insert().values(**values))

        await self._db.run(f"store server {name} of tenant {tenant}", insert, write=True)
        return StoredServer(
            tenant=tenant,
            name=name,
            url=url,
            transport=transport,
            headers=dict(headers),
            enabled=enabled,
            allowed_tools=None if allowed_tools is None else tuple(allowed_tools),
            tools=None,
            last_error=None,
            created_at=now,
            updated_at=now,
            auth=None if auth is None else dict(auth),
        )

    async def update(
        self,
        tenant: str,
        name: str,
        *,
        url: str | _Unchanged = UNCHANGED,
        transport: Transport | _Unchanged = UNCHANGED,
        headers: Mapping[str, str] | _Unchanged = UNCHANGED,
        enabled: bool | _Unchanged = UNCHANGED,
        allowed_tools: Sequence[str] | _Unchanged | None = UNCHANGED,
        auth: Mapping[str, Any] | _Unchanged | None = UNCHANGED,
    ) -> StoredServer | None:
        """Change the fields given (the others keep their values; ``headers`` replaces them all); the server as
        it is then, or ``None`` when the tenant has none of this name."""
        changes: dict[str, Any] = {}
        if not isinstance(url, _Unchanged):
            changes["url"] = url
        if not isinstance(transport, _Unchanged):
            _check_transport(transport)
            changes["transport"] = transport
        if not isinstance(headers, _Unchanged):
            changes["headers_encrypted"] = self._seal(headers)
        if not isinstance(enabled, _Unchanged):
            changes["enabled"] = enabled
        if not isinstance(auth, _Unchanged):
            changes["auth_encrypted"] = self._seal_auth(auth)
        if not isinstance(allowed_tools, _Unchanged):
            changes["allowed_tools"] = None if allowed_tools is None else list(allowed_tools)
        changes["updated_at"] = datetime.now(UTC)

        new_auth = None if isinstance(auth, _Unchanged) or auth is None else dict(auth)

        def change(connection: Connection) -> sa.Row[Any] | None:
            current = connection.execute(
                sa.select(tenant_servers.c.url, tenant_servers.c.auth_encrypted).where(*_key(tenant, name))
            ).first()
            if current is None:
                return None
            # The revision's row first (its lock), then the server's: one order for every write.
            stamped = {**changes, "revision": _bump(connection)}
            moved = not isinstance(url, _Unchanged) and url != current.url
            reauthed = not isinstance(auth, _Unchanged) and new_auth != self._open_auth(current.auth_encrypted)
            if moved or reauthed:
                # In this transaction: no call after the change may carry a token got for the old URL or client.
                forget_oauth_state(connection, tenant, name)
            return connection.execute(
                tenant_servers.update().where(*_key(tenant, name)).values(**stamped).returning(*_COLUMNS)
            ).first()

        row = await self._db.run(f"change server {name} of tenant {tenant}", change, write=True)
        return None if row is None else self._server(row)

    async def delete(self, tenant: str, name: str) -> bool:
        """Remove the server; ``False`` when the tenant has none of this name."""

        def remove(connection: Connection) -> bool:
            if connection.execute(sa.select(sa.literal(1)).where(*_key(tenant, name))).first() is None:
                return False
            # The revision's row before the server's, as every write takes them (the other order could deadlock
            # with a concurrent change of the same server on PostgreSQL).
            revision = _bump(connection)
            removed = connection.execute(tenant_servers.delete().where(*_key(tenant, name))).rowcount == 1
            if removed:
                # A server created again under this name is another server: it inherits no token or registration.
                forget_oauth_state(connection, tenant, name)
                # The deletion's mark (one per name: an earlier one is replaced), read by replicas syncing.
                connection.execute(
                    tenant_server_deletions.delete().where(
                        tenant_server_deletions.c.tenant == tenant, tenant_server_deletions.c.name == name
                    )
                )
                connection.execute(tenant_server_deletions.insert().values(tenant=tenant, name=name, revision=revision))
            return removed

        return await self._db.run(f"delete server {name} of tenant {tenant}", remove, write=True)

    async def record_listing(
        self, tenant: str, name: str, tools: builtins.list[dict[str, Any]] | None, last_error: str | None
    ) -> None:
        """Keep the server's last listing (``tools``: its MCP Tool objects; ``None``: the listing failed, the
        tools listed before stay) and its last error (``None``: none). The revision moves only when the tools
        changed (replicas rebuild catalogs from them); an error alone is read with the server. A server deleted
        meanwhile: nothing happens. A listing larger than ``MAX_LISTING_BYTES`` is not kept: the previous one
        stays, and the error says why."""
        text = None if tools is None else compact_json(tools)
        if text is not None and len(text.encode()) > MAX_LISTING_BYTES:
            size = len(text.encode())
            text, last_error = (
                None,
                (
                    f"its tool listing is {size} bytes of JSON, more than the {MAX_LISTING_BYTES} kept: the tools "
                    "listed before are kept (offer fewer tools, or shorter descriptions and schemas)"
                ),
            )
        # As JSON reads them back, so that an unchanged listing compares equal to the stored one.
        listed = None if text is None else json.loads(text)

        def record(connection: Connection) -> None:
            stored = connection.execute(sa.select(tenant_servers.c.tools).where(*_key(tenant, name))).first()
            if stored is None:
                return
            changes: dict[str, Any] = {"last_error": last_error}
            if listed is not None and listed != stored.tools:
                changes["tools"] = listed
                changes["revision"] = _bump(connection)
            connection.execute(tenant_servers.update().where(*_key(tenant, name)).values(**changes))

        await self._db.run(f"record the tools of server {name} of tenant {tenant}", record, write=True)

    async def rotate_secrets(self) -> int:
        """Encrypt every stored set of header values (and ``auth`` block) again with the first key (after a new key
        was put first), and the OAuth vault's rows with them (tokens, client registrations, pending consents: the
        same keys seal them); the number of servers re-encrypted. ``SecretsUnreadable`` (nothing changed) when a
        row's values are encrypted with none of the keys."""
        secrets = self._secrets
        if secrets is None:
            raise SecretsKeyMissing(f"Header values cannot be re-encrypted: {_KEY_SETTING} is not set.")

        sealed_columns = (tenant_servers.c.headers_encrypted, tenant_servers.c.auth_encrypted)

        def rotate(connection: Connection) -> int:
            rows = connection.execute(
                sa.select(tenant_servers.c.tenant, tenant_servers.c.name, *sealed_columns).where(
                    sa.or_(*(column.is_not(None) for column in sealed_columns))
                )
            ).all()
            for row in rows:
                values = {}
                for column in sealed_columns:
                    token = getattr(row, column.name)
                    if token is None:
                        continue
                    try:
                        values[column.name] = secrets.reseal(token)
                    except InvalidToken:
                        raise _unreadable(row.tenant, row.name) from None
                connection.execute(tenant_servers.update().where(*_key(row.tenant, row.name)).values(**values))
            _reseal_oauth_rows(connection, secrets)
            return len(rows)

        return await self._db.run("re-encrypt the header values of every server", rotate, write=True)

    async def ping(self) -> None:
        """Raises ``StoreError`` when the database does not answer (readiness)."""
        await self.revision()

    def _seal(self, headers: Mapping[str, str]) -> str | None:
        if not headers:
            return None
        if self._secrets is None:
            raise SecretsKeyMissing(
                f"Header values cannot be stored: {_KEY_SETTING} is not set (servers without headers can be)."
            )
        return self._secrets.seal(headers)

    def _seal_auth(self, auth: Mapping[str, Any] | None) -> str | None:
        if auth is None:
            return None
        if self._secrets is None:
            raise SecretsKeyMissing(f"An OAuth server cannot be stored: {_KEY_SETTING} is not set.")
        return self._secrets.seal_json(dict(auth))

    def _open_auth(self, sealed: str | None) -> object:
        """A stored ``auth`` block opened (to compare with a new one); unreadable: a value equal to none."""
        if sealed is None:
            return None
        if self._secrets is None:
            return object()
        try:
            return self._secrets.open_json(sealed)
        except InvalidToken:
            return object()

    def _server(self, row: sa.Row[Any]) -> StoredServer:
        headers: Mapping[str, str] = {}
        auth: Mapping[str, Any] | None = None
        problem = None
        if row.headers_encrypted is not None or row.auth_encrypted is not None:
            if self._secrets is None:
                problem = (
                    f"The header values of server {row.name} of tenant {row.tenant} cannot be decrypted: "
                    f"{_KEY_SETTING} is not set (set the key they were encrypted with)."
                )
            else:
                try:
                    if row.headers_encrypted is not None:
                        headers = self._secrets.open(row.headers_encrypted)
                    if row.auth_encrypted is not None:
                        auth = self._secrets.open_json(row.auth_encrypted)
                except InvalidToken:
                    headers, auth = {}, None
                    problem = str(_unreadable(row.tenant, row.name))
        return StoredServer(
            tenant=row.tenant,
            name=row.name,
            url=row.url,
            transport=row.transport,
            headers=headers,
            enabled=row.enabled,
            allowed_tools=None if row.allowed_tools is None else tuple(row.allowed_tools),
            tools=row.tools,
            last_error=row.last_error,
            created_at=row.created_at,
            updated_at=row.updated_at,
            headers_problem=problem,
            auth=auth,
        )


_OAUTH_SEALED = (
    (oauth_clients, ("client_encrypted",)),
    (oauth_tokens, ("token_encrypted",)),
    (oauth_consents, ("pending_encrypted", "code_encrypted")),
)


def forget_oauth_state(connection: Connection, tenant: str, server: str) -> None:
    """Delete a server's OAuth registration, tokens and pending consents (in ``connection``'s transaction): what
    was got for its URL and ``auth`` block must not serve another (a changed server, or a new one of its name)."""
    for table, _ in _OAUTH_SEALED:
        connection.execute(table.delete().where(table.c.tenant == tenant, table.c.server == server))


def _reseal_oauth_rows(connection: Connection, secrets: SecretsBox) -> None:
    """The OAuth vault's sealed columns, encrypted again with the first key."""
    for table, columns in _OAUTH_SEALED:
        keys = list(table.primary_key.columns)
        for row in connection.execute(sa.select(*keys, *(table.c[name] for name in columns))).all():
            try:
                values = {name: secrets.reseal(row._mapping[name]) for name in columns if row._mapping[name]}
            except InvalidToken:
                raise SecretsUnreadable(f"A row of {table.name} is encrypted with none of the keys.") from None
            where = [key == row._mapping[key.name] for key in keys]
            connection.execute(table.update().where(*where).values(**values))


def _key(tenant: str, name: str) -> tuple[sa.ColumnElement[bool], sa.ColumnElement[bool]]:
    return tenant_servers.c.tenant == tenant, tenant_servers.c.name == name


def _revision_on(connection: Connection) -> int:
    revision: int = connection.execute(
        sa.select(registry_revision.c.revision).where(registry_revision.c.id == REVISION_ROW)
    ).scalar_one()
    return revision


def _bump(connection: Connection) -> int:
    """Move the registry's revision on; the new one, which the rows written in this transaction carry."""
    revision: int = connection.execute(
        registry_revision.update()
        .where(registry_revision.c.id == REVISION_ROW)
        .values(revision=registry_revision.c.revision + 1)
        .returning(registry_revision.c.revision)
    ).scalar_one()
    return revision


def _check_transport(transport: str) -> None:
    if transport not in _TRANSPORTS:
        raise ValueError(f"A tenant server's transport is one of {', '.join(_TRANSPORTS)}, not {transport!r}.")


def _unreadable(tenant: str, name: str) -> SecretsUnreadable:
    return SecretsUnreadable(
        f"The header values of server {name} of tenant {tenant} cannot be decrypted with any key of "
        f"{_KEY_SETTING}: the key they were encrypted with is not among them (after a rotation, keep the old key "
        "after the new one until python -m mcp_client_service.store rotate-key has run)."
    )
