"""The gateway's OAuth vault on both backends: tokens, client registrations and pending consents sealed at rest,
whose token is whose, a consent completing once."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from mcp_client_service.oauth import OAuthVault, PendingConsent, Principal
from mcp_client_service.store import SecretsBox, TenantServerStore, open_tenant_store
from mcp_client_service.store.schema import oauth_clients, oauth_consents, oauth_tokens
from support.databases import fresh_database

pytestmark = pytest.mark.anyio

ACCESS = "acc3ss-t0ken-never-at-rest"
REFRESH = "r3fresh-t0ken-never-at-rest"
VERIFIER = "v" * 64


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of the test's own: its rows are sealed with keys of its own, which a key rotation of another
    test's rows on a shared database could not read."""
    with fresh_database(request.param, tmp_path, "gateway_oauth") as url:
        yield url


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[TenantServerStore]:
    opened = await open_tenant_store(store_url, secrets=None)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def vault(store: TenantServerStore, clock: Clock) -> OAuthVault:
    box = SecretsBox([Fernet.generate_key().decode()])
    return OAuthVault(store.database, box, consent_seconds=600, clock=clock)


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


async def raw_rows(store: TenantServerStore, table: sa.Table) -> str:
    def read(connection: sa.Connection) -> str:
        return repr(connection.execute(sa.select(table)).all())

    return await store.database.run("read raw rows", read, write=False)


async def test_a_token_is_sealed_at_rest_and_reads_back_for_its_principal_only(
    vault: OAuthVault, store: TenantServerStore, tenant: str
) -> None:
    alice = Principal(tenant, "tracker", "alice")
    storage = vault.storage(alice)
    await storage.set_tokens(OAuthToken(access_token=ACCESS, refresh_token=REFRESH, expires_in=3600, scope="a b"))

    token = await storage.get_tokens()
    assert token is not None
    assert token.access_token == ACCESS
    assert token.refresh_token == REFRESH
    assert await vault.storage(Principal(tenant, "tracker", "bob")).get_tokens() is None
    assert await vault.storage(Principal(tenant, "tracker")).get_tokens() is None
    rows = await raw_rows(store, oauth_tokens)
    assert ACCESS not in rows
    assert REFRESH not in rows
    [connection] = await vault.connections(tenant=tenant)
    assert (connection.server, connection.user, connection.scopes) == ("tracker", "alice", ("a", "b"))
    assert ACCESS not in repr(connection)


async def test_a_token_near_its_expiry_is_handed_out_expired_so_the_provider_refreshes_it(
    vault: OAuthVault, clock: Clock, tenant: str
) -> None:
    storage = vault.storage(Principal(tenant, "tracker"))
    await storage.set_tokens(OAuthToken(access_token=ACCESS, refresh_token=REFRESH, expires_in=3600))
    fresh = await storage.get_tokens()
    assert fresh is not None
    assert fresh.expires_in is not None
    assert 3400 < fresh.expires_in < 3600
    clock.now += timedelta(seconds=3590)
    near = await storage.get_tokens()
    assert near is not None
    assert near.expires_in == 0


async def test_revoking_forgets_only_that_principals_token(vault: OAuthVault, tenant: str) -> None:
    for user in ("alice", "bob"):
        await vault.storage(Principal(tenant, "tracker", user)).set_tokens(OAuthToken(access_token=f"{user}-t"))
    assert await vault.revoke(tenant, "tracker", "alice") is True
    assert await vault.revoke(tenant, "tracker", "alice") is False
    assert [c.user for c in await vault.connections(tenant=tenant)] == ["bob"]


async def test_a_client_registration_is_sealed_and_shared_by_the_servers_users(
    vault: OAuthVault, store: TenantServerStore, tenant: str
) -> None:
    client = OAuthClientInformationFull(client_id="gateway", client_secret="cl1ent-s3cret", redirect_uris=None)
    await vault.storage(Principal(tenant, "tracker", "alice")).set_client_info(client)
    shared = await vault.storage(Principal(tenant, "tracker", "bob")).get_client_info()
    assert shared is not None
    assert shared.client_secret == "cl1ent-s3cret"
    assert "cl1ent-s3cret" not in await raw_rows(store, oauth_clients)


async def test_a_consent_completes_once_and_not_after_it_expired(
    vault: OAuthVault, store: TenantServerStore, clock: Clock, tenant: str
) -> None:
    alice = Principal(tenant, "tracker", "alice")
    pending = PendingConsent(code_verifier=VERIFIER, redirect_uri="http://cb", token_endpoint="http://as/token")
    state = await vault.start_consent(alice, pending)
    assert VERIFIER not in await raw_rows(store, oauth_consents)

    assert await vault.complete_consent(state, "c0de") == (alice, pending)
    assert await vault.complete_consent(state, "c0de") is None
    assert "c0de" not in await raw_rows(store, oauth_consents)

    late = await vault.start_consent(alice, pending)
    clock.now += timedelta(seconds=601)
    assert await vault.complete_consent(late, "c0de") is None
    assert await vault.complete_consent("no-such-state", "c0de") is None


