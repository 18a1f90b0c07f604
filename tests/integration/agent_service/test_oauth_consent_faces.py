"""agent-service's faces of OAuth consent through the running service, against a scripted gateway speaking the
gateway's OAuth endpoints: the public callback page, a person's own connections, the admin's machine consent and
the tenant's tokens, and the ``auth`` block passing through the admin API with its client secret never answered.

Tenant ``acme``: an app key trusted to name its users, an admin key; tenant ``globex``: an app key. One operator.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from agent_service.app import create_app
from agent_service.settings import AgentSettings
from support.caller_keys import as_caller, key_entry
from support.scripted_oauth_gateway import ScriptedOAuthGateway
from support.servers import free_port, serve_app

pytestmark = pytest.mark.anyio

SECRET = "gateway-secret-" + uuid.uuid4().hex
ACME_APP = "acme-app-" + uuid.uuid4().hex
ACME_ADMIN = "acme-admin-" + uuid.uuid4().hex
GLOBEX_APP = "globex-app-" + uuid.uuid4().hex
OPERATOR = "operator-" + uuid.uuid4().hex
CLIENT_SECRET = "cs-" + uuid.uuid4().hex

CALLERS_FILE = f"""
[tenants.acme]
[tenants.globex]
[tenants.ops]

{key_entry("acme-app", "acme", ACME_APP, trusted=True)}
{key_entry("acme-admin", "acme", ACME_ADMIN, role="admin")}
{key_entry("globex-app", "globex", GLOBEX_APP, trusted=True)}
{key_entry("operator", "ops", OPERATOR, role="operator")}
"""

CRM: dict[str, Any] = {
    "name": "crm",
    "url": "https://crm.example/mcp",
    "auth": {"type": "oauth", "tokens": "perUser", "clientId": "gw", "clientSecret": CLIENT_SECRET},
}


@dataclass
class Stack:
    gateway: ScriptedOAuthGateway
    http: httpx.AsyncClient

    async def call(self, method: str, path: str, key: str, user: str | None = None, **kwargs: Any) -> httpx.Response:
        return await self.http.request(method, path, headers=as_caller(key, user), **kwargs)

    async def consent(self, url: str, **extra: str) -> httpx.Response:
        """The person's browser coming back from the authorization server to the callback, with no key."""
        state = parse_qs(urlparse(url).query)["state"][0]
        return await self.http.get("/api/v1/agent/oauth/callback", params={"state": state, **extra})


@pytest.fixture(params=[False, True], ids=["gateway", "leaky-gateway"])
async def stack(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    """``leaky-gateway``: one that answers the auth block's client secret too, which agent-service must drop."""
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE)
    gateway = ScriptedOAuthGateway(
        SECRET, leak_header_values=request.param, shared_servers=["docs", "notes"], shared_per_user=["notes"]
    )
    async with serve_app(gateway.app) as gateway_url:
        settings = AgentSettings(
            completion_url=f"http://127.0.0.1:{free_port()}",
            mcp_client_url=gateway_url,
            mcp_service_secret=SecretStr(SECRET),
            callers_file=callers,
            database_url="",
        )
        async with serve_app(create_app(settings)) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
            yield Stack(gateway, http)


def _error(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def test_a_person_connects_lists_and_disconnects_their_own_per_user_server(stack: Stack) -> None:
    created = await stack.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)
    assert created.status_code == 201, created.text

    asked = await stack.call("POST", "/api/v1/agent/connections/crm/authorize", ACME_APP, "alice")
    assert asked.status_code == 200, asked.text
    url = asked.json()["authorizationUrl"]
    assert stack.gateway.pending[parse_qs(urlparse(url).query)["state"][0]] == ("acme", "crm", "alice")

    page = await stack.consent(url, code="c-123", iss="https://as.example")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "crm is connected" in page.text
    assert "close this window" in page.text
    assert page.headers["referrer-policy"] == "no-referrer"
    assert "c-123" not in page.text

    again = await stack.call("POST", "/api/v1/agent/connections/crm/authorize", ACME_APP, "alice")
    assert again.json() == {"authorized": True}
    mine = await stack.call("GET", "/api/v1/agent/connections", ACME_APP, "alice")
    assert [(c["server"], c["user"], c["scopes"]) for c in mine.json()["connections"]] == [
        ("crm", "alice", ["crm.read"])
    ]
    bobs = (await stack.call("GET", "/api/v1/agent/connections", ACME_APP, "bob")).json()
    assert (bobs["connections"], bobs["available"]) == ([], ["crm", "notes"])
    theirs = await stack.call("GET", "/api/v1/agent/connections", GLOBEX_APP, "alice")  # another tenant's alice
    assert theirs.json() == {"connections": [], "available": ["notes"]}  # globex has no crm: the deployment's notes

    assert (await stack.call("DELETE", "/api/v1/agent/connections/crm", ACME_APP, "bob")).status_code == 404
    assert (await stack.call("DELETE", "/api/v1/agent/connections/crm", ACME_APP, "alice")).status_code == 204
    assert stack.gateway.connections == {}


