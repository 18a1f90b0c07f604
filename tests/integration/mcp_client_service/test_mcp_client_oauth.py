"""OAuth to a protected MCP server (a real authorization server and MCP server of the test's, ``support.oauth_server``):
a machine server waits for its consent, the callback completes it, the token is sealed at rest, refreshed before it
expires, revocable; no token, code or verifier in any log line or answer."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from pydantic import SecretStr
from structlog.testing import capture_logs

from mcp_client_service.app import create_app
from mcp_client_service.config.servers_file import ServersFile, parse_servers_config
from mcp_client_service.registry.server_registry import ServerRegistry
from mcp_client_service.settings import MCPClientSettings
from support.mcp_gateway import GATEWAY_SECRET, WAIT_SECONDS, Gateway, echo_http_server, running_gateway
from support.oauth_server import OAuthWorld, protected_echo_server

pytestmark = pytest.mark.anyio

CALLBACK = "/mcp/v1/oauth/callback"


def _gateway_settings(tmp_path: Path) -> dict[str, Any]:
    return {"database_url": f"sqlite:///{tmp_path}/gateway.db", "secrets_key": Fernet.generate_key().decode()}


async def _waiting_url(gateway: Gateway, server: str) -> str:
    def waiting(registry: ServerRegistry) -> bool:
        return registry.connections[server].consent is not None

    with anyio.fail_after(WAIT_SECONDS):
        await gateway.registry.wait_until(waiting)
    consent = gateway.registry.connections[server].consent
    assert consent is not None
    return consent.authorization_url


async def _person_consents(authorization_url: str) -> dict[str, str]:
    """What the person's browser brings back: the redirect's query (code and state, or the error)."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:
        answer = await browser.get(authorization_url)
    assert answer.status_code == 302
    return {name: values[0] for name, values in parse_qs(urlsplit(answer.headers["location"]).query).items()}


async def test_a_machine_server_waits_for_its_consent_then_serves_with_a_sealed_token_refreshed_before_expiry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answers: list[str] = []
    # Tokens expire within the vault's refresh margin: the session opened after the consent refreshes first.
    async with protected_echo_server(OAuthWorld(expires_in=30)) as world:
        with capture_logs() as logs:
            servers = {"tracker": {"url": world.mcp_url, "auth": {"type": "oauth"}}}
            async with running_gateway(servers, **_gateway_settings(tmp_path)) as gateway:
                url = await _waiting_url(gateway, "tracker")
                status = (await gateway.http.get("/mcp/v1/servers")).json()["servers"][0]
                answers.append(str(status))
                assert status["state"] == "unauthorized"
                assert status["authorization"] == {"tokens": "machine", "state": "required", "authorizationUrl": url}

                redirect = await _person_consents(url)
                done = await gateway.http.post(CALLBACK, json=redirect)
                answers.append(done.text)
                assert done.status_code == 200, done.text
                assert done.json() == {"server": "tracker", "scopes": ["echo"]}

                await gateway.wait_until_ready("tracker")
                call = await gateway.http.post(
                    "/mcp/v1/tools/call-tool", json={"name": "echo", "arguments": {"text": "hi"}}
                )
                answers.append(call.text)
                assert call.json()["content"][0]["text"] == "hi"
                assert world.grants == ["authorization_code", "refresh_token"]
                assert world.bearers[-1] == list(world.access_tokens)[-1]  # the refreshed token

                replay = await gateway.http.post(CALLBACK, json=redirect)
                answers.append(replay.text)
                assert replay.status_code == 400
                assert replay.json()["error"]["code"] == "invalid_oauth_state"

                held = (await gateway.http.get("/mcp/v1/oauth/connections")).json()["connections"]
                answers.append(str(held))
                assert [(c["server"], c["scopes"]) for c in held] == [("tracker", ["echo"])]
                assert "tenant" not in held[0]
                assert "user" not in held[0]

                revoked = await gateway.http.delete("/mcp/v1/oauth/connections", params={"server": "tracker"})
                assert revoked.status_code == 204
                assert world.revoked  # the authorization server was told
                assert await _waiting_url(gateway, "tracker") != url  # the session ended; a new consent is asked
                again = await gateway.http.delete("/mcp/v1/oauth/connections", params={"server": "tracker"})
                assert again.json()["error"]["code"] == "connection_not_found"

    rows = sa.create_engine(f"sqlite:///{tmp_path}/gateway.db")
    with rows.connect() as connection:
        stored = repr(connection.execute(sa.text("SELECT * FROM oauth_tokens")).all())
        stored += repr(connection.execute(sa.text("SELECT * FROM oauth_consents")).all())
        stored += repr(connection.execute(sa.text("SELECT * FROM oauth_clients")).all())
    rows.dispose()
    # The gateway's log lines (structlog's, the SDK's, its httpx2 client's): not the test's own browser (httpx).
    gateways = [record for record in caplog.records if record.name.split(".")[0] not in ("httpx", "httpcore")]
    logged = repr(logs) + "\n".join(record.getMessage() for record in gateways)
    for secret in world.issued:
        assert secret not in logged, "a token or code was logged"
        assert secret not in " ".join(answers), "a token or code was answered"
        assert secret not in stored, "a token or code is stored in the clear"
    assert "code_verifier" not in logged


