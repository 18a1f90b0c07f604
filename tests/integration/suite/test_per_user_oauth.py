"""The issue's per-user OAuth, through the real gateway and agent-service: a tenant's per-user server behind a real
(test) authorization server, two users of the tenant each consent in their browser, each call carries that user's
own token, one user's revocation stops only that user, and no token (nor code) is in any log line or answer.

The authorization server and the MCP server it protects are tests/support/oauth_server.py (RFC 9728, 8414, 7591, 6749
+ PKCE, 7009): the echo server behind a bearer check, recording every bearer token it accepted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr
from structlog.testing import capture_logs

from agent_service.app import create_app
from agent_service.settings import AgentSettings
from support.caller_keys import as_caller, key_entry
from support.mcp_gateway import WAIT_SECONDS, Gateway, running_gateway
from support.oauth_server import OAuthWorld, protected_echo_server
from support.servers import free_port, serve_app

pytestmark = pytest.mark.anyio

APP = "acme-app-" + uuid.uuid4().hex
GLOBEX_APP = "globex-app-" + uuid.uuid4().hex
ADMIN = "acme-admin-" + uuid.uuid4().hex
CALLBACK_PATH = "/api/v1/agent/oauth/callback"
"""agent-service's, where the authorization server sends the person's browser back (the gateway's redirect URI,
``http://agent.test`` + it: the test's browser takes the redirect's query there)."""
CALLERS_FILE = f"""
[tenants.acme]

{key_entry("acme-app", "acme", APP, trusted=True)}
{key_entry("acme-admin", "acme", ADMIN, role="admin")}

[tenants.globex]

{key_entry("globex-app", "globex", GLOBEX_APP, trusted=True)}
"""


@dataclass
class Stack:
    world: OAuthWorld
    gateway: Gateway
    agent: httpx.AsyncClient
    answers: list[httpx.Response]

    async def as_user(self, method: str, path: str, user: str, *, key: str = APP, **kwargs: Any) -> httpx.Response:
        answer = await self.agent.request(method, path, headers=as_caller(key, user), **kwargs)
        self.answers.append(answer)
        return answer

    async def consent(self, user: str, *, key: str = APP) -> str:
        """``user`` connects the server: asks for the URL, opens it in their browser (the authorization server
        consents at once), which comes back to agent-service's callback; the access token issued for them."""
        before = set(self.world.access_tokens)
        asked = await self.as_user("POST", "/api/v1/agent/connections/crm/authorize", user, key=key)
        assert asked.status_code == 200, asked.text
        async with httpx.AsyncClient() as browser:
            redirect = await browser.get(asked.json()["authorizationUrl"])
        assert redirect.status_code == 302, redirect.text
        back = httpx.URL(redirect.headers["location"])
        assert back.path == CALLBACK_PATH
        page = await self.agent.get(CALLBACK_PATH, params=back.params)  # the browser arrives: no key
        self.answers.append(page)
        assert page.status_code == 200, page.text
        assert "crm is connected" in page.text
        [token] = set(self.world.access_tokens) - before
        return token

    async def call(self, user: str | None, *, tenant: str = "acme") -> httpx.Response:
        caller = {"tenant": tenant, "runId": "run-1"} | ({"user": user} if user else {})
        answer = await self.gateway.http.post(
            "/mcp/v1/tools/call-tool",
            headers={"X-Tenant-Id": tenant},
            json={"name": "caller_meta", "arguments": {}, "caller": caller},
        )
        self.answers.append(answer)
        return answer


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    async with _stack(tmp_path, servers_file=False) as stack:
        yield stack


@asynccontextmanager
async def _stack(tmp_path: Path, *, servers_file: bool) -> AsyncIterator[Stack]:
    """The real gateway and agent-service, and ``crm``: a per-user server of acme's own (registered through the admin
    API), or of the deployment's servers file (``servers_file``)."""
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE)
    world = OAuthWorld()
    auth = {"type": "oauth", "tokens": "perUser"}
    async with (
        protected_echo_server(world),
        running_gateway(
            {"crm": {"url": world.mcp_url, "auth": auth}} if servers_file else {},
            secrets_key=Fernet.generate_key().decode(),
            oauth_redirect_url="http://agent.test" + CALLBACK_PATH,
        ) as gateway,
    ):
        settings = AgentSettings(
            completion_url=f"http://127.0.0.1:{free_port()}",
            mcp_client_url=gateway.url,
            mcp_service_secret=SecretStr(gateway_secret(gateway)),
            callers_file=callers,
            database_url="",
        )
        async with (
            serve_app(create_app(settings)) as agent_url,
            httpx.AsyncClient(base_url=agent_url, timeout=30) as agent,
        ):
            if servers_file:
                yield Stack(world, gateway, agent, [])
                return
            created = await agent.post(
                "/api/v1/admin/mcp-servers",
                headers=as_caller(ADMIN),
                json={"name": "crm", "url": world.mcp_url, "auth": auth},
            )
            assert created.status_code == 201, created.text
            yield Stack(world, gateway, agent, [created])


