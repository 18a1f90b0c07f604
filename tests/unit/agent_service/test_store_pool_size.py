"""How many PostgreSQL connections the run store keeps for runs' writes (``AGENT_DATABASE_POOL_SIZE``): as many as one
tenant may have runs in progress at once, unless the setting says otherwise."""

from __future__ import annotations

from pydantic import SecretStr

from agent_service.access.callers_file import Callers, parse_callers
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


def capped(tenant: str, cap: int) -> Callers:
    """A callers file of one tenant, ``tenant``, with its own cap of ``cap`` runs at once."""
    key = f'[[keys]]\nname = "k"\ntenant = "{tenant}"\nsha256 = "{"0" * 64}"\n'
    return parse_callers(f"[tenants.{tenant}]\nmax_concurrent_runs = {cap}\n\n{key}", environ={})


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


def test_uncapped_tenants_share_at_least_the_default_caps_pool_whatever_one_tenants_cap() -> None:
    one_small_cap = capped("globex", 4)
    assert store_pool_size(settings(max_concurrent_runs_per_tenant=0), one_small_cap) == 16
    uncapped_tenant = capped("globex", 0)
    assert store_pool_size(settings(max_concurrent_runs_per_tenant=4), uncapped_tenant) == 16


def test_a_large_cap_keeps_at_most_64_connections_unless_the_setting_says_more() -> None:
    large = capped("acme", 500)
    assert store_pool_size(settings(max_concurrent_runs_per_tenant=16), large) == 64
    assert store_pool_size(settings(max_concurrent_runs_per_tenant=500), None) == 64
    assert store_pool_size(settings(database_pool_size=200), large) == 200


def test_a_pool_for_small_caps_everywhere_is_as_small_as_they_are() -> None:
    small = capped("acme", 4)
    assert store_pool_size(settings(max_concurrent_runs_per_tenant=2), small) == 4