async def test_a_callback_is_refused_for_an_unknown_state_a_denied_consent_and_a_failed_exchange(
    tmp_path: Path,
) -> None:
    async with protected_echo_server() as world:
        servers = {"tracker": {"url": world.mcp_url, "auth": {"type": "oauth"}}}
        async with running_gateway(servers, **_gateway_settings(tmp_path)) as gateway:
            unknown = await gateway.http.post(CALLBACK, json={"state": "nobody-asked", "code": "c"})
            assert unknown.status_code == 400
            assert unknown.json()["error"]["code"] == "invalid_oauth_state"

            world.deny = True
            denied = await gateway.http.post(
                CALLBACK, json=await _person_consents(await _waiting_url(gateway, "tracker"))
            )
            assert denied.status_code == 400
            assert denied.json()["error"]["code"] == "oauth_denied"

            world.deny, world.fail_token_endpoint = False, True
            fresh = await gateway.http.post("/mcp/v1/oauth/authorize", json={"server": "tracker"})
            assert fresh.status_code == 200, fresh.text
            failed = await gateway.http.post(CALLBACK, json=await _person_consents(fresh.json()["authorizationUrl"]))
            assert failed.status_code == 502
            assert failed.json()["error"]["code"] == "oauth_token_exchange_failed"

            bad = await gateway.http.post(CALLBACK, json={"code": "c"})
            assert bad.status_code == 400


async def test_authorize_answers_a_consent_url_then_authorized_and_refuses_what_is_not_oauth(tmp_path: Path) -> None:
    async with protected_echo_server() as world, echo_http_server("plain") as plain:
        servers = {
            "tracker": {"url": world.mcp_url, "auth": {"type": "oauth"}},
            "plain": {"url": plain},
            "docs": {"url": world.mcp_url, "auth": {"type": "oauth", "tokens": "perUser"}},
        }
        async with running_gateway(servers, **_gateway_settings(tmp_path)) as gateway:
            asked = await gateway.http.post("/mcp/v1/oauth/authorize", json={"server": "tracker"})
            assert asked.status_code == 200, asked.text
            done = await gateway.http.post(CALLBACK, json=await _person_consents(asked.json()["authorizationUrl"]))
            assert done.status_code == 200, done.text
            await gateway.wait_until_ready("tracker")  # woken by the consent: no reconnect loop in between
            held = await gateway.http.post("/mcp/v1/oauth/authorize", json={"server": "tracker"})
            assert held.json() == {"authorized": True}
            statuses = {
                status["name"]: status for status in (await gateway.http.get("/mcp/v1/servers")).json()["servers"]
            }
            assert statuses["tracker"]["authorization"] == {"tokens": "machine", "state": "authorized"}
            # Nobody consents for everyone to a per-user server: it waits for its users.
            assert statuses["docs"]["authorization"] == {"tokens": "perUser", "state": "required"}
            assert "plain" in statuses
            assert "authorization" not in statuses["plain"]

            for body, status, code in (
                ({"server": "plain"}, 400, "not_oauth"),
                ({"server": "nowhere"}, 404, "server_not_found"),
                ({"server": "tracker", "user": "u-1"}, 400, "user_not_expected"),
                ({"server": "docs"}, 400, "user_required"),
            ):
                answer = await gateway.http.post("/mcp/v1/oauth/authorize", json=body)
                assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)