def gateway_secret(gateway: Gateway) -> str:
    return str(gateway.http.headers["X-MCP-Service-Secret"])


async def _listed(stack: Stack) -> None:
    """A first consent lists the server's tools with that user's session: wait (bounded) until it is kept."""
    with anyio.fail_after(WAIT_SECONDS):
        await stack.gateway.tenants.wait_until(lambda servers: servers.recorded_listing("acme", "crm") is not None)


async def test_two_users_consent_each_call_carries_their_own_token_and_one_revocation_stops_only_them(
    stack: Stack,
) -> None:
    with capture_logs() as logs:
        alice_token = await stack.consent("alice")
        await _listed(stack)
        seen = len(stack.world.bearers)
        called = await stack.call("alice")
        assert called.status_code == 200, called.text
        assert json.loads(called.json()["content"][0]["text"])["user"] == "alice"
        assert set(stack.world.bearers[seen:]) == {alice_token}  # only alice's session: her token, every request

        bob_token = await stack.consent("bob")
        assert bob_token != alice_token
        for user, token in (("bob", bob_token), ("alice", alice_token)):
            seen = len(stack.world.bearers)
            called = await stack.call(user)
            assert called.status_code == 200, called.text
            assert json.loads(called.json()["content"][0]["text"])["user"] == user
            assert token in stack.world.bearers[seen:]  # the call's request went with this user's own token
        assert set(stack.world.bearers) == {alice_token, bob_token}

        stranger = await stack.call("carol")  # never consented: asked to, nothing called
        assert stranger.status_code == 401, stranger.text
        error = stranger.json()["error"]
        assert (error["code"], error["server"], error["tokens"]) == ("authorization_required", "crm", "perUser")
        assert error["authorizationUrl"].startswith(stack.world.base_url + "/authorize?")
        # Carol asks for her own consent URL and sends it to Bob: Bob's browser holds no cookie of that consent, so
        # his sign-in cannot become Carol's token.
        asked = await stack.as_user("POST", "/api/v1/agent/connections/crm/authorize", "carol")
        async with httpx.AsyncClient(base_url=str(stack.agent.base_url)) as bobs_browser:
            redirect = await bobs_browser.get(asked.json()["authorizationUrl"])
            back = httpx.URL(redirect.headers["location"])
            page = await bobs_browser.get(CALLBACK_PATH, params=back.params)
        stack.answers.append(page)
        assert page.status_code == 400, page.text
        assert "browser where you asked for it" in page.text
        assert (await stack.call("carol")).status_code == 401  # still nobody's token
        nobody = await stack.call(None)
        assert (nobody.status_code, nobody.json()["error"]["code"]) == (403, "user_required")
        assert set(stack.world.bearers) == {alice_token, bob_token}

        mine = await stack.as_user("GET", "/api/v1/agent/connections", "alice")
        assert [(c["server"], c["user"]) for c in mine.json()["connections"]] == [("crm", "alice")]
        revoked = await stack.as_user("DELETE", "/api/v1/agent/connections/crm", "alice")
        assert revoked.status_code == 204, revoked.text
        seen = len(stack.world.bearers)

        again = await stack.call("alice")
        assert (again.status_code, again.json()["error"]["code"]) == (401, "authorization_required")
        still = await stack.call("bob")
        assert still.status_code == 200, still.text
        assert bob_token in stack.world.bearers[seen:]
        assert alice_token not in stack.world.bearers[seen:]  # her session ended with her token
        assert stack.world.revoked  # told the authorization server (RFC 7009)
        stack.answers.append(await stack.agent.get("/api/v1/admin/oauth-connections", headers=as_caller(ADMIN)))
        stack.answers.append(await stack.gateway.http.get("/mcp/v1/servers"))
        stack.answers.append(await stack.gateway.http.get("/mcp/v1/tenants/acme/servers"))

    secrets = stack.world.issued
    assert len(secrets) >= 6  # two codes, two access and two refresh tokens at least
    for answer in stack.answers:
        assert not [secret for secret in secrets if secret in answer.text], answer.request.url
    logged = repr(logs)
    assert not [secret for secret in secrets if secret in logged]


