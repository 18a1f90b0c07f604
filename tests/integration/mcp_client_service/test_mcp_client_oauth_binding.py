"""A consent asked with a ``binding`` (the hash of a nonce the asking browser keeps) completes only when its callback
brings the same one: whoever else holds its state (a link sent to a victim) cannot make their account the asker's
token. And a fresh consent asks at least the scope of the principal's pending step-up, even while a token is held.

A real authorization server and protected MCP server of the test's (``support.oauth_server``)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography.fernet import Fernet

from support.mcp_gateway import running_gateway
from support.oauth_server import OAuthWorld, protected_echo_server

pytestmark = pytest.mark.anyio

CALLBACK = "/mcp/v1/oauth/callback"
AUTHORIZE = "/mcp/v1/oauth/authorize"
ASKER = hashlib.sha256(b"the asking browser's nonce").hexdigest()
OTHER = hashlib.sha256(b"another browser's nonce").hexdigest()


def _gateway_settings(tmp_path: Path) -> dict[str, Any]:
    return {"database_url": f"sqlite:///{tmp_path}/gateway.db", "secrets_key": Fernet.generate_key().decode()}


async def _person_consents(authorization_url: str) -> dict[str, str]:
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:
        answer = await browser.get(authorization_url)
    assert answer.status_code == 302
    return {name: values[0] for name, values in parse_qs(urlsplit(answer.headers["location"]).query).items()}


def _scope(url: str) -> set[str]:
    return set(parse_qs(urlsplit(url).query)["scope"][0].split())


async def test_a_bound_consent_completes_only_with_the_binding_of_the_browser_that_asked(tmp_path: Path) -> None:
    async with protected_echo_server() as world:
        servers = {"docs": {"url": world.mcp_url, "auth": {"type": "oauth", "tokens": "perUser"}}}
        async with running_gateway(servers, **_gateway_settings(tmp_path)) as gateway:
            principal = {"server": "docs", "tenant": "", "user": "alice"}

            # Alice's URL, opened by someone else's browser (no cookie: no binding) or another one's: refused, and
            # used up (it cannot be tried again with the right binding either).
            for brought in (None, OTHER):
                asked = await gateway.http.post(AUTHORIZE, json={**principal, "binding": ASKER})
                assert asked.status_code == 200, asked.text
                query = await _person_consents(asked.json()["authorizationUrl"])
                refused = await gateway.http.post(CALLBACK, json={**query, "binding": brought})
                assert refused.status_code == 400, refused.text
                assert refused.json()["error"]["code"] == "oauth_binding_mismatch"
                assert "browser" in refused.json()["error"]["message"]
                again = await gateway.http.post(CALLBACK, json={**query, "binding": ASKER})
                assert again.json()["error"]["code"] == "invalid_oauth_state"
            assert (await gateway.http.get("/mcp/v1/oauth/connections")).json() == {"connections": []}

            asked = await gateway.http.post(AUTHORIZE, json={**principal, "binding": ASKER})
            query = await _person_consents(asked.json()["authorizationUrl"])
            done = await gateway.http.post(CALLBACK, json={**query, "binding": ASKER})
            assert done.status_code == 200, done.text
            assert done.json()["user"] == "alice"

            # A consent asked without a binding (an operator's tooling on the gateway's own API) stays unbound.
            await gateway.http.delete("/mcp/v1/oauth/connections", params={"server": "docs", "user": "alice"})
            unbound = await gateway.http.post(AUTHORIZE, json=principal)
            assert unbound.status_code == 200, unbound.text
            query = await _person_consents(unbound.json()["authorizationUrl"])
            assert (await gateway.http.post(CALLBACK, json=query)).status_code == 200


async def test_a_fresh_consent_asks_at_least_the_scope_of_a_pending_step_up_while_a_token_is_held(
    tmp_path: Path,
) -> None:
    async with protected_echo_server(OAuthWorld(call_scope="write")) as world:
        servers = {"tracker": {"url": world.mcp_url, "auth": {"type": "oauth"}}}
        async with running_gateway(servers, **_gateway_settings(tmp_path)) as gateway:
            asked = await gateway.http.post(AUTHORIZE, json={"server": "tracker", "binding": ASKER})
            assert "write" not in _scope(asked.json()["authorizationUrl"])
            query = await _person_consents(asked.json()["authorizationUrl"])
            assert (await gateway.http.post(CALLBACK, json={**query, "binding": ASKER})).status_code == 200
            await gateway.wait_until_ready("tracker")
            call = {"name": "echo", "arguments": {"text": "hi"}}

            refused = await gateway.http.post("/mcp/v1/tools/call-tool", json=call)
            assert refused.status_code == 401, refused.text
            error = refused.json()["error"]
            # A machine server's consent is an admin's: the body says so (its URL is for the trusted API only).
            assert (error["code"], error["tokens"]) == ("authorization_required", "machine")

            # The admin's fresh, bound consent: the token held is not enough for the pending step-up's scope.
            fresh = await gateway.http.post(AUTHORIZE, json={"server": "tracker", "binding": ASKER})
            assert fresh.status_code == 200, fresh.text
            assert "authorizationUrl" in fresh.json(), fresh.json()
            assert {"echo", "write"} <= _scope(fresh.json()["authorizationUrl"])
            query = await _person_consents(fresh.json()["authorizationUrl"])
            done = await gateway.http.post(CALLBACK, json={**query, "binding": ASKER})
            assert set(done.json()["scopes"]) == {"echo", "write"}
            answered = await gateway.http.post("/mcp/v1/tools/call-tool", json=call)
            assert answered.status_code == 200, answered.text
            held = await gateway.http.post(AUTHORIZE, json={"server": "tracker", "binding": ASKER})
            assert held.json() == {"authorized": True}
