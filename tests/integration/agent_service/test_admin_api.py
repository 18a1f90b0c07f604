"""agent-service's admin API through the running service: who may use it, its forwarding of the tenant's servers to
the gateway's tenant API (a scripted gateway that speaks exactly that API), and the tenant runtime kept in the run
store (SQLite and PostgreSQL).

Tenants: ``acme`` (an admin key, a plain key, ``max_iterations = 8``, ``max_mcp_servers`` unset: 20) and ``globex``
(an admin key); one operator key (tenant ``ops``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from agent_service.app import create_app
from agent_service.settings import AgentSettings
from support.caller_keys import as_caller, key_entry
from support.databases import fresh_postgres_database
from support.scripted_tenant_gateway import ScriptedTenantGateway
from support.servers import free_port, serve_app

pytestmark = pytest.mark.anyio

SECRET = "gateway-secret-" + uuid.uuid4().hex
ACME_ADMIN = "acme-admin-" + uuid.uuid4().hex
ACME_APP = "acme-app-" + uuid.uuid4().hex
GLOBEX_ADMIN = "globex-admin-" + uuid.uuid4().hex
OPERATOR = "operator-" + uuid.uuid4().hex
HEADER_VALUE = "Bearer tenant-secret-" + uuid.uuid4().hex

CALLERS_FILE = f"""
[tenants.acme]
max_iterations = 8
[tenants.globex]
[tenants.ops]

{key_entry("acme-admin", "acme", ACME_ADMIN)}role = "admin"

{key_entry("acme-app", "acme", ACME_APP)}
{key_entry("globex-admin", "globex", GLOBEX_ADMIN)}role = "admin"

