"""What the gateway's OAuth tokens must not outlive, and what several replicas must see of each other (a real
authorization server and protected MCP server of the test's, ``support.oauth_server``):

- a servers-file server whose ``url`` changes on reload forgets its tokens (its new URL never sees them);
- a consent nobody answered is asked afresh before its URL expires (bounded: no storm);
- a refresh or a revocation by another replica (another ``ProviderContext`` over the same vault) is seen by this
  one's sessions: the rotated refresh token is not sent again, the revoked token's session ends;
- what the providers keep per principal goes when its session closes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from cryptography.fernet import Fernet
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from structlog.testing import capture_logs

from mcp_client_service.config.auth import OAuthConfig
from mcp_client_service.oauth import OAuthVault, Principal, ProviderContext
from mcp_client_service.oauth.provider import build_provider
from mcp_client_service.registry.server_registry import ServerRegistry
from mcp_client_service.store import SecretsBox, open_tenant_store
from support.mcp_gateway import WAIT_SECONDS, Gateway, running_gateway
from support.oauth_server import OAuthWorld, protected_echo_server

pytestmark = pytest.mark.anyio

CALLBACK = "/mcp/v1/oauth/callback"
TRACKER = Principal("", "tracker")


def _gateway_settings(tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {"database_url": f"sqlite:///{tmp_path}/gateway.db", "secrets_key": Fernet.generate_key().decode(), **more}


async def _waiting_url(gateway: Gateway, server: str, *, other_than: str | None = None) -> str:
    def waiting(registry: ServerRegistry) -> bool:
        consent = registry.connections[server].consent
        return consent is not None and consent.authorization_url != other_than

    with anyio.fail_after(WAIT_SECONDS):
        await gateway.registry.wait_until(waiting)
    consent = gateway.registry.connections[server].consent
    assert consent is not None
    return consent.authorization_url


async def _person_consents(authorization_url: str) -> dict[str, str]:
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:
        answer = await browser.get(authorization_url)
    assert answer.status_code == 302
    return dict(httpx.URL(answer.headers["location"]).params)


async def test_a_servers_file_server_moved_to_another_url_on_reload_forgets_its_tokens(tmp_path: Path) -> None:
    async with protected_echo_server() as first, protected_echo_server() as second:
        servers = {"tracker": {"url": first.mcp_url, "auth": {"type": "oauth"}}}
        async with running_gateway(servers, **_gateway_settings(tmp_path)) as gateway:
            redirect = await _person_consents(await _waiting_url(gateway, "tracker"))
            done = await gateway.http.post(CALLBACK, json=redirect)
            assert done.status_code == 200, done.text
            await gateway.wait_until_ready("tracker")
            assert (await gateway.http.get("/mcp/v1/oauth/connections")).json()["connections"]

            gateway.write_servers({"tracker": {"url": second.mcp_url, "auth": {"type": "oauth"}}})
            assert (await gateway.http.post("/mcp/v1/servers/reload")).status_code == 200
            await _waiting_url(gateway, "tracker")  # the moved server asks its own consent

            assert (await gateway.http.get("/mcp/v1/oauth/connections")).json()["connections"] == []
            assert not set(second.bearers) & set(first.issued), "a token went to the server's new URL"


async def test_a_consent_left_unanswered_is_asked_afresh_before_its_url_expires(tmp_path: Path) -> None:
    async with protected_echo_server() as world:
        servers = {"tracker": {"url": world.mcp_url, "auth": {"type": "oauth"}}}
        settings = _gateway_settings(tmp_path, oauth_consent_seconds=2)
        with capture_logs() as logs:
            async with running_gateway(servers, **settings) as gateway:
                stale = await _waiting_url(gateway, "tracker")
                fresh = await _waiting_url(gateway, "tracker", other_than=stale)
                status = (await gateway.http.get("/mcp/v1/servers")).json()["servers"][0]
                assert status["authorization"]["authorizationUrl"] == fresh

                done = await gateway.http.post(CALLBACK, json=await _person_consents(fresh))
                assert done.status_code == 200, done.text
                await gateway.wait_until_ready("tracker")
        events = [line["event"] for line in logs]
        # Bounded: one fresh consent for the one that expired, then the connect that serves; no loop.
        assert events.count("mcp_server_consent_expired") == 1
        assert events.count("mcp_server_connecting") <= 3, "the server reconnected in a loop"
        # An expired consent is no step-up: the count starts again (else the step-up limit would fail the server
        # after a few unanswered consents). A connect asks at most two: its first request and the protocol fallback.
        assert max(line["attempt"] for line in logs if line["event"] == "oauth_consent_required") <= 2


class _Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def world() -> AsyncIterator[OAuthWorld]:
    async with protected_echo_server() as world:
        yield world


@pytest.fixture
async def vault(tmp_path: Path, world: OAuthWorld) -> AsyncIterator[tuple[OAuthVault, _Clock]]:
    """One store of two replicas, holding the tracker's registration and a token from its authorization server."""
    store = await open_tenant_store(f"sqlite:///{tmp_path}/gateway.db", secrets=None)
    clock = _Clock()
    vault = OAuthVault(store.database, SecretsBox([Fernet.generate_key().decode()]), clock=clock)
    async with httpx.AsyncClient(timeout=10) as http:
        registered = await http.post(f"{world.base_url}/register", json={"redirect_uris": ["https://cb.example/"]})
    await vault.store_client_info("", "tracker", OAuthClientInformationFull.model_validate(registered.json()))
    await vault.storage(TRACKER, world.mcp_url).set_tokens(OAuthToken.model_validate(world._issue("echo")))
    try:
        yield vault, clock
    finally:
        await store.close()


