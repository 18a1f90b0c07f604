"""End users' roles and keys' roles: the callers file's ``tool_roles``, ``role_monthly_*``, ``max_mcp_servers`` and a
key's ``role``; which tools a role is offered (the tenant's own tools past its ``tools``/``deny_tools``); a role's
monthly budget; and ``X-User-Role`` as ``CallerMiddleware`` reads it (trusted keys only, like ``X-User-Id``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agent_service.access.callers_file import CallersFileError, parse_callers
from agent_service.access.stored_keys import StoredKeys
from agent_service.admission.budgets import Budgets
from agent_service.admission.planning import ToolCatalog, allowed_tools, plan_run
from agent_service.admission.spend_ledgers import LocalSpendLedger
from agent_service.api.auth import CallerMiddleware, caller_of
from agent_service.core.tenancy import TenantRules, UserRole
from agent_service.store import StoredCallerKey
from suite_common.deadline import Deadline
from suite_common.errors import ApiError
from suite_common.wire import DEFAULT_MAX_TENANT_SERVERS, AgentRunRequest, ToolInfo, Usage
from support.caller_keys import key_sha256
from unit.agent_service.test_callers_file import _with_tenant_fields
from unit.agent_service.test_planning import MODELS, SETTINGS
from unit.agent_service.test_stored_keys import FakeKeys

pytestmark = pytest.mark.anyio


def _tenant(fields: str) -> TenantRules:
    return parse_callers(_with_tenant_fields(fields)).rules["acme"]


# --- the callers file ------------------------------------------------------------------------------------------


def test_a_tenants_roles_budgets_and_server_cap_are_read() -> None:
    rules = _tenant(
        'tool_roles = {"rag:add_documents" = "admin", "web:*" = "user"}\n'
        "role_monthly_tokens = {guest = 5000, admin = 900000}\n"
        "role_monthly_cost_usd = {guest = 1}\n"
        "max_mcp_servers = 3\n"
    )
    assert rules.tool_roles == {"rag:add_documents": "admin", "web:*": "user"}
    assert rules.role_monthly_tokens == {"guest": 5000, "admin": 900000}
    assert rules.role_monthly_cost_usd == {"guest": 1.0}
    assert isinstance(rules.role_monthly_cost_usd["guest"], float)
    assert rules.max_mcp_servers == 3
    assert rules.has_monthly_budget  # a role's budget alone is one


def test_without_those_fields_every_role_may_use_every_tool_and_a_tenant_may_have_20_servers() -> None:
    rules = _tenant("")
    assert (rules.tool_roles, rules.role_monthly_tokens, rules.max_mcp_servers) == ({}, {}, DEFAULT_MAX_TENANT_SERVERS)
    assert DEFAULT_MAX_TENANT_SERVERS == 20
    assert rules.role_allows_tool("guest", "rag", "add_documents")
    assert not rules.has_monthly_budget


def test_a_keys_role_is_read_and_a_wrong_one_refused() -> None:
    keys = f'[tenants.acme]\n[[keys]]\nname = "k"\ntenant = "acme"\nsha256 = "{key_sha256("x")}"\n'
    assert parse_callers(keys + 'role = "admin"\n').keys[0].role == "admin"
    assert parse_callers(keys + 'role = "operator"\n').keys[0].role == "operator"
    assert parse_callers(keys).keys[0].role is None
    with pytest.raises(CallersFileError, match="role must be one of admin, operator"):
        parse_callers(keys + 'role = "owner"\n')


# --- which tools a role may use --------------------------------------------------------------------------------


def test_a_tool_matched_by_several_patterns_needs_the_highest_role_and_an_unlisted_one_none() -> None:
    rules = TenantRules(tool_roles={"rag:*": "user", "rag:add_documents": "admin", "add_documents": "guest"})
    assert rules.lowest_role("rag", "add_documents") == "admin"
    assert rules.lowest_role("rag", "search_documents") == "user"
    assert rules.lowest_role("web", "search") is None
    assert [
        role for role in ("guest", "user", "admin", "owner") if rules.role_allows_tool(role, "rag", "add_documents")
    ] == [
        "admin",
        "owner",
    ]
    assert rules.role_allows_tool("guest", "web", "search")
    # a renamed tool is matched by its server's own name too, as tools/deny_tools match it
    assert not rules.role_allows_tool("user", "rag", "rag__add_documents", "add_documents")


def _tool(server: str, name: str, tenant: str | None = None) -> ToolInfo:
    return ToolInfo(name=name, input_schema={"type": "object"}, server=server, tenant=tenant)


def test_tools_and_deny_tools_choose_among_shared_tools_and_tool_roles_among_all() -> None:
    rules = TenantRules(tools=("web:*",), deny_tools=("crm:delete",), tool_roles={"crm:export": "admin"})
    listed = [
        _tool("web", "search"),
        _tool("rag", "search_documents"),  # shared, not in tools
        _tool("crm", "lookup", tenant="acme"),  # the tenant's own: tools/deny_tools say nothing of it
        _tool("crm", "delete", tenant="acme"),
        _tool("crm", "export", tenant="acme"),  # its own, but for admins only
    ]

    def names(role: UserRole) -> list[str]:
        return [tool.name for tool in allowed_tools(listed, rules, role)]

    assert names("user") == ["search", "lookup", "delete"]
    assert names("admin") == ["search", "lookup", "delete", "export"]


class _Tools:
    """The gateway's tool list, for ``ToolCatalog``: a shared ``web`` server and the tenant's own ``crm``."""

    async def list_tools(self, deadline: Deadline, *, tenant: str) -> list[ToolInfo]:
        return [_tool("web", "web_search"), _tool("rag", "add_documents"), _tool("crm", "crm_export", "acme")]


_ROLES = TenantRules(tool_roles={"rag:add_documents": "admin", "crm:*": "owner"})


def _request(**fields: Any) -> AgentRunRequest:
    return AgentRunRequest.model_validate({"model": "demo", "messages": [{"role": "user", "content": "hi"}], **fields})


async def _planned(role: UserRole, **fields: Any) -> list[str]:
    catalog = ToolCatalog(_Tools(), ttl=0)  # type: ignore[arg-type]
    plan = await plan_run(_request(**fields), SETTINGS, catalog, MODELS, rules=_ROLES, tenant="acme", role=role)
    return [tool.name for tool in plan.tools]


async def test_a_run_offers_only_the_tools_of_the_users_role() -> None:
    assert await _planned("guest") == ["web_search"]
    assert await _planned("user") == ["web_search"]
    assert await _planned("admin") == ["web_search", "add_documents"]
    assert await _planned("owner") == ["web_search", "add_documents", "crm_export"]


async def test_a_run_naming_a_tool_above_the_users_role_is_403_tool_not_allowed() -> None:
    with pytest.raises(ApiError) as refused:
        await _planned("guest", tools=["web_search", "add_documents"])
    assert (refused.value.status, refused.value.code) == (403, "tool_not_allowed")
    assert refused.value.message == "Tools not allowed to the end user's role (guest): add_documents."
    assert await _planned("admin", tools=["add_documents"]) == ["add_documents"]


async def test_a_tool_denied_to_the_tenant_is_still_refused_as_the_tenants() -> None:
    catalog = ToolCatalog(_Tools(), ttl=0)  # type: ignore[arg-type]
    rules = TenantRules(deny_tools=("web:*",))
    with pytest.raises(ApiError) as refused:
        await plan_run(_request(tools=["web_search"]), SETTINGS, catalog, MODELS, rules=rules, role="owner")
    assert (refused.value.code, refused.value.message) == (
        "tool_not_allowed",
        "Tools not allowed to this caller's tenant: web_search.",
    )


# --- a role's monthly budget -----------------------------------------------------------------------------------


def test_a_users_budget_is_its_roles_else_none_for_admins_and_owners_else_the_tenants_per_user() -> None:
    rules = TenantRules(user_monthly_tokens=100, role_monthly_tokens={"guest": 10, "owner": 1000})
    assert rules.user_monthly_tokens_of("guest") == (10, "role_monthly_tokens.guest")
    assert rules.user_monthly_tokens_of("user") == (100, "user_monthly_tokens")
    assert rules.user_monthly_tokens_of("admin") == (None, "role_monthly_tokens.admin")
    assert rules.user_monthly_tokens_of("owner") == (1000, "role_monthly_tokens.owner")
    assert TenantRules(user_monthly_cost_usd=2.0).user_monthly_cost_usd_of("user") == (2.0, "user_monthly_cost_usd")


async def test_a_guests_budget_stops_guests_and_an_owners_runs_are_not_counted_against_a_user_budget() -> None:
    rules = TenantRules(user_monthly_tokens=50, role_monthly_tokens={"guest": 10})
    spend = Budgets(LocalSpendLedger(), rules={"acme": rules}, clock=lambda: datetime(2026, 11, 26, tzinfo=UTC))
    guest = await spend.admit("acme", "gina", "guest")
    owner = await spend.admit("acme", "olga", "owner")
    assert guest is not None
    assert owner is not None
    await guest.spent(Usage(input_tokens=10))
    await owner.spent(Usage(input_tokens=10_000))
    assert await guest.exhausted() == "user_monthly_tokens"
    assert await owner.exhausted() is None
    with pytest.raises(ApiError) as refused:
        await spend.admit("acme", "gina", "guest")
    assert "(role_monthly_tokens.guest: 10 of 10 tokens" in refused.value.message
    await spend.admit("acme", "olga", "owner")
    await spend.admit("acme", "gina", "user")  # the same counter, the limit of the role named now: 10 of 50


# --- X-User-Role ------------------------------------------------------------------------------------------------


async def _whoami(request: Request) -> JSONResponse:
    caller = caller_of(request)
    return JSONResponse({"name": caller.name, "user": caller.user, "role": caller.role, "keyRole": caller.key_role})


_CALLERS = f"""
[tenants.acme]
[[keys]]
name = "acme-trusted"
tenant = "acme"
sha256 = "{key_sha256("trusted-key")}"
trusted = true
role = "admin"
[[keys]]
name = "acme-app"
tenant = "acme"
sha256 = "{key_sha256("app-key")}"
"""


def _middleware_client() -> httpx.AsyncClient:
    stored = StoredKeys(cache_seconds=0)
    operator = StoredCallerKey(name="ops", tenant="acme", trusted=False, created_at=datetime.now(UTC), role="operator")
    stored.attach(FakeKeys({"store-key": operator}))
    app = Starlette(routes=[Route("/api/v1/agent/whoami", _whoami), Route("/v1/whoami", _whoami)])
    app.add_middleware(CallerMiddleware, callers=parse_callers(_CALLERS), stored=stored)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent")


def _by(key: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **headers}


async def test_a_trusted_key_names_the_users_role_and_without_it_the_user_is_a_user() -> None:
    async with _middleware_client() as client:
        named = await client.get("/api/v1/agent/whoami", headers=_by("trusted-key", **{"X-User-Role": "guest"}))
        both = await client.get(
            "/api/v1/agent/whoami", headers=_by("trusted-key", **{"X-User-Id": "u-1", "X-User-Role": "owner"})
        )
        plain = await client.get("/api/v1/agent/whoami", headers=_by("trusted-key", **{"X-User-Id": "u-1"}))
    assert named.json() == {"name": "acme-trusted", "user": None, "role": "guest", "keyRole": "admin"}
    assert both.json() == {"name": "acme-trusted", "user": "u-1", "role": "owner", "keyRole": "admin"}
    assert plain.json()["role"] == "user"


async def test_a_stored_keys_role_reaches_the_caller() -> None:
    async with _middleware_client() as client:
        response = await client.get("/api/v1/agent/whoami", headers=_by("store-key"))
    assert response.json() == {"name": "ops", "user": None, "role": "user", "keyRole": "operator"}


async def test_an_untrusted_key_naming_a_role_is_403_and_a_wrong_role_400_invalid_user_role() -> None:
    async with _middleware_client() as client:
        untrusted = await client.get("/api/v1/agent/whoami", headers=_by("app-key", **{"X-User-Role": "owner"}))
        wrong = await client.get("/api/v1/agent/whoami", headers=_by("trusted-key", **{"X-User-Role": "root"}))
        cased = await client.get("/api/v1/agent/whoami", headers=_by("trusted-key", **{"X-User-Role": "Admin"}))
        openai = await client.get("/v1/whoami", headers=_by("trusted-key", **{"X-User-Role": "root"}))
    assert untrusted.status_code == 403
    assert untrusted.json()["error"]["code"] == "user_not_allowed"
    assert "(X-User-Role)" in untrusted.json()["error"]["message"]
    assert wrong.status_code == cased.status_code == 400
    assert wrong.json()["error"] == {
        "code": "invalid_user_role",
        "message": "X-User-Role must be one of guest, user, admin, owner (got 'root').",
    }
    assert openai.status_code == 400
    assert openai.json()["error"]["code"] == "invalid_user_role"  # in the OpenAI error shape


async def test_the_lines_logged_for_a_request_carry_the_users_role() -> None:
    async def bound(request: Request) -> JSONResponse:
        return JSONResponse(structlog.contextvars.get_contextvars())  # what every line logged now carries

    app = Starlette(routes=[Route("/api/v1/agent/bound", bound)])
    app.add_middleware(CallerMiddleware, callers=parse_callers(_CALLERS))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client:
        named = await client.get("/api/v1/agent/bound", headers=_by("trusted-key", **{"X-User-Role": "guest"}))
        unnamed = await client.get("/api/v1/agent/bound", headers=_by("trusted-key"))
    assert named.json() == {"caller": "acme-trusted", "tenant": "acme", "user_role": "guest"}
    assert "user_role" not in unnamed.json()


@pytest.mark.parametrize(
    ("rules", "allowed", "lowest"),
    [
        (TenantRules(), True, None),  # no rule at all: every tool, every role (answered without matching)
        (TenantRules(deny_tools=("echo:whoami",)), False, None),  # a deny rule alone still denies
        (TenantRules(tools=("echo:*",)), True, None),
        (TenantRules(tool_roles={"echo:*": "admin", "whoami": "user"}), True, "admin"),  # the highest matching
        (TenantRules(tool_roles={"other:*": "admin"}), True, None),
    ],
)
def test_a_tenant_without_a_tool_rule_allows_every_tool_to_every_role_and_one_rule_still_applies(
    rules: TenantRules, allowed: bool, lowest: UserRole | None
) -> None:
    assert rules.allows_tool("echo", "e_whoami", "whoami") is allowed
    assert rules.lowest_role("echo", "e_whoami", "whoami") == lowest
    assert rules.role_allows_tool("guest", "echo", "e_whoami", "whoami") is (lowest is None)
