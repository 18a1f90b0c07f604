"""How many PostgreSQL connections the run store keeps for runs' writes (``AGENT_DATABASE_POOL_SIZE``): as many as one
tenant may have runs in progress at once, unless the setting says otherwise."""

from __future__ import annotations

from pydantic import SecretStr

from agent_service.access.callers_file import parse_callers
from agent_service.app import store_pool_size
from agent_service.settings import AgentSettings

CALLERS = """
[tenants.acme]
max_concurrent_runs = 40

[tenants.globex]
max_concurrent_runs = 4

[[keys]]
name = "acme-platform"
tenant = "acme"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
"""


def settings(**values: object) -> AgentSettings:
    return AgentSettings(mcp_service_secret=SecretStr("s3cret"), **values)  # type: ignore[arg-type]


def test_the_pool_holds_the_per_tenant_cap_of_runs() -> None:
    assert store_pool_size(settings(max_concurrent_runs_per_tenant=16), None) == 16
    assert store_pool_size(settings(max_concurrent_runs_per_tenant=24), None) == 24


def test_a_tenant_allowed_more_runs_in_the_callers_file_widens_the_pool() -> None:
    callers = parse_callers(CALLERS, environ={})
    assert store_pool_size(settings(max_concurrent_runs_per_tenant=16), callers) == 40


def test_runs_capped_nowhere_get_the_default_caps_pool() -> None:
    assert store_pool_size(settings(max_concurrent_runs_per_tenant=0), None) == 16


def test_the_setting_overrides_what_the_caps_say() -> None:
    callers = parse_callers(CALLERS, environ={})
    assert store_pool_size(settings(database_pool_size=6), callers) == 6