def _replica(vault: OAuthVault, token_check_seconds: float) -> ProviderContext:
    return ProviderContext(
        lambda: vault,
        redirect_url="https://cb.example/",
        client_name="gateway",
        client_metadata_url="",
        step_up_limit=3,
        token_check_seconds=token_check_seconds,
    )


async def _request(provider: Any, world: OAuthWorld) -> None:
    """One request of a session (what the server answers past the bearer check does not matter here)."""
    async with httpx2.AsyncClient(auth=provider, timeout=10) as http:
        await http.post(world.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})


async def test_a_refresh_by_another_replica_is_seen_and_its_rotated_refresh_token_not_sent_again(
    world: OAuthWorld, vault: tuple[OAuthVault, _Clock]
) -> None:
    store, clock = vault
    here = build_provider(_replica(store, 3600), TRACKER, world.mcp_url, OAuthConfig())
    await _request(here, world)
    first = world.bearers[-1]

    clock.now += timedelta(hours=2)  # the token expired: the other replica refreshes it (rotating the refresh token)
    other = build_provider(_replica(store, 3600), TRACKER, world.mcp_url, OAuthConfig())
    await _request(other, world)
    assert world.grants == ["refresh_token"]
    refreshed = world.bearers[-1]
    assert refreshed != first

    here.context.token_expiry_time = 1.0  # this replica's copy expires too: it reads the vault before refreshing
    await _request(here, world)
    assert world.grants == ["refresh_token"], "the rotated refresh token was sent again"
    assert world.bearers[-1] == refreshed


async def test_a_token_changed_or_revoked_on_another_replica_is_seen_within_the_check_period(
    world: OAuthWorld, vault: tuple[OAuthVault, _Clock]
) -> None:
    store, clock = vault
    here = build_provider(_replica(store, 0), TRACKER, world.mcp_url, OAuthConfig())
    gone: list[bool] = []
    here.on_token_gone = lambda: gone.append(True)
    await _request(here, world)
    first = world.bearers[-1]

    clock.now += timedelta(hours=2)
    await _request(build_provider(_replica(store, 0), TRACKER, world.mcp_url, OAuthConfig()), world)
    refreshed = world.bearers[-1]
    await _request(here, world)
    assert world.bearers[-1] == refreshed != first  # its row changed: reloaded, though its copy was still valid

    assert await store.revoke("", "tracker", "")  # on the other replica
    sent = len(world.bearers)
    await _request(here, world)
    assert len(world.bearers) == sent, "the revoked token was sent"
    assert gone == [True]


async def test_what_is_kept_for_a_principal_goes_when_its_session_closes(tmp_path: Path) -> None:
    async with protected_echo_server() as world:
        servers = {"tracker": {"url": world.mcp_url, "auth": {"type": "oauth"}}}
        async with running_gateway(servers, **_gateway_settings(tmp_path)) as gateway:
            await _waiting_url(gateway, "tracker")
            context = gateway.registry.oauth
            assert context is not None
            gateway.write_servers({})
            assert (await gateway.http.post("/mcp/v1/servers/reload")).status_code == 200
            with anyio.fail_after(WAIT_SECONDS):
                await gateway.registry.wait_until(lambda registry: not registry.retiring)
            assert context.kept() == 0  # nothing is kept of its closed connection
