"""A tenant's OAuth servers through the real gateway. A per-user server (``"auth": {"tokens": "perUser"}``): each end
user's calls go on a session of their own, a call naming no user is refused (403 ``user_required``), it is listed by
a user's session only, and its ``auth`` block's client secret is in no answer and no log line. A machine server: it
waits for its admin's consent (its card says where), then serves the whole tenant with one token.

The server is the echo server over streamable HTTP (tests/support): these tests are of the sessions, whoever's token
they carry (the OAuth flow itself: test_mcp_client_oauth_per_user.py).
"""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from cryptography.fernet import Fernet
from structlog.testing import capture_logs

from suite_common.sse_parser import EventStreamParser
from support.mcp_gateway import WAIT_SECONDS, echo_http_server, running_gateway
from support.oauth_server import protected_echo_server

pytestmark = pytest.mark.anyio

SERVERS = "/mcp/v1/tenants/a/servers"
CLIENT_SECRET = "cs-per-user-4711"
AUTH = {"type": "oauth", "tokens": "perUser", "clientId": "gw-client", "clientSecret": CLIENT_SECRET}


def _call(user: str | None, *, name: str = "caller_meta") -> dict[str, object]:
    caller = {"tenant": "a", "runId": "run-1"} | ({"user": user} if user is not None else {})
    return {"name": name, "arguments": {}, "caller": caller}


async def test_each_user_calls_on_their_own_session_and_a_call_naming_no_user_is_refused() -> None:
    key = Fernet.generate_key().decode()
    with capture_logs() as logs:
        async with echo_http_server("notes") as url, running_gateway({}, secrets_key=key) as gateway:
            created = await gateway.http.post(SERVERS, json={"name": "notes", "url": url, "auth": AUTH})
            assert created.status_code == 201, created.text
            card = created.json()
            assert card["auth"] == {
                "type": "oauth",
                "tokens": "perUser",
                "grant": "authorization_code",
                "clientId": "gw-client",
                "hasClientSecret": True,
            }
            assert card["authorization"] == {"tokens": "perUser", "state": "required"}
            # Nobody consented: nothing lists it (there is no one's token to list it with), it offers no tools.
            assert gateway.tenants.sessions.latest("a", "notes") is None
            listed = await gateway.http.get("/mcp/v1/tools/list-tools", headers={"X-Tenant-Id": "a"})
            assert "caller_meta" not in {tool["name"] for tool in listed.json()["tools"]}

            gateway.tenants.list_in_background("a", "notes", "alice")  # what a completed consent of alice's does
            with anyio.fail_after(WAIT_SECONDS):
                await gateway.tenants.wait_until(lambda servers: servers.recorded_listing("a", "notes") is not None)
            assert (await gateway.http.get(SERVERS + "/notes")).json()["authorization"]["state"] == "authorized"

            answers = [created]
            for user in ("alice", "bob", "alice"):
                called = await gateway.http.post(
                    "/mcp/v1/tools/call-tool", headers={"X-Tenant-Id": "a"}, json=_call(user)
                )
                assert called.status_code == 200, called.text
                assert json.loads(called.json()["content"][0]["text"])["user"] == user
                answers.append(called)
            alice = gateway.tenants.sessions.get(("a", "notes", "alice"))
            bob = gateway.tenants.sessions.get(("a", "notes", "bob"))
            assert alice is not None
            assert bob is not None
            assert alice is not bob
            assert gateway.tenants.sessions.get(("a", "notes", "")) is None  # no session shared by the tenant

            refused = await gateway.http.post("/mcp/v1/tools/call-tool", headers={"X-Tenant-Id": "a"}, json=_call(None))
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "user_required"
            streamed = await gateway.http.post(
                "/mcp/v1/tools/call-tool",
                headers={"X-Tenant-Id": "a", "Accept": "text/event-stream"},
                json=_call(None),
            )
            [event] = EventStreamParser().feed(streamed.content)
            assert (event.event, json.loads(event.data)["code"]) == ("error", "user_required")

            gateway.tenants.sessions.close(("a", "notes", "alice"), "its token was revoked")  # one user's only
            assert gateway.tenants.sessions.get(("a", "notes", "bob")) is bob
            changed = await gateway.http.patch(SERVERS + "/notes", json={"auth": {**AUTH, "scopes": ["notes.read"]}})
            assert changed.status_code == 200, changed.text
            assert gateway.tenants.sessions.latest("a", "notes") is None  # its settings changed: every user's closed
            answers += [changed, await gateway.http.get(SERVERS), await gateway.http.get("/mcp/v1/servers")]

    for answer in answers:
        assert CLIENT_SECRET not in answer.text
    assert not [line for line in logs if CLIENT_SECRET in repr(line)]