async def test_a_step_up_during_a_call_answers_401_with_a_consent_url_and_the_call_runs_after_it(
    tmp_path: Path,
) -> None:
    async with protected_echo_server(OAuthWorld(call_scope="write")) as world:
        servers = {"tracker": {"url": world.mcp_url, "auth": {"type": "oauth"}}}
        async with running_gateway(servers, **_gateway_settings(tmp_path)) as gateway:
            first = await _person_consents(await _waiting_url(gateway, "tracker"))
            assert (await gateway.http.post(CALLBACK, json=first)).status_code == 200
            await gateway.wait_until_ready("tracker")
            call = {"name": "echo", "arguments": {"text": "hi"}}

            refused = await gateway.http.post("/mcp/v1/tools/call-tool", json=call)
            assert refused.status_code == 401, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["server"]) == ("authorization_required", "tracker")
            assert "scope=echo+write" in error["authorizationUrl"]  # the union of what was granted and challenged
            streamed = await gateway.http.post(
                "/mcp/v1/tools/call-tool", json=call, headers={"Accept": "text/event-stream"}
            )
            assert "event: error" in streamed.text
            assert '"code":"authorization_required"' in streamed.text

            done = await gateway.http.post(CALLBACK, json=await _person_consents(error["authorizationUrl"]))
            assert done.json()["scopes"] == ["echo", "write"]
            answered = await gateway.http.post("/mcp/v1/tools/call-tool", json=call)
            assert answered.status_code == 200, answered.text
            assert answered.json()["content"][0]["text"] == "hi"


async def test_a_consent_completed_on_another_replica_is_seen_by_the_one_waiting(tmp_path: Path) -> None:
    async with protected_echo_server() as world:
        servers = {"tracker": {"url": world.mcp_url, "auth": {"type": "oauth"}}}
        shared = _gateway_settings(tmp_path)  # one store, one key: two replicas
        async with running_gateway(servers, **shared) as waiting, running_gateway(servers, **shared) as other:
            redirect = await _person_consents(await _waiting_url(waiting, "tracker"))
            done = await other.http.post(CALLBACK, json=redirect)
            assert done.status_code == 200, done.text
            await waiting.wait_until_ready("tracker")  # within the consent check's period, no reconnect loop


def test_an_auth_block_is_for_http_servers_and_needs_the_vaults_key(tmp_path: Path) -> None:
    from mcp_client_service.config.servers_file import ConfigError

    with pytest.raises(ConfigError, match="auth"):
        parse_servers_config('{"mcpServers": {"s": {"command": "x", "auth": {"type": "oauth"}}}}')
    servers: ServersFile = parse_servers_config(
        '{"mcpServers": {"s": {"url": "https://mcp.example/mcp", "auth": {"type": "oauth"}}}}'
    )
    settings = MCPClientSettings(service_secret=SecretStr(GATEWAY_SECRET), database_url=f"sqlite:///{tmp_path}/g.db")
    with pytest.raises(ValueError, match="MCP_CLIENT_SECRETS_KEY"):
        create_app(settings, servers=servers)
