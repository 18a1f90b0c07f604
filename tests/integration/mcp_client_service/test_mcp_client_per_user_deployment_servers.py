"""A per-user OAuth server of the deployment's servers file (``"auth": {"tokens": "perUser"}`` in mcp_servers.json)
through the real gateway, over the real authorization server and protected MCP server of tests/support (which
records every bearer it accepted).

Its token's principal is (the CALLER's tenant, the server, the user): two users of one tenant, and a user of the same
name in another tenant, each consent and each call with their own token; a call naming no user is refused (403
``user_required``); one revocation ends that principal's session only. Nothing is listed before anyone consents (no
background session without a user), the first consent lists its tools for everyone, and no token is in an answer or
a log line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import anyio
import httpx
import pytest
from cryptography.fernet import Fernet
from mcp.shared.exceptions import MCPError
from structlog.testing import capture_logs

from support.mcp_gateway import WAIT_SECONDS, Gateway, face_client, running_gateway
from support.oauth_server import OAuthWorld, protected_echo_server

pytestmark = pytest.mark.anyio

SERVERS = {"docs": {"url": "", "auth": {"type": "oauth", "tokens": "perUser"}}}


@dataclass
class World:
    gateway: Gateway
    oauth: OAuthWorld
    answers: list[httpx.Response] = field(default_factory=list)

    async def consent(self, tenant: str, user: str) -> str:
        """``user`` of ``tenant`` asks for their consent URL, opens it (the authorization server consents at once)
        and the callback completes it; the access token issued for them."""
        before = set(self.oauth.access_tokens)
        asked = await self.gateway.http.post(
            "/mcp/v1/oauth/authorize", json={"server": "docs", "tenant": tenant, "user": user}
        )
        assert asked.status_code == 200, asked.text
        done = await self._complete(asked.json()["authorizationUrl"])
        assert (done["server"], done["tenant"], done["user"]) == ("docs", tenant, user)
        [token] = set(self.oauth.access_tokens) - before
        return token

    async def _complete(self, url: str) -> dict[str, str]:
        async with httpx.AsyncClient() as browser:
            redirect = await browser.get(url)
        assert redirect.status_code == 302, redirect.text
        done = await self.gateway.http.post(
            "/mcp/v1/oauth/callback", json=dict(httpx.URL(redirect.headers["location"]).params)
        )
        self.answers.append(done)
        assert done.status_code == 200, done.text
        result: dict[str, str] = done.json()
        return result

    async def call(self, tenant: str | None, user: str | None) -> httpx.Response:
        caller = {"tenant": tenant or "default", "runId": "run-1"} | ({"user": user} if user else {})
        answer = await self.gateway.http.post(
            "/mcp/v1/tools/call-tool",
            headers={"X-Tenant-Id": tenant} if tenant is not None else {},
            json={"name": "caller_meta", "arguments": {}, "caller": caller},
        )
        self.answers.append(answer)
        return answer

    async def call_with(self, tenant: str, user: str, token: str) -> None:
        """A call of ``user`` of ``tenant`` succeeds, and its requests went with ``token``."""
        seen = len(self.oauth.bearers)
        called = await self.call(tenant, user)
        assert called.status_code == 200, called.text
        assert json.loads(called.json()["content"][0]["text"])["user"] == user
        assert token in self.oauth.bearers[seen:]

    def status(self) -> dict[str, object]:
        [docs] = [server for server in self.gateway.registry.statuses().servers if server.name == "docs"]
        return docs.model_dump(by_alias=True, exclude_none=True)


async def _listed(gateway: Gateway) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        await gateway.registry.wait_until(lambda registry: registry.catalog.entry("caller_meta") is not None)


async def test_users_of_two_tenants_each_call_a_per_user_servers_file_server_with_their_own_token() -> None:
    async with protected_echo_server() as oauth:
        servers = {"docs": {**SERVERS["docs"], "url": oauth.mcp_url}}
        with capture_logs() as logs:
            async with running_gateway(
                servers, secrets_key=Fernet.generate_key().decode(), oauth_redirect_url="http://agent.test/callback"
            ) as gateway:
                world = World(gateway, oauth)
                # Nobody consented: no session of anyone's, nothing listed, and the replica is ready all the same.
                assert world.status()["state"] == "unauthorized"
                assert world.status()["authorization"] == {"tokens": "perUser", "state": "required"}
                assert gateway.registry.readiness().ready
                assert gateway.registry.catalog.entry("caller_meta") is None
                assert oauth.bearers == []
                refused = await gateway.http.post("/mcp/v1/oauth/authorize", json={"server": "docs", "tenant": "acme"})
                assert (refused.status_code, refused.json()["error"]["code"]) == (400, "user_required")

                acme_alice = await world.consent("acme", "alice")
                await _listed(gateway)  # her consent listed the server's tools, for every caller
                assert world.status()["authorization"] == {"tokens": "perUser", "state": "authorized"}
                await world.call_with("acme", "alice", acme_alice)

                # Bob of acme, and alice of globex (the same name, another tenant), are asked their own consent.
                for tenant, user in (("acme", "bob"), ("globex", "alice")):
                    asked = await world.call(tenant, user)
                    assert asked.status_code == 401, asked.text
                    error = asked.json()["error"]
                    assert (error["code"], error["server"]) == ("authorization_required", "docs")
                    done = await world._complete(error["authorizationUrl"])  # the URL is theirs
                    assert (done["tenant"], done["user"]) == (tenant, user)
                acme_bob, globex_alice = sorted(
                    set(oauth.access_tokens) - {acme_alice}, key=lambda token: oauth.issued.index(token)
                )
                tokens = {("acme", "alice"): acme_alice, ("acme", "bob"): acme_bob, ("globex", "alice"): globex_alice}
                assert len(set(tokens.values())) == 3
                for (tenant, user), token in tokens.items():
                    await world.call_with(tenant, user, token)
                for key in tokens:
                    assert gateway.tenants.sessions.get((key[0], "docs", key[1])) is not None
                assert gateway.tenants.sessions.get(("acme", "docs", "")) is None  # no session shared by a tenant

                nobody = await world.call("acme", None)
                assert (nobody.status_code, nobody.json()["error"]["code"]) == (403, "user_required")
                no_tenant = await world.call(None, "alice")  # a call naming no tenant: the principal ("", docs, alice)
                assert no_tenant.status_code == 401, no_tenant.text

                held = (await gateway.http.get("/mcp/v1/oauth/connections", params={"server": "docs"})).json()
                assert sorted((c["tenant"], c["user"]) for c in held["connections"]) == sorted(tokens)

                revoked = await gateway.http.delete(
                    "/mcp/v1/oauth/connections", params={"tenant": "acme", "server": "docs", "user": "alice"}
                )
                assert revoked.status_code == 204, revoked.text
                assert gateway.tenants.sessions.get(("acme", "docs", "alice")) is None  # hers only
                again = await world.call("acme", "alice")
                assert (again.status_code, again.json()["error"]["code"]) == (401, "authorization_required")
                seen = len(oauth.bearers)
                await world.call_with("acme", "bob", acme_bob)
                await world.call_with("globex", "alice", globex_alice)
                assert acme_alice not in oauth.bearers[seen:]
                # Its settings changed by a reload: every user's session ends (the next call opens one anew).
                gateway.write_servers({"docs": {**servers["docs"], "headers": {"X-Version": "2"}}})
                reloaded = await gateway.http.post("/mcp/v1/servers/reload")
                assert reloaded.json()["changed"] == ["docs"], reloaded.text
                assert list(gateway.tenants.sessions.keys_of_server("docs")) == []
                assert gateway.registry.catalog.entry("caller_meta") is not None  # still listed: callable
                await world.call_with("globex", "alice", globex_alice)  # her token is kept: her new session serves
                assert gateway.tenants.sessions.get(("globex", "docs", "alice")) is not None
                gateway.write_servers({})
                assert (await gateway.http.post("/mcp/v1/servers/reload")).json()["removed"] == ["docs"]
                assert list(gateway.tenants.sessions.keys_of_server("docs")) == []
                assert gateway.registry.catalog.entry("caller_meta") is None
                alices_refresh = oauth.issued[oauth.issued.index(acme_alice) + 1]
                assert oauth.revoked == [alices_refresh]  # the authorization server was told of hers (RFC 7009)
                world.answers += [
                    await gateway.http.get("/mcp/v1/servers"),
                    await gateway.http.get("/mcp/v1/oauth/connections"),
                ]

    assert len(oauth.issued) >= 9  # three codes, three access and three refresh tokens at least
    for secret in oauth.issued:
        assert not [answer for answer in world.answers if secret in answer.text]
        assert not [line for line in logs if secret in repr(line)]


async def test_the_gateways_mcp_endpoint_refuses_a_per_user_servers_tool_it_cannot_name_a_user_for() -> None:
    async with protected_echo_server() as oauth:
        servers = {"docs": {**SERVERS["docs"], "url": oauth.mcp_url}}
        async with running_gateway(
            servers, secrets_key=Fernet.generate_key().decode(), oauth_redirect_url="http://agent.test/callback"
        ) as gateway:
            await World(gateway, oauth).consent("acme", "alice")
            await _listed(gateway)
            async with face_client(gateway) as client:
                with pytest.raises(MCPError, match="user_required"):
                    await client.call_tool("caller_meta", {})
            assert list(gateway.tenants.sessions.keys_of_server("docs")) == [("acme", "docs", "alice")]