{key_entry("operator", "ops", OPERATOR)}role = "operator"
"""

CRM = {"name": "crm", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": HEADER_VALUE}}


@dataclass
class Admin:
    gateway: ScriptedTenantGateway
    http: httpx.AsyncClient

    async def call(self, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
        return await self.http.request(method, path, headers=as_caller(key), **kwargs)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture
async def admin(tmp_path: Path, database_url: str) -> AsyncIterator[Admin]:
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE)
    gateway = ScriptedTenantGateway(SECRET)
    async with serve_app(gateway.app) as gateway_url:
        settings = AgentSettings(
            completion_url=f"http://127.0.0.1:{free_port()}",  # not asked by the admin API
            mcp_client_url=gateway_url,
            mcp_service_secret=SecretStr(SECRET),
            callers_file=callers,
            database_url=database_url,
            catalog_cache_seconds=60,
            tool_cache_seconds=30,
        )
        async with (
            serve_app(create_app(settings)) as agent_url,
            httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
        ):
            yield Admin(gateway, http)


def _error(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


async def test_only_admin_and_operator_keys_may_use_the_admin_api(admin: Admin) -> None:
    for path in ("/api/v1/admin/mcp-servers", "/api/v1/admin/runtime"):
        assert _error(await admin.call("GET", path, ACME_APP)) == (403, "admin_only")
        assert (await admin.http.get(path)).status_code == 401
        assert _error(await admin.call("GET", path, OPERATOR)) == (400, "invalid_request")  # no ?tenant=
        assert _error(await admin.call("GET", path, ACME_ADMIN, params={"tenant": "globex"})) == (403, "admin_only")
    assert (await admin.call("PATCH", "/api/v1/admin/runtime", ACME_APP, json={"maxIterations": 2})).status_code == 403
    created = await admin.call("POST", "/api/v1/admin/mcp-servers", ACME_APP, json=CRM)
    assert _error(created) == (403, "admin_only")
    assert not [r for r in admin.gateway.requests if "/tenants/" in r.path]  # refused before the gateway


async def test_an_admin_registers_lists_switches_off_and_deletes_its_tenants_server(admin: Admin) -> None:
    with capture_logs() as logs:
        created = await admin.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)
    assert created.status_code == 201, created.text
    assert created.json()["headerNames"] == ["Authorization"]
    assert created.json()["state"] == "connecting"
    sent = admin.gateway.requests[-1]
    assert (sent.method, sent.path, sent.query) == ("POST", "/mcp/v1/tenants/acme/servers", {"maxServers": "20"})
    assert sent.headers["x-mcp-service-secret"] == SECRET

    listed = await admin.call("GET", "/api/v1/admin/mcp-servers", ACME_ADMIN)
    assert listed.status_code == 200
    assert [server["name"] for server in listed.json()["servers"]] == ["crm"]
    assert listed.json()["maxServers"] == 20

    switched = await admin.call("PATCH", "/api/v1/admin/mcp-servers/crm", ACME_ADMIN, json={"enabled": False})
    assert switched.status_code == 200, switched.text
    assert (switched.json()["enabled"], switched.json()["state"]) == (False, "disabled")
    assert admin.gateway.requests[-1].body == b'{"enabled":false}'  # only the fields the admin set

    cleared = await admin.call("PATCH", "/api/v1/admin/mcp-servers/crm", ACME_ADMIN, json={"allowedTools": None})
    assert cleared.status_code == 200
    assert admin.gateway.requests[-1].body == b'{"allowedTools":null}'  # null sent: every tool offered again

    assert (await admin.call("GET", "/api/v1/admin/mcp-servers/crm", ACME_ADMIN)).json()["name"] == "crm"
    deleted = await admin.call("DELETE", "/api/v1/admin/mcp-servers/crm", ACME_ADMIN)
    assert deleted.status_code == 204
    assert _error(await admin.call("GET", "/api/v1/admin/mcp-servers/crm", ACME_ADMIN)) == (404, "server_not_found")
    changes = [(log["action"], log["server"], log["by"]) for log in logs if log["event"] == "tenant_server_changed"]
    assert changes == [("created", "crm", "acme-admin")]
    assert HEADER_VALUE not in str(logs)


async def test_the_gateways_refusals_reach_the_admin_as_it_said_them(admin: Admin) -> None:
    assert (await admin.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)).status_code == 201
    again = await admin.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)
    assert again.json() == {"error": {"code": "server_exists", "message": "A server named crm exists."}}
    assert again.status_code == 409
    metadata = {"name": "meta", "url": "http://169.254.169.254/"}
    blocked = await admin.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=metadata)
    assert _error(blocked) == (422, "url_not_allowed")
    assert "cloud metadata" in blocked.json()["error"]["message"]
    missing = await admin.call("PATCH", "/api/v1/admin/mcp-servers/nope", ACME_ADMIN, json={"enabled": False})
    assert _error(missing) == (404, "server_not_found")
    bad = await admin.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json={**CRM, "command": "rm"})
    assert _error(bad) == (400, "invalid_request")  # extra fields forbidden, checked before the gateway


async def test_a_tenant_never_reaches_another_tenants_servers(admin: Admin) -> None:
    assert (await admin.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)).status_code == 201
    assert (await admin.call("GET", "/api/v1/admin/mcp-servers", GLOBEX_ADMIN)).json()["servers"] == []
    for method in ("GET", "DELETE"):
        assert _error(await admin.call(method, "/api/v1/admin/mcp-servers/crm", GLOBEX_ADMIN))[0] == 404
    assert {r.path for r in admin.gateway.requests if "globex" in r.path} == {
        "/mcp/v1/tenants/globex/servers",
        "/mcp/v1/tenants/globex/servers/crm",
    }


async def test_an_operator_acts_for_the_tenant_it_names(admin: Admin) -> None:
    created = await admin.call("POST", "/api/v1/admin/mcp-servers", OPERATOR, params={"tenant": "globex"}, json=CRM)
    assert created.status_code == 201, created.text
    assert admin.gateway.requests[-1].path == "/mcp/v1/tenants/globex/servers"
    runtime = await admin.call("GET", "/api/v1/admin/runtime", OPERATOR, params={"tenant": "acme"})
    assert runtime.json()["tenant"] == "acme"
    assert runtime.json()["caps"]["maxIterations"] == 8  # acme's rules, not the operator's own tenant's
    bad = await admin.call("GET", "/api/v1/admin/runtime", OPERATOR, params={"tenant": "../x"})
    assert _error(bad) == (400, "invalid_request")


async def test_a_change_of_servers_drops_this_replicas_cached_tool_list_of_that_tenant(admin: Admin) -> None:
    tools = await admin.call("GET", "/api/v1/agent/tools", ACME_ADMIN)
    assert tools.json()["tools"] == []
    assert (await admin.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)).status_code == 201
    tools = await admin.call("GET", "/api/v1/agent/tools", ACME_ADMIN)  # within the 60 s the list is cached for
    assert [tool["name"] for tool in tools.json()["tools"]] == ["crm_tool"]
    listings = [r for r in admin.gateway.requests if r.path.endswith("/list-tools")]
    assert [r.headers.get("x-tenant-id") for r in listings] == ["acme", "acme"]


async def test_an_answer_carries_no_header_value_whatever_the_gateway_sends(admin: Admin) -> None:
    admin.gateway.leak_header_values = True
    created = await admin.call("POST", "/api/v1/admin/mcp-servers", ACME_ADMIN, json=CRM)
    listed = await admin.call("GET", "/api/v1/admin/mcp-servers", ACME_ADMIN)
    for response in (created, listed):
        assert response.status_code in (200, 201)
        assert HEADER_VALUE not in response.text


async def test_the_runtime_answers_the_operators_defaults_until_the_admin_sets_values(admin: Admin) -> None:
    runtime = await admin.call("GET", "/api/v1/admin/runtime", ACME_ADMIN)
    assert runtime.status_code == 200, runtime.text
    assert runtime.json() == {
        "tenant": "acme",
        "maxIterations": 8,
        "toolCacheSeconds": 30.0,
        "streamMode": "live",
        "agentEnabled": True,
        "caps": {"maxIterations": 8, "toolCacheSeconds": 30.0},
        "setByAdmin": [],
    }
    changed = await admin.call(
        "PATCH", "/api/v1/admin/runtime", ACME_ADMIN, json={"maxIterations": 5, "streamMode": "final_only"}
    )
    assert changed.status_code == 200, changed.text
    assert (changed.json()["maxIterations"], changed.json()["streamMode"]) == (5, "final_only")
    turned_off = await admin.call("PATCH", "/api/v1/admin/runtime", ACME_ADMIN, json={"agentEnabled": False})
    assert turned_off.json()["setByAdmin"] == ["agentEnabled", "maxIterations", "streamMode"]  # merged, not replaced
    cleared = await admin.call("PATCH", "/api/v1/admin/runtime", ACME_ADMIN, json={"maxIterations": None})
    assert cleared.json()["maxIterations"] == 8
    read = await admin.call("GET", "/api/v1/admin/runtime", ACME_ADMIN)
    assert read.json() == cleared.json()
    other = await admin.call("GET", "/api/v1/admin/runtime", GLOBEX_ADMIN)
    assert other.json()["agentEnabled"] is True  # globex's own, untouched


async def test_a_runtime_value_above_a_cap_is_a_422_naming_the_cap(admin: Admin) -> None:
    above = await admin.call("PATCH", "/api/v1/admin/runtime", ACME_ADMIN, json={"maxIterations": 9})
    assert _error(above) == (422, "above_cap")
    assert "at most 8, the tenant's cap" in above.json()["error"]["message"]
    cache = await admin.call("PATCH", "/api/v1/admin/runtime", ACME_ADMIN, json={"toolCacheSeconds": 31})
    assert _error(cache) == (422, "above_cap")
    unknown = await admin.call("PATCH", "/api/v1/admin/runtime", ACME_ADMIN, json={"maxIterationz": 3})
    assert _error(unknown) == (400, "invalid_request")