async def test_a_servers_file_per_user_server_keys_each_token_by_the_callers_tenant(tmp_path: Path) -> None:
    """The deployment's per-user ``crm``: alice of acme and alice of globex connect through agent-service (which
    passes each caller's tenant), each call carries that tenant's alice's own token, and acme's alice's revocation
    leaves globex's alice connected."""
    with capture_logs() as logs:
        async with _stack(tmp_path, servers_file=True) as stack:
            acme_alice = await stack.consent("alice")
            with anyio.fail_after(WAIT_SECONDS):  # her consent listed the server's tools for every caller
                await stack.gateway.registry.wait_until(
                    lambda registry: registry.catalog.entry("caller_meta") is not None
                )
            globex_alice = await stack.consent("alice", key=GLOBEX_APP)
            assert globex_alice != acme_alice
            for tenant, token in (("acme", acme_alice), ("globex", globex_alice)):
                seen = len(stack.world.bearers)
                called = await stack.call("alice", tenant=tenant)
                assert called.status_code == 200, called.text
                assert token in stack.world.bearers[seen:]
            bob = await stack.call("bob")
            assert (bob.status_code, bob.json()["error"]["code"]) == (401, "authorization_required")
            nobody = await stack.call(None, tenant="globex")
            assert (nobody.status_code, nobody.json()["error"]["code"]) == (403, "user_required")

            for key, tenant in ((APP, "acme"), (GLOBEX_APP, "globex")):
                mine = await stack.as_user("GET", "/api/v1/agent/connections", "alice", key=key)
                assert [(c["server"], c["tenant"], c["user"]) for c in mine.json()["connections"]] == [
                    ("crm", tenant, "alice")
                ]
            revoked = await stack.as_user("DELETE", "/api/v1/agent/connections/crm", "alice")
            assert revoked.status_code == 204, revoked.text
            again = await stack.call("alice")
            assert (again.status_code, again.json()["error"]["code"]) == (401, "authorization_required")
            seen = len(stack.world.bearers)
            still = await stack.call("alice", tenant="globex")
            assert still.status_code == 200, still.text
            assert globex_alice in stack.world.bearers[seen:]
            assert acme_alice not in stack.world.bearers[seen:]
            stack.answers.append(await stack.gateway.http.get("/mcp/v1/servers"))

    for answer in stack.answers:
        assert not [secret for secret in stack.world.issued if secret in answer.text], answer.request.url
    logged = repr(logs)
    assert not [secret for secret in stack.world.issued if secret in logged]