async def test_a_consent_is_bound_to_the_browser_that_asked_for_it(stack: Stack) -> None:
    """Alice asks for her consent URL and sends it to Bob: Bob's browser, which holds no cookie of that consent,
    cannot complete it (his account would become Alice's token); Alice's own browser can, then forgets the cookie."""
    await stack.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)
    asked = await stack.call("POST", "/api/v1/agent/connections/crm/authorize", ACME_APP, "alice")
    url = asked.json()["authorizationUrl"]
    state = parse_qs(urlparse(url).query)["state"][0]
    [cookie] = asked.headers.get_list("set-cookie")
    name, nonce = cookie.split(";")[0].split("=", 1)
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite=lax", "path=/api/v1/agent/oauth/callback"} <= attributes
    assert state not in cookie  # the cookie names its consent by a hash, never by the state
    # The gateway keeps the nonce's hash, never the nonce.
    assert stack.gateway.bindings[state] == hashlib.sha256(nonce.encode()).hexdigest()

    async with httpx.AsyncClient(base_url=str(stack.http.base_url), timeout=30) as victim:
        refused = await victim.get("/api/v1/agent/oauth/callback", params={"state": state, "code": "victims"})
    assert refused.status_code == 400
    assert "browser where you asked for it" in refused.text
    assert stack.gateway.connections == {}

    again = await stack.call("POST", "/api/v1/agent/connections/crm/authorize", ACME_APP, "alice")
    [own] = again.headers.get_list("set-cookie")
    assert own.split("=")[0] != name  # a cookie per consent: two under way in one browser do not collide
    done = await stack.consent(again.json()["authorizationUrl"], code="c-own")
    assert done.status_code == 200, done.text
    assert stack.gateway.connections == {("acme", "crm", "alice"): ["crm.read"]}
    [gone] = done.headers.get_list("set-cookie")  # used: the browser forgets it
    assert gone.startswith(own.split("=")[0] + "=")
    assert "max-age=0" in gone.lower()


async def test_connections_are_a_persons_own_and_need_a_user(stack: Stack) -> None:
    for method, path in (
        ("GET", "/api/v1/agent/connections"),
        ("POST", "/api/v1/agent/connections/crm/authorize"),
        ("DELETE", "/api/v1/agent/connections/crm"),
    ):
        assert _error(await stack.call(method, path, ACME_APP)) == (403, "user_required")
        assert (await stack.http.request(method, path)).status_code == 401  # no key: refused before anything
    assert not [r for r in stack.gateway.requests if r.path.startswith("/mcp/v1/oauth/")]
    unknown = await stack.call("POST", "/api/v1/agent/connections/nope/authorize", ACME_APP, "alice")
    assert _error(unknown) == (404, "server_not_found")


async def test_a_persons_connections_offer_the_per_user_servers_they_have_not_connected_yet(stack: Stack) -> None:
    machine = {**CRM, "name": "wiki", "auth": {"type": "oauth"}}
    await stack.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=machine)
    await stack.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)

    before = (await stack.call("GET", "/api/v1/agent/connections", ACME_APP, "alice")).json()
    # The tenant's per-user crm and the deployment's per-user notes; not the machine wiki, nor the plain docs.
    assert (before["connections"], before["available"]) == ([], ["crm", "notes"])
    asked = await stack.call("POST", "/api/v1/agent/connections/crm/authorize", ACME_APP, "alice")
    assert (await stack.consent(asked.json()["authorizationUrl"], code="c-1")).status_code == 200
    after = (await stack.call("GET", "/api/v1/agent/connections", ACME_APP, "alice")).json()
    assert ([c["server"] for c in after["connections"]], after["available"]) == (["crm"], ["notes"])