async def test_a_key_rotation_re_encrypts_the_vaults_rows_too(store_url: str, tenant: str) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    alice = Principal(tenant, "tracker", "alice")
    before = await open_tenant_store(store_url, secrets=SecretsBox([old]))
    try:
        await OAuthVault(before.database, SecretsBox([old])).storage(alice).set_tokens(OAuthToken(access_token=ACCESS))
    finally:
        await before.close()
    rotating = await open_tenant_store(store_url, secrets=SecretsBox([new, old]))
    try:
        await rotating.rotate_secrets()
        token = await OAuthVault(rotating.database, SecretsBox([new])).storage(alice).get_tokens()
    finally:
        await rotating.close()
    assert token is not None
    assert token.access_token == ACCESS


async def _holds_anything(store: TenantServerStore, tenant: str, server: str) -> bool:
    """Whether the vault holds a token, a registration or a pending consent of the server."""

    def count(connection: sa.Connection) -> int:
        return sum(
            connection.execute(
                sa.select(sa.func.count()).select_from(table).where(table.c.tenant == tenant, table.c.server == server)
            ).scalar_one()
            for table in (oauth_tokens, oauth_clients, oauth_consents)
        )

    return await store.database.run("count the server's rows", count, write=False) > 0


async def _authorize(vault: OAuthVault, tenant: str, server: str) -> None:
    """What a server's users got: a token each, the gateway's registration, a pending consent."""
    for user in ("alice", "bob"):
        await vault.storage(Principal(tenant, server, user), "https://tracker.example/mcp").set_tokens(
            OAuthToken(access_token=ACCESS, refresh_token=REFRESH)
        )
    client = OAuthClientInformationFull(client_id="c-1", redirect_uris=None)
    await vault.store_client_info(tenant, server, client)
    pending = PendingConsent(code_verifier=VERIFIER, redirect_uri="https://cb", token_endpoint="https://as/token")
    await vault.start_consent(Principal(tenant, server, "carol"), pending)


async def test_changing_a_tenant_servers_url_or_auth_or_deleting_it_forgets_its_tokens_registration_and_consents(
    store_url: str, tenant: str
) -> None:
    box = SecretsBox([Fernet.generate_key().decode()])
    store = await open_tenant_store(store_url, secrets=box)
    try:
        vault = OAuthVault(store.database, box)
        auth = {"type": "oauth", "tokens": "perUser"}
        for name in ("moved", "reauthed", "kept", "deleted"):
            await store.create(
                tenant, name, "https://tracker.example/mcp", "streamable-http", {}, True, None, max_servers=None,
                auth=auth,
            )  # fmt: skip
            await _authorize(vault, tenant, name)

        # Changes that keep the URL and the auth block keep what is held (a re-sent identical block included).
        await store.update(tenant, "kept", enabled=False, allowed_tools=["echo"], auth=dict(auth))
        await store.update(tenant, "kept", url="https://tracker.example/mcp")
        assert await _holds_anything(store, tenant, "kept")

        await store.update(tenant, "moved", url="https://attacker.example/mcp")
        assert not await _holds_anything(store, tenant, "moved")
        await store.update(tenant, "reauthed", auth={**auth, "clientId": "another"})
        assert not await _holds_anything(store, tenant, "reauthed")

        assert await store.delete(tenant, "deleted")
        await store.create(tenant, "deleted", "https://tracker.example/mcp", "streamable-http", {}, True, None,
                           max_servers=None, auth=auth)  # fmt: skip
        assert not await _holds_anything(store, tenant, "deleted")  # the new server of that name inherits nothing
    finally:
        await store.close()


async def test_a_token_is_handed_only_to_a_session_of_the_url_it_was_got_for(vault: OAuthVault, tenant: str) -> None:
    alice = Principal(tenant, "tracker", "alice")
    await vault.storage(alice, "https://tracker.example/mcp").set_tokens(OAuthToken(access_token=ACCESS))
    assert await vault.storage(alice, "https://attacker.example/mcp").get_tokens() is None
    held = await vault.storage(alice, "https://tracker.example/mcp").get_tokens()
    assert held is not None
    assert held.access_token == ACCESS
    # A refresh keeps the binding (the SDK stores the new token through the same storage).
    await vault.storage(alice, "https://tracker.example/mcp").set_tokens(OAuthToken(access_token="refreshed"))
    assert await vault.storage(alice, "https://attacker.example/mcp").get_tokens() is None
    # A token stored with no URL recorded is never handed to a session.
    await vault.storage(Principal(tenant, "tracker", "bob")).set_tokens(OAuthToken(access_token="unbound"))
    assert await vault.storage(Principal(tenant, "tracker", "bob"), "https://tracker.example/mcp").get_tokens() is None
