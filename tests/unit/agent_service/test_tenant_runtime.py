"""A tenant's runtime: the admin's values within the operator's caps, its defaults, and what a change may ask."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from agent_service.admission.tenant_runtime import TenantRuntimes, checked_changes, runtime_in_force
from agent_service.core.tenancy import TenantRules
from agent_service.settings import AgentSettings
from suite_common.errors import ApiError
from suite_common.wire import TenantRuntimePatch

pytestmark = pytest.mark.anyio


def settings(**fields: Any) -> AgentSettings:
    return AgentSettings(mcp_service_secret=SecretStr("s"), **fields)


def test_without_an_admins_values_the_runtime_is_the_operators_defaults_and_caps() -> None:
    runtime = runtime_in_force(
        {},
        settings(
            max_iterations=12, tool_cache_seconds=30, tool_cache_ttls={"web:*": 90}, openai_stream_mode="final_only"
        ),
        TenantRules(max_iterations=8),
    )
    assert (runtime.max_iterations, runtime.tool_cache_seconds) == (8, 90)
    assert (runtime.stream_mode, runtime.agent_enabled) == ("final_only", True)
    assert (runtime.caps.max_iterations, runtime.caps.tool_cache_seconds) == (8, 90)
    assert runtime.set_by_admin == ()


def test_the_admins_values_apply_and_a_lowered_cap_lowers_them() -> None:
    stored = {"maxIterations": 6, "toolCacheSeconds": 20, "streamMode": "disabled", "agentEnabled": False}
    runtime = runtime_in_force(stored, settings(tool_cache_seconds=60), TenantRules(max_iterations=4))
    assert (runtime.max_iterations, runtime.tool_cache_seconds) == (4, 20)
    assert (runtime.stream_mode, runtime.agent_enabled) == ("disabled", False)
    assert runtime.set_by_admin == ("agentEnabled", "maxIterations", "streamMode", "toolCacheSeconds")


def test_a_stored_row_this_service_cannot_read_is_the_operators_defaults() -> None:
    runtime = runtime_in_force({"maxIterations": "many"}, settings(), TenantRules())
    assert runtime.max_iterations == 15
    assert runtime.set_by_admin == ()


@pytest.mark.parametrize(
    ("patch", "cap"),
    [
        ({"maxIterations": 9}, "at most 8, the tenant's cap (max_iterations in the callers file)"),
        ({"toolCacheSeconds": 61}, "at most 60, the longest lifetime the service's tool cache gives any tool"),
    ],
)
def test_a_value_above_a_cap_is_a_422_naming_the_cap(patch: dict[str, Any], cap: str) -> None:
    with pytest.raises(ApiError) as caught:
        checked_changes(
            TenantRuntimePatch.model_validate(patch), settings(tool_cache_seconds=60), TenantRules(max_iterations=8)
        )
    assert (caught.value.status, caught.value.code) == (422, "above_cap")
    assert cap in caught.value.message


def test_the_service_cap_is_named_when_it_is_the_lower_one() -> None:
    with pytest.raises(ApiError) as caught:
        checked_changes(TenantRuntimePatch(max_iterations=11), settings(max_iterations=10), TenantRules())
    assert "AGENT_MAX_ITERATIONS" in caught.value.message


def test_a_change_keeps_the_fields_it_sets_and_null_clears_one() -> None:
    patch = TenantRuntimePatch.model_validate({"maxIterations": None, "streamMode": "live"})
    assert checked_changes(patch, settings(), TenantRules()) == {"maxIterations": None, "streamMode": "live"}


async def test_without_a_run_store_the_runtime_is_the_defaults_and_cannot_change() -> None:
    runtimes = TenantRuntimes(None, settings())
    assert (await runtimes.of("acme", TenantRules())).max_iterations == 15
    with pytest.raises(ApiError) as caught:
        await runtimes.change("acme", TenantRules(), TenantRuntimePatch(max_iterations=3), updated_by="k")
    assert (caught.value.status, caught.value.code) == (404, "runtime_not_stored")