async def test_the_callback_page_says_why_a_consent_failed_with_a_4xx_or_502(stack: Stack) -> None:
    await stack.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)

    async def fresh_url() -> str:
        asked = await stack.call("POST", "/api/v1/agent/connections/crm/authorize", ACME_APP, "alice")
        url: str = asked.json()["authorizationUrl"]
        return url

    denied = await stack.consent(await fresh_url(), error="access_denied", error_description="no")
    assert (denied.status_code, "refused: access_denied" in denied.text) == (400, True)
    url = await fresh_url()
    assert (await stack.consent(url, code="c-1")).status_code == 200
    used = await stack.consent(url, code="c-1")  # the same redirect again: its state is used
    assert used.status_code == 400
    assert "Not connected" in used.text
    await stack.call("DELETE", "/api/v1/agent/connections/crm", ACME_APP, "alice")
    failed = await stack.consent(await fresh_url(), code="bad")
    assert failed.status_code == 502
    no_state = await stack.http.get("/api/v1/agent/oauth/callback", params={"code": "x"})
    assert no_state.status_code == 400
    assert no_state.headers["content-type"].startswith("text/html")
    markup = await stack.http.get("/api/v1/agent/oauth/callback", params={"state": "<script>alert(1)</script>"})
    assert "<script>" not in markup.text


async def test_the_admin_connects_machine_servers_sees_and_revokes_the_tenants_tokens(stack: Stack) -> None:
    machine = {**CRM, "name": "wiki", "auth": {"type": "oauth"}}
    await stack.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=machine)
    await stack.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)

    asked = await stack.call("POST", "/api/v1/admin/mcp-servers/wiki/authorize", ACME_ADMIN)
    assert asked.status_code == 200, asked.text
    assert (await stack.consent(asked.json()["authorizationUrl"], code="c-9")).status_code == 200
    user_url = (await stack.call("POST", "/api/v1/agent/connections/crm/authorize", ACME_APP, "bob")).json()
    await stack.consent(user_url["authorizationUrl"], code="c-10")

    listed = await stack.call("GET", "/api/v1/admin/oauth-connections", ACME_ADMIN)
    assert sorted((c["server"], c.get("user")) for c in listed.json()["connections"]) == [
        ("crm", "bob"),
        ("wiki", None),
    ]
    # A tenant admin may not consent for the deployment's servers; an operator may, for the deployment.
    assert _error(await stack.call("POST", "/api/v1/admin/mcp-servers/docs/authorize", ACME_ADMIN)) == (
        404,
        "server_not_found",
    )
    ops = await stack.call("POST", "/api/v1/admin/mcp-servers/docs/authorize?tenant=acme", OPERATOR)
    assert ops.status_code == 200, ops.text
    state = parse_qs(urlparse(ops.json()["authorizationUrl"]).query)["state"][0]
    assert stack.gateway.pending[state] == ("", "docs", "")
    assert _error(await stack.call("POST", "/api/v1/admin/mcp-servers/wiki/authorize", ACME_APP)) == (
        403,
        "admin_only",
    )

    missing = await stack.call("DELETE", "/api/v1/admin/oauth-connections", ACME_ADMIN)
    assert _error(missing) == (400, "invalid_request")
    revoked = await stack.call("DELETE", "/api/v1/admin/oauth-connections?server=crm&user=bob", ACME_ADMIN)
    assert revoked.status_code == 204
    assert set(stack.gateway.connections) == {("acme", "wiki", "")}


async def test_the_auth_block_passes_through_the_admin_api_and_its_client_secret_never_comes_back(
    stack: Stack,
) -> None:
    with capture_logs() as logs:
        created = await stack.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)
        patched = await stack.call(
            "PATCH", "/api/v1/admin/mcp-servers/crm", ACME_ADMIN, json={"auth": {**CRM["auth"], "scopes": ["a"]}}
        )
        listed = await stack.call("GET", "/api/v1/admin/mcp-servers", ACME_ADMIN)
    forwarded = [r for r in stack.gateway.requests if r.path.startswith("/mcp/v1/tenants/")]
    assert CLIENT_SECRET in forwarded[0].body.decode()  # the gateway keeps it
    assert CLIENT_SECRET in forwarded[1].body.decode()
    for answer in (created, patched, listed):
        assert answer.status_code in (200, 201), answer.text
        assert CLIENT_SECRET not in answer.text
    auth = created.json()["auth"]
    assert (auth["tokens"], auth["clientId"]) == ("perUser", "gw")
    assert "clientSecret" not in auth
    assert patched.json()["auth"]["scopes"] == ["a"]
    assert CLIENT_SECRET not in str(logs)
