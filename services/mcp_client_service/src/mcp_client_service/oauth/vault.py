"""The OAuth vault: tokens, client registrations and pending consents of OAuth-protected servers, in the gateway's
own store (``oauth_tokens``, ``oauth_clients``, ``oauth_consents``), every secret sealed with the store's
``SecretsBox`` (Fernet, ``MCP_CLIENT_SECRETS_KEY``).

A token belongs to a ``Principal`` (tenant, server, user). ``storage(principal)`` is the SDK's ``TokenStorage``
over it (what ``OAuthClientProvider`` reads and writes); ``connections`` lists what is held without ever the token;
``revoke`` forgets one. A consent the gateway cannot complete in-process (the person is elsewhere) is kept as a
pending consent under its ``state`` until the callback brings the code (``start_consent``, ``complete_consent``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from cryptography.fernet import InvalidToken
from mcp.client.auth import TokenStorage
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from sqlalchemy import Connection

from mcp_client_service.oauth.principal import Principal
from mcp_client_service.store.schema import oauth_clients, oauth_consents, oauth_tokens
from mcp_client_service.store.secrets import SecretsBox
from mcp_client_service.store.tenant_servers import forget_oauth_state
from suite_common.logging import get_logger
from suite_common.sql import Database

__all__ = ["OAuthConnection", "OAuthVault", "PendingConsent", "StoredToken", "VaultTokenStorage"]

_log = get_logger("mcp_client_service.oauth.vault")

_REFRESH_MARGIN_SECONDS = 60
"""A token this close to its expiry is handed out as expired, so the provider refreshes it before a server refuses
it."""

_REVOCATION = "revocation_endpoint"
"""Kept beside the token in its sealed JSON (the SDK's ``OAuthToken`` ignores the key)."""

_RESOURCE = "resource_url"
"""The URL of the server the token was got for, kept beside it (sealed): a token is never sent to another URL (a
server's ``url`` changed, by a tenant admin or in the servers file, must not carry its users' tokens elsewhere)."""


@dataclass(frozen=True)
class OAuthConnection:
    """One principal's token as the API shows it: never the token itself."""

    tenant: str
    server: str
    user: str
    scopes: tuple[str, ...]
    expires_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class StoredToken:
    """A principal's token, decrypted (never logged, never answered), with its absolute expiry."""

    token: OAuthToken = field(repr=False)
    expires_at: datetime | None
    revocation_endpoint: str | None = None
    """Where the authorization server takes the token back (RFC 7009), when it said so at consent."""
    resource_url: str | None = None
    """The URL of the server it was got for (``None``: not recorded, never handed to a session)."""
    updated_at: datetime | None = None
    """When the row last changed: a refresh or a consent on any replica changes it."""


@dataclass(frozen=True)
class PendingConsent:
    """What completing an authorization-code consent needs, kept sealed under its ``state`` until the callback."""

    code_verifier: str = field(repr=False)
    redirect_uri: str
    token_endpoint: str
    scope: str | None = None
    resource: str | None = None
    issuer: str | None = None
    """The authorization server's issuer (RFC 9207: the callback's ``iss`` must name it when it supports it)."""
    iss_required: bool = False
    revocation_endpoint: str | None = None
    binding: str | None = field(default=None, repr=False)
    """The hash of the asking browser's nonce (``OAuthAuthorizeRequest.binding``): the callback must bring it.
    ``None``: an unbound consent (asked through the gateway's own API, or by a session)."""
    server_url: str | None = None
    """The URL of the server the consent is for: the token got is bound to it (``_RESOURCE``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "code_verifier": self.code_verifier,
            "redirect_uri": self.redirect_uri,
            "token_endpoint": self.token_endpoint,
            "scope": self.scope,
            "resource": self.resource,
            "issuer": self.issuer,
            "iss_required": self.iss_required,
            "revocation_endpoint": self.revocation_endpoint,
            "binding": self.binding,
            "server_url": self.server_url,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> PendingConsent:
        known: dict[str, Any] = {key: value[key] for key in cls.__dataclass_fields__ if key in value}
        return cls(**known)


class VaultTokenStorage(TokenStorage):
    """The SDK's ``TokenStorage`` of one principal: its token, and its server's client registration (shared by
    every user of the server: a registration is the gateway's, not a person's). With ``resource_url`` (a session's
    storage) only a token got for that URL is handed out, and a token stored is bound to it."""

    def __init__(self, vault: OAuthVault, principal: Principal, resource_url: str | None = None) -> None:
        self._vault = vault
        self.principal = principal
        self.resource_url = resource_url
        self.loaded_at: datetime | None = None
        """The ``updated_at`` of the row the last ``get_tokens`` read (``None``: none was held)."""

    async def get_tokens(self) -> OAuthToken | None:
        stored = await self._vault.token(self.principal, resource_url=self.resource_url)
        self.loaded_at = None if stored is None else stored.updated_at
        if stored is None:
            return None
        token = stored.token.model_copy()
        if stored.expires_at is not None:
            # expires_in is relative: what remains now (less a margin, so a refresh comes before the expiry).
            remaining = (stored.expires_at - self._vault.now()).total_seconds() - _REFRESH_MARGIN_SECONDS
            token.expires_in = max(0, int(remaining))
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.loaded_at = await self._vault.store_token(self.principal, tokens, resource_url=self.resource_url)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return await self._vault.client_info(self.principal.tenant, self.principal.server)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._vault.store_client_info(self.principal.tenant, self.principal.server, client_info)


class OAuthVault:
    """OAuth secrets in the gateway's store (SQLite or PostgreSQL), sealed with ``secrets``."""

    def __init__(
        self,
        database: Database,
        secrets_box: SecretsBox,
        *,
        consent_seconds: float = 600.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._db = database
        self._box = secrets_box
        self._consent_seconds = consent_seconds
        self._clock = clock

    def now(self) -> datetime:
        return self._clock()

    @property
    def consent_seconds(self) -> float:
        """How long a pending consent's authorization URL stays usable (``MCP_CLIENT_OAUTH_CONSENT_SECONDS``)."""
        return self._consent_seconds

    def storage(self, principal: Principal, resource_url: str | None = None) -> VaultTokenStorage:
        """The SDK's ``TokenStorage`` of ``principal`` (a session's: bound to its server's ``resource_url``)."""
        return VaultTokenStorage(self, principal, resource_url)

    # Tokens

    async def token(self, principal: Principal, *, resource_url: str | None = None) -> StoredToken | None:
        """``principal``'s token; ``None`` when none is held or it no longer decrypts (logged, then treated as
        absent: a new consent replaces it). ``resource_url`` given: ``None`` too when the token was got for
        another URL (or none recorded) — never send a token where it was not meant to go."""

        def select(connection: Connection) -> sa.Row[Any] | None:
            query = sa.select(
                oauth_tokens.c.token_encrypted, oauth_tokens.c.expires_at, oauth_tokens.c.updated_at
            ).where(*_token_key(principal))
            return connection.execute(query).first()

        row = await self._db.run(f"read the OAuth token of {principal.describe()}", select, write=False)
        if row is None:
            return None
        try:
            sealed = self._box.open_json(row.token_encrypted)
            token = OAuthToken.model_validate(sealed)
        except (InvalidToken, ValueError):
            _log.warning("oauth_token_unreadable", principal=principal.describe())
            return None
        bound = sealed.get(_RESOURCE)
        if resource_url is not None and bound != resource_url:
            # The server's URL changed since (or the row predates the binding): a new consent is asked instead.
            _log.warning("oauth_token_for_another_url", principal=principal.describe())
            return None
        return StoredToken(
            token=token,
            expires_at=row.expires_at,
            revocation_endpoint=sealed.get(_REVOCATION),
            resource_url=bound if isinstance(bound, str) else None,
            updated_at=row.updated_at,
        )

    async def token_stamp(self, principal: Principal) -> datetime | None:
        """When ``principal``'s token row last changed (``None``: none is held): one indexed read of no secret,
        how a session notices a refresh, consent or revocation done by another replica."""

        def select(connection: Connection) -> datetime | None:
            query = sa.select(oauth_tokens.c.updated_at).where(*_token_key(principal))
            stamp: datetime | None = connection.execute(query).scalar_one_or_none()
            return stamp

        return await self._db.run(f"check the OAuth token of {principal.describe()}", select, write=False)

    async def store_token(
        self,
        principal: Principal,
        token: OAuthToken,
        *,
        revocation_endpoint: str | None = None,
        resource_url: str | None = None,
    ) -> datetime:
        """Keep ``token`` (sealed) as ``principal``'s, replacing any other; when (its ``updated_at``).
        ``revocation_endpoint`` / ``resource_url`` (the server's URL it is for): unset, the ones kept with the token
        it replaces (a refresh)."""
        now = self.now()
        expires_at = None if token.expires_in is None else now + timedelta(seconds=int(token.expires_in))
        plain = token.model_dump(mode="json", exclude_none=True)
        values = {"scopes": token.scope, "expires_at": expires_at, "updated_at": now}

        def upsert(connection: Connection) -> None:
            kept: dict[str, Any] = {_REVOCATION: revocation_endpoint, _RESOURCE: resource_url}
            if revocation_endpoint is None or resource_url is None:
                query = sa.select(oauth_tokens.c.token_encrypted).where(*_token_key(principal))
                previous = self._kept(connection.execute(query).scalar_one_or_none())
                kept = {key: value if value is not None else previous.get(key) for key, value in kept.items()}
            extra = {key: value for key, value in kept.items() if isinstance(value, str)}
            values["token_encrypted"] = self._box.seal_json({**plain, **extra})
            updated = connection.execute(oauth_tokens.update().where(*_token_key(principal)).values(**values))
            if updated.rowcount == 0:
                key = {"tenant": principal.tenant, "server": principal.server, "user": principal.user}
                connection.execute(oauth_tokens.insert().values(**key, **values))

        await self._db.run(f"store the OAuth token of {principal.describe()}", upsert, write=True)
        _log.info("oauth_token_stored", principal=principal.describe(), scopes=token.scope, expires_at=expires_at)
        return now

    def _kept(self, sealed: str | None) -> dict[str, Any]:
        """What a token's sealed JSON keeps beside the token (its revocation endpoint, its server's URL)."""
        if sealed is None:
            return {}
        try:
            opened = self._box.open_json(sealed)
        except (InvalidToken, ValueError):
            return {}
        return {key: opened.get(key) for key in (_REVOCATION, _RESOURCE)} if isinstance(opened, dict) else {}

    async def connections(
        self, tenant: str | None = None, server: str | None = None, user: str | None = None
    ) -> list[OAuthConnection]:
        """The tokens held (never the token: whose, its scopes, its expiry), filtered by what is given."""
        conditions = [
            column == value
            for column, value in (
                (oauth_tokens.c.tenant, tenant),
                (oauth_tokens.c.server, server),
                (oauth_tokens.c.user, user),
            )
            if value is not None
        ]

        def select(connection: Connection) -> list[sa.Row[Any]]:
            query = (
                sa.select(
                    oauth_tokens.c.tenant,
                    oauth_tokens.c.server,
                    oauth_tokens.c.user,
                    oauth_tokens.c.scopes,
                    oauth_tokens.c.expires_at,
                    oauth_tokens.c.updated_at,
                )
                .where(*conditions)
                .order_by(oauth_tokens.c.tenant, oauth_tokens.c.server, oauth_tokens.c.user)
            )
            return list(connection.execute(query).all())

        rows = await self._db.run("list the OAuth connections", select, write=False)
        return [
            OAuthConnection(
                tenant=row.tenant,
                server=row.server,
                user=row.user,
                scopes=tuple((row.scopes or "").split()),
                expires_at=row.expires_at,
                updated_at=row.updated_at,
            )
            for row in rows
        ]

    async def revoke(self, tenant: str, server: str, user: str) -> bool:
        """Forget the principal's token (and its pending consents); ``False`` when none was held. Calling the
        authorization server's revocation endpoint is the caller's (``consents.ConsentFlow.revoke``)."""
        principal = Principal(tenant, server, user)

        def delete(connection: Connection) -> bool:
            connection.execute(oauth_consents.delete().where(*_consent_owner(principal)))
            return connection.execute(oauth_tokens.delete().where(*_token_key(principal))).rowcount > 0

        forgotten = await self._db.run(f"forget the OAuth token of {principal.describe()}", delete, write=True)
        if forgotten:
            _log.info("oauth_token_revoked", principal=principal.describe())
        return forgotten

    # Client registrations

    async def client_info(self, tenant: str, server: str) -> OAuthClientInformationFull | None:
        def select(connection: Connection) -> str | None:
            query = sa.select(oauth_clients.c.client_encrypted).where(*_client_key(tenant, server))
            sealed: str | None = connection.execute(query).scalar_one_or_none()
            return sealed

        sealed = await self._db.run(f"read the OAuth client of server {server}", select, write=False)
        if sealed is None:
            return None
        try:
            return OAuthClientInformationFull.model_validate(self._box.open_json(sealed))
        except (InvalidToken, ValueError):
            _log.warning("oauth_client_unreadable", tenant=tenant, server=server)
            return None

    async def store_client_info(self, tenant: str, server: str, client: OAuthClientInformationFull) -> None:
        values = {
            "client_encrypted": self._box.seal_json(client.model_dump(mode="json", exclude_none=True)),
            "updated_at": self.now(),
        }

        def upsert(connection: Connection) -> None:
            updated = connection.execute(oauth_clients.update().where(*_client_key(tenant, server)).values(**values))
            if updated.rowcount == 0:
                connection.execute(oauth_clients.insert().values(tenant=tenant, server=server, **values))

        await self._db.run(f"store the OAuth client of server {server}", upsert, write=True)

    async def forget_server(self, tenant: str, server: str) -> None:
        """Forget everything of a server (its registration, every token, every pending consent): it was deleted,
        or its ``auth`` changed so that what is held belongs to another client."""

        def delete(connection: Connection) -> None:
            forget_oauth_state(connection, tenant, server)

        await self._db.run(f"forget the OAuth state of server {server}", delete, write=True)
        _log.info("oauth_server_forgotten", tenant=tenant, server=server)

    # Pending consents

    async def start_consent(self, principal: Principal, pending: PendingConsent) -> str:
        """Keep ``pending`` until the callback; its ``state`` (random, unguessable). Expired consents go."""
        state = secrets.token_urlsafe(32)
        now = self.now()
        values = {
            "state": state,
            "tenant": principal.tenant,
            "server": principal.server,
            "user": principal.user,
            "pending_encrypted": self._box.seal_json(pending.to_json()),
            "created_at": now,
            "expires_at": now + timedelta(seconds=self._consent_seconds),
        }

        def insert(connection: Connection) -> None:
            connection.execute(oauth_consents.delete().where(oauth_consents.c.expires_at < now))
            connection.execute(oauth_consents.insert().values(**values))

        await self._db.run(f"start a consent of {principal.describe()}", insert, write=True)
        return state

    async def latest_pending(self, principal: Principal) -> PendingConsent | None:
        """``principal``'s most recent consent still waiting for its callback (unused, unexpired); ``None``: none.
        A step-up's consent asks a wider scope than a fresh one would: a fresh consent asks at least this one's."""
        now = self.now()

        def select(connection: Connection) -> str | None:
            query = (
                sa.select(oauth_consents.c.pending_encrypted)
                .where(
                    *_consent_owner(principal),
                    oauth_consents.c.code_encrypted.is_(None),
                    oauth_consents.c.expires_at >= now,
                )
                .order_by(oauth_consents.c.created_at.desc())
                .limit(1)
            )
            sealed: str | None = connection.execute(query).scalar_one_or_none()
            return sealed

        sealed = await self._db.run(f"read the pending consent of {principal.describe()}", select, write=False)
        if sealed is None:
            return None
        try:
            return PendingConsent.from_json(self._box.open_json(sealed))
        except (InvalidToken, ValueError, TypeError):
            return None

    async def complete_consent(self, state: str, code: str) -> tuple[Principal, PendingConsent] | None:
        """The consent of ``state``, now used (``code`` kept sealed with it): ``None`` when unknown, expired or
        already used — each state completes at most once."""
        now = self.now()
        sealed_code = self._box.seal_json(code)

        def take(connection: Connection) -> sa.Row[Any] | None:
            row = connection.execute(
                sa.select(
                    oauth_consents.c.tenant,
                    oauth_consents.c.server,
                    oauth_consents.c.user,
                    oauth_consents.c.pending_encrypted,
                ).where(
                    oauth_consents.c.state == state,
                    oauth_consents.c.code_encrypted.is_(None),
                    oauth_consents.c.expires_at >= now,
                )
            ).first()
            if row is None:
                return None
            # Only the first of two racing callbacks updates the row (the same condition in the UPDATE).
            taken = connection.execute(
                oauth_consents.update()
                .where(oauth_consents.c.state == state, oauth_consents.c.code_encrypted.is_(None))
                .values(code_encrypted=sealed_code)
            ).rowcount
            return row if taken == 1 else None

        row = await self._db.run("complete a consent", take, write=True)
        if row is None:
            return None
        try:
            pending = PendingConsent.from_json(self._box.open_json(row.pending_encrypted))
        except (InvalidToken, ValueError, TypeError):
            return None
        return Principal(row.tenant, row.server, row.user), pending


def _token_key(principal: Principal) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        oauth_tokens.c.tenant == principal.tenant,
        oauth_tokens.c.server == principal.server,
        oauth_tokens.c.user == principal.user,
    )


def _consent_owner(principal: Principal) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        oauth_consents.c.tenant == principal.tenant,
        oauth_consents.c.server == principal.server,
        oauth_consents.c.user == principal.user,
    )


def _client_key(tenant: str, server: str) -> tuple[sa.ColumnElement[bool], ...]:
    return oauth_clients.c.tenant == tenant, oauth_clients.c.server == server