async def test_an_auth_block_with_a_reference_or_an_unknown_field_is_refused() -> None:
    async with running_gateway({}, secrets_key=Fernet.generate_key().decode()) as gateway:
        for auth, status in (
            ({**AUTH, "clientSecret": "${env:HOME}"}, 400),  # a tenant's values are literal
            ({**AUTH, "command": "sh"}, 400),
            ({**AUTH, "tokens": "everyone"}, 400),
        ):
            body = {"name": "x", "url": "https://example.com/mcp", "auth": auth}
            refused = await gateway.http.post(SERVERS, json=body)
            assert refused.status_code == status, refused.text
        assert (await gateway.http.get(SERVERS)).json()["servers"] == []
    async with running_gateway({}) as keyless:  # sealed like header values: no key, no auth block
        body = {"name": "x", "url": "http://127.0.0.1:9/mcp", "auth": AUTH}  # a loopback URL: allowed here
        refused = await keyless.http.post(SERVERS, json=body)
        assert (refused.status_code, refused.json()["error"]["code"]) == (400, "secrets_key_missing")
        assert CLIENT_SECRET not in refused.text


async def test_a_tenants_machine_server_waits_for_its_admins_consent_then_serves_the_whole_tenant() -> None:
    key = Fernet.generate_key().decode()
    async with (
        protected_echo_server() as world,
        running_gateway({}, secrets_key=key, oauth_redirect_url="http://agent.test/callback") as gateway,
    ):
        body = {"name": "wiki", "url": world.mcp_url, "auth": {"type": "oauth"}}
        created = await gateway.http.post(SERVERS, json=body)
        assert created.status_code == 201, created.text
        with anyio.fail_after(WAIT_SECONDS):  # its background listing finds it needs a consent
            await gateway.tenants.wait_until(
                lambda servers: (
                    (latest := servers.sessions.latest("a", "wiki")) is not None and latest.consent is not None
                )
            )
        card = (await gateway.http.get(SERVERS + "/wiki")).json()["authorization"]
        assert (card["tokens"], card["state"]) == ("machine", "required")
        assert card["authorizationUrl"].startswith(world.base_url + "/authorize?")
        refused = await gateway.http.post(
            "/mcp/v1/tools/call-tool", headers={"X-Tenant-Id": "a"}, json={"name": "echo", "arguments": {"text": "x"}}
        )
        assert refused.status_code in (401, 404), refused.text  # not listed yet, or listed and waiting: never called

        async with httpx.AsyncClient() as browser:  # the admin consents
            redirect = await browser.get(card["authorizationUrl"])
        query = dict(httpx.URL(redirect.headers["location"]).params)
        done = await gateway.http.post("/mcp/v1/oauth/callback", json=query)
        assert done.status_code == 200, done.text
        assert (done.json()["server"], done.json()["tenant"], done.json().get("user")) == ("wiki", "a", None)
        with anyio.fail_after(WAIT_SECONDS):
            await gateway.tenants.wait_until(lambda servers: servers.recorded_listing("a", "wiki") is not None)

        for user in ("alice", "bob", None):  # one token for the whole tenant, whoever calls
            caller = {"tenant": "a", "runId": "r"} | ({"user": user} if user else {})
            called = await gateway.http.post(
                "/mcp/v1/tools/call-tool",
                headers={"X-Tenant-Id": "a"},
                json={"name": "echo", "arguments": {"text": "x"}, "caller": caller},
            )
            assert called.status_code == 200, called.text
        assert len(set(world.bearers)) == 1
        assert (await gateway.http.get(SERVERS + "/wiki")).json()["authorization"]["state"] == "authorized"
