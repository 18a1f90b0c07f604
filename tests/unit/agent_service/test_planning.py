"""Turning a run request into a plan: limits, tool discovery and filtering, all before streaming."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import SecretStr, ValidationError

from agent_service.admission.planning import ModelCheck, ToolCatalog, plan_run
from agent_service.admission.tenant_runtime import TenantRuntime, runtime_in_force
from agent_service.core.errors import UpstreamError
from agent_service.core.personas import Persona
from agent_service.core.tenancy import DEFAULT_TENANT, TenantRules
from agent_service.settings import AgentSettings
from suite_common.deadline import Deadline
from suite_common.errors import ApiError
from suite_common.wire import (
    AgentRunRequest,
    ModelPrices,
    ModelTarget,
    ResolvedModel,
    ToolInfo,
    ToolSpec,
    ToolUnavailable,
)

pytestmark = pytest.mark.anyio

SETTINGS = AgentSettings(mcp_service_secret=SecretStr("s"), max_iterations=15, run_deadline_seconds=120)


class FakeToolsClient:
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.calls = 0
        self.unavailable: dict[str, ToolUnavailable] = {}
        """Tools listed as unavailable (their server restarting), by name."""
        self.tenants: list[str | None] = []
        """The tenant each listing was asked for."""

    async def list_tools(self, deadline: Deadline, *, tenant: str | None = None) -> list[ToolInfo]:
        self.calls += 1
        self.tenants.append(tenant)
        return [
            ToolInfo(name=n, input_schema={"type": "object"}, server="s", unavailable=self.unavailable.get(n))
            for n in self.names
        ]


CONFIGURE = "Configure a provider to use other models: COMPLETION_OPENAI_API_KEY or COMPLETION_OPENAI_BASE_URL."

PRICES = ModelPrices(input_per_million_usd=2.5, output_per_million_usd=10)


class FakeCompletionClient:
    """completion-service's model check over a catalog whose models are all priced, but the ``unpriced`` ones;
    ``fallbacks``: each model's, by name."""

    def __init__(self, models: set[str]) -> None:
        self.models = models
        self.unpriced: set[str] = set()
        self.fallbacks: dict[str, list[str]] = {}
        self.calls = 0
        self.checked: list[str] = []
        self.answer: dict[str, anyio.Event] = {}
        """Models whose check waits for this event (completion-service taking its time)."""

    def _target(self, model: str) -> ModelTarget:
        prices = None if model in self.unpriced else PRICES
        return ModelTarget(id=model, provider="openai", upstream_model=model, prices=prices)

    async def check_model(self, model: str, deadline: Deadline) -> ResolvedModel:
        self.calls += 1
        self.checked.append(model)
        if model in self.answer:
            await self.answer[model].wait()
        if model not in self.models:
            # completion-service's own words: its whole catalog, and the operator's settings to configure more.
            message = f"Unknown model {model!r}. Available models: {', '.join(sorted(self.models))}. {CONFIGURE}"
            raise UpstreamError("model_not_found", message, status=400)
        fallbacks = [self._target(name) for name in self.fallbacks.get(model, [])]
        return ResolvedModel(**dict(self._target(model)), fallbacks=fallbacks or None)

    async def list_models(self, deadline: Deadline) -> list[dict[str, Any]]:
        return [{"id": name, "provider": "openai"} for name in sorted(self.models)] + [{"id": "openai/*"}]


def models(*names: str, ttl: float = 0) -> tuple[ModelCheck, FakeCompletionClient]:
    client = FakeCompletionClient(set(names) or {"demo"})
    return ModelCheck(client, ttl), client  # type: ignore[arg-type]


MODELS = models()[0]


def request(**fields: Any) -> AgentRunRequest:
    return AgentRunRequest.model_validate({"model": "demo", "messages": [{"role": "user", "content": "hi"}], **fields})


def catalog(*names: str, ttl: float = 0) -> tuple[ToolCatalog, FakeToolsClient]:
    client = FakeToolsClient(list(names))
    return ToolCatalog(client, ttl), client  # type: ignore[arg-type]


async def test_omitted_tools_means_every_available_tool() -> None:
    tools, _ = catalog("search_documents", "web_search")
    plan = await plan_run(request(), SETTINGS, tools, MODELS)
    assert [t.name for t in plan.tools] == ["search_documents", "web_search"]
    assert plan.limits.max_iterations == 15


async def test_requested_tools_are_filtered_in_request_order() -> None:
    tools, _ = catalog("search_documents", "web_search")
    plan = await plan_run(request(tools=["web_search"]), SETTINGS, tools, MODELS)
    assert [t.name for t in plan.tools] == ["web_search"]


async def test_an_unknown_tool_name_is_a_400_listing_the_available_ones() -> None:
    tools, _ = catalog("search_documents", "web_search")
    with pytest.raises(ApiError) as caught:
        await plan_run(request(tools=["web_search", "rm_rf"]), SETTINGS, tools, MODELS)
    assert caught.value.status == 400
    assert caught.value.code == "unknown_tools"
    assert "rm_rf" in caught.value.message
    assert "search_documents, web_search" in caught.value.message


RESTARTING = ToolUnavailable(reason='its MCP server "s" is not ready (failed: killed)', retry_after_seconds=2.3)


async def test_a_named_tool_that_is_unavailable_for_now_stays_in_the_run() -> None:
    tools, client = catalog("search_documents", "web_search")
    client.unavailable["web_search"] = RESTARTING

    plan = await plan_run(request(tools=["web_search", "search_documents"]), SETTINGS, tools, MODELS)

    assert [(t.name, t.unavailable) for t in plan.tools] == [("web_search", RESTARTING), ("search_documents", None)]


async def test_omitted_tools_leave_out_the_ones_that_are_unavailable_now() -> None:
    tools, client = catalog("search_documents", "web_search")
    client.unavailable["web_search"] = RESTARTING

    plan = await plan_run(request(), SETTINGS, tools, MODELS)

    assert [t.name for t in plan.tools] == ["search_documents"]


async def test_a_run_whose_tools_are_all_unavailable_is_a_503_with_retry_after() -> None:
    tools, client = catalog("search_documents", "web_search")
    client.unavailable = {
        "web_search": RESTARTING,
        "search_documents": RESTARTING.model_copy(update={"retry_after_seconds": 7}),
    }

    with pytest.raises(ApiError) as caught:
        await plan_run(request(tools=["web_search", "search_documents"]), SETTINGS, tools, MODELS)

    assert (caught.value.status, caught.value.code) == (503, "tools_unavailable")
    assert caught.value.headers == {"Retry-After": "3"}  # the soonest, rounded up
    assert 'web_search: its MCP server "s" is not ready (failed: killed)' in caught.value.message


async def test_a_cached_list_saying_all_are_unavailable_is_asked_again_before_refusing() -> None:
    tools, client = catalog("web_search", ttl=60)
    client.unavailable["web_search"] = RESTARTING
    await tools.tools(Deadline.after(5))  # cached while the server was restarting
    fetched_at, listed = tools._lists[DEFAULT_TENANT]
    tools._lists[DEFAULT_TENANT] = (fetched_at - 2, listed)  # two seconds ago
    client.unavailable.clear()  # back since

    plan = await plan_run(request(tools=["web_search"]), SETTINGS, tools, MODELS)

    assert [(t.name, t.unavailable) for t in plan.tools] == [("web_search", None)]
    assert client.calls == 2


class ToolsClientFailingOnTheRecheck(FakeToolsClient):
    """The first list says the named tool is unavailable; asked again, the gateway fails (in the test, the run's
    deadline is already within its slack: a failure then is the deadline's doing, not the gateway's)."""

    async def list_tools(self, deadline: Deadline, *, tenant: str | None = None) -> list[ToolInfo]:
        if self.calls == 0:
            return await super().list_tools(deadline, tenant=tenant)
        self.calls += 1
        raise UpstreamError("upstream_unavailable", "mcp-client-service did not answer", status=503)


async def test_a_recheck_cut_off_by_the_runs_deadline_keeps_the_tools_first_selected() -> None:
    client = ToolsClientFailingOnTheRecheck(["web_search"])
    client.unavailable["web_search"] = RESTARTING
    tools = ToolCatalog(client, 0)  # type: ignore[arg-type]

    plan = await plan_run(request(tools=["web_search"], deadlineSeconds=0.05), SETTINGS, tools, MODELS)

    assert [(t.name, t.unavailable) for t in plan.tools] == [("web_search", RESTARTING)]
    assert client.calls == 2


@pytest.mark.parametrize("fields", [{"tools": []}, {"toolChoice": "none"}])
async def test_the_plain_path_skips_tool_discovery(fields: dict[str, Any]) -> None:
    tools, client = catalog("web_search")
    plan = await plan_run(request(**fields), SETTINGS, tools, MODELS)
    assert plan.tools == []
    assert client.calls == 0


async def test_more_iterations_than_the_cap_is_refused() -> None:
    tools, _ = catalog()
    with pytest.raises(ApiError) as caught:
        await plan_run(request(maxIterations=16), SETTINGS, tools, MODELS)
    assert caught.value.status == 400
    assert "at most 15" in caught.value.message


async def test_fewer_iterations_and_a_shorter_deadline_are_honoured() -> None:
    tools, _ = catalog()
    plan = await plan_run(request(maxIterations=3, deadlineSeconds=5), SETTINGS, tools, MODELS)
    assert plan.limits.max_iterations == 3
    assert 4.5 < plan.limits.deadline.remaining() <= 5


async def test_a_longer_deadline_than_the_setting_is_refused() -> None:
    tools, _ = catalog()
    with pytest.raises(ApiError) as caught:
        await plan_run(request(deadlineSeconds=500), SETTINGS, tools, MODELS)
    assert caught.value.status == 400


TENANT_CAPS = TenantRules(max_iterations=5, max_run_seconds=30, max_run_tokens=1000, max_run_cost_usd=0.25)


async def test_a_tenants_caps_are_the_runs_limits_when_the_request_names_none() -> None:
    plain = await plan_run(request(), SETTINGS, catalog()[0], MODELS)
    assert (plain.limits.max_total_tokens, plain.limits.max_cost_usd) == (None, None)
    plan = await plan_run(request(), SETTINGS, catalog()[0], MODELS, rules=TENANT_CAPS)
    assert plan.limits.max_iterations == 5
    assert 29 < plan.limits.deadline.remaining() <= 30
    assert (plan.limits.max_total_tokens, plan.limits.max_cost_usd) == (1000, 0.25)


async def test_a_request_may_ask_for_less_than_its_tenants_caps() -> None:
    fields = {"maxIterations": 2, "deadlineSeconds": 10, "maxTotalTokens": 500, "maxCostUsd": 0.1}
    plan = await plan_run(request(**fields), SETTINGS, catalog()[0], MODELS, rules=TENANT_CAPS)
    limits = plan.limits
    assert (limits.max_iterations, limits.max_total_tokens, limits.max_cost_usd) == (2, 500, 0.1)
    assert limits.deadline.remaining() <= 10


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("maxIterations", 6, "maxIterations may be at most 5, the cap of the caller's tenant (got 6)"),
        ("deadlineSeconds", 31, "deadlineSeconds may be at most 30, the cap of the caller's tenant (got 31)"),
        ("maxTotalTokens", 1001, "maxTotalTokens may be at most 1000, the cap of the caller's tenant (got 1001)"),
        ("maxCostUsd", 0.3, "maxCostUsd may be at most 0.25, the cap of the caller's tenant (got 0.3)"),
    ],
)
async def test_a_request_over_its_tenants_cap_is_a_400_naming_the_cap(field: str, value: float, said: str) -> None:
    with pytest.raises(ApiError) as caught:
        await plan_run(request(**{field: value}), SETTINGS, catalog()[0], MODELS, rules=TENANT_CAPS)
    assert (caught.value.status, caught.value.code) == (400, "invalid_request")
    assert said in caught.value.message


async def test_the_lower_of_the_service_cap_and_the_tenant_cap_holds() -> None:
    generous = TenantRules(max_iterations=100, max_run_seconds=1000)
    plan = await plan_run(request(), SETTINGS, catalog()[0], MODELS, rules=generous)
    assert plan.limits.max_iterations == 15
    with pytest.raises(ApiError) as caught:
        await plan_run(request(maxIterations=16), SETTINGS, catalog()[0], MODELS, rules=generous)
    assert "at most 15, the service's cap (AGENT_MAX_ITERATIONS)" in caught.value.message


async def test_a_named_tool_choice_must_be_one_of_the_runs_tools() -> None:
    tools, _ = catalog("web_search")
    with pytest.raises(ApiError) as caught:
        await plan_run(request(toolChoice={"name": "search_documents"}), SETTINGS, tools, MODELS)
    assert caught.value.status == 400


async def test_the_catalog_is_reused_within_its_ttl() -> None:
    tools, client = catalog("web_search", ttl=60)
    for _ in range(3):
        await plan_run(request(), SETTINGS, tools, MODELS)
    assert client.calls == 1


async def test_an_unknown_model_is_a_400_before_anything_starts() -> None:
    tools, tool_client = catalog("web_search")
    checker, _ = models("demo")
    with pytest.raises(ApiError) as caught:
        await plan_run(request(model="gtp-4o"), SETTINGS, tools, checker)
    assert (caught.value.status, caught.value.code) == (400, "model_not_found")
    assert caught.value.message == "Unknown model 'gtp-4o'. Models this caller may run: demo, openai/*."
    assert tool_client.calls == 0


async def test_an_unknown_model_names_only_the_tenants_own_models_and_no_operator_setting() -> None:
    tools, _ = catalog("web_search")
    checker, _ = models("demo", "demo-large", "gpt-4o", "internal-finetune")
    rules = TenantRules(models=("demo*",))
    with pytest.raises(ApiError) as caught:
        await plan_run(request(model="demo-x"), SETTINGS, tools, checker, rules=rules)
    assert (caught.value.status, caught.value.code) == (400, "model_not_found")
    assert caught.value.message == "Unknown model 'demo-x'. Models this caller may run: demo, demo-large."
    assert "COMPLETION_" not in caught.value.message


async def test_an_unknown_model_for_a_tenant_with_no_listed_model_says_so() -> None:
    tools, _ = catalog("web_search")
    checker, _ = models("demo")
    with pytest.raises(ApiError) as caught:
        await plan_run(request(model="mine-1"), SETTINGS, tools, checker, rules=TenantRules(models=("mine-*",)))
    assert caught.value.message == "Unknown model 'mine-1'. This caller may run no listed model."


async def test_a_model_that_routes_is_remembered_within_the_ttl() -> None:
    tools, _ = catalog()
    checker, client = models("demo", ttl=60)
    for _ in range(3):
        await plan_run(request(), SETTINGS, tools, checker)
    assert client.calls == 1


async def test_the_model_memory_stays_bounded_whatever_names_callers_send() -> None:
    tools, _ = catalog()
    names = {f"model-{i}" for i in range(1000)}
    checker, _ = models(*names, ttl=60)
    for name in sorted(names):
        await plan_run(request(model=name), SETTINGS, tools, checker)
    assert len(checker._known) <= 256


async def test_runs_starting_together_on_a_model_not_yet_known_ask_completion_service_once() -> None:
    tools, _ = catalog()
    checker, client = models("demo", ttl=60)
    client.answer["demo"] = anyio.Event()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(plan_run, request(), SETTINGS, tools, checker)
            await anyio.wait_all_tasks_blocked()  # all 50 are past the cache and waiting
            client.answer["demo"].set()
    assert client.calls == 1
    assert checker._checking == {}  # nothing kept per model once nobody waits


async def test_a_slow_check_of_one_model_does_not_hold_up_runs_on_another() -> None:
    tools, _ = catalog()
    checker, client = models("demo", "fast", ttl=60)
    client.answer["demo"] = anyio.Event()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(plan_run, request(), SETTINGS, tools, checker)
            await anyio.wait_all_tasks_blocked()
            await plan_run(request(model="fast"), SETTINGS, tools, checker)  # would hang if it waited on "demo"
            client.answer["demo"].set()
    assert client.checked == ["demo", "fast"]


async def test_runs_waiting_on_a_check_that_fails_each_get_the_error() -> None:
    tools, _ = catalog()
    checker, client = models("demo", ttl=60)
    client.answer["gtp-4o"] = anyio.Event()
    errors: list[str] = []

    async def run() -> None:
        with pytest.raises(ApiError) as caught:
            await plan_run(request(model="gtp-4o"), SETTINGS, tools, checker)
        errors.append(caught.value.code)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(run)
            await anyio.wait_all_tasks_blocked()
            client.answer["gtp-4o"].set()
    assert errors == ["model_not_found"] * 3
    assert client.calls == 3  # names that do not route are asked again, one run after the other


async def test_a_client_side_tool_shadows_ours_of_the_same_name_and_may_be_the_named_choice() -> None:
    tools, _ = catalog("web_search", "get_weather")
    client_tools = [ToolSpec(name="get_weather", input_schema={"type": "object"})]
    plan = await plan_run(request(toolChoice={"name": "get_weather"}), SETTINGS, tools, MODELS, client_tools)
    assert [t.name for t in plan.tools] == ["web_search"]
    assert plan.client_tools == client_tools


async def test_required_tool_choice_is_satisfied_by_client_side_tools_alone() -> None:
    tools, _ = catalog()
    client_tools = [ToolSpec(name="get_weather")]
    plan = await plan_run(request(toolChoice="required"), SETTINGS, tools, MODELS, client_tools)
    assert (plan.tools, plan.tool_choice) == ([], "required")


@pytest.mark.parametrize("field", ["maxCostUsd", "deadlineSeconds"])
@pytest.mark.parametrize("value", ["1e400", "Infinity", "NaN"])
def test_an_infinite_limit_is_refused_as_bad_input_not_stored_as_no_limit(field: str, value: str) -> None:
    # JSON's 1e400 parses to inf: a stored plan with it is not valid JSON (PostgreSQL refused it: a 503, retried).
    body = '{"model": "demo", "messages": [{"role": "user", "content": "hi"}], "' + field + '": ' + value + "}"
    with pytest.raises(ValidationError, match="finite number"):
        AgentRunRequest.model_validate_json(body)


# --- cost limits need priced models ---------------------------------------------------------------


def pricing(*, unpriced: set[str], fallbacks: dict[str, list[str]] | None = None) -> ModelCheck:
    """``priced`` and ``openai/gpt-4o`` routed; the ``unpriced`` ones without prices."""
    checker, client = models("priced", "openai/gpt-4o", "steady", ttl=60)
    client.unpriced = unpriced
    client.fallbacks = fallbacks or {}
    return checker


COST_LIMITS: list[tuple[dict[str, Any], TenantRules, str | None, str]] = [
    ({"maxCostUsd": 0.5}, TenantRules(), None, "the request's maxCostUsd"),
    (
        {"persona": "thrifty"},
        TenantRules(personas={"thrifty": Persona(name="thrifty", max_cost_usd=0.2)}),
        None,
        "the max_cost_usd of the persona 'thrifty'",
    ),
    ({}, TenantRules(max_run_cost_usd=0.25), None, "the tenant's max_run_cost_usd"),
    ({}, TenantRules(monthly_cost_usd=100), None, "the tenant's monthly_cost_usd"),
    ({}, TenantRules(user_monthly_cost_usd=5), "ann", "the end user's monthly budget (user_monthly_cost_usd)"),
]


@pytest.mark.parametrize(("fields", "rules", "user", "limit"), COST_LIMITS)
async def test_a_run_under_a_cost_limit_may_not_use_a_model_without_a_price(
    fields: dict[str, Any], rules: TenantRules, user: str | None, limit: str
) -> None:
    tools, tool_client = catalog("web_search")
    checker = pricing(unpriced={"openai/gpt-4o"})
    with pytest.raises(ApiError) as caught:
        await plan_run(request(model="openai/gpt-4o", **fields), SETTINGS, tools, checker, rules=rules, user=user)
    assert (caught.value.status, caught.value.code) == (403, "model_not_priced")
    assert caught.value.message.startswith("The model 'openai/gpt-4o' has no price")
    assert limit in caught.value.message
    assert tool_client.calls == 0  # refused before tool discovery


@pytest.mark.parametrize(("fields", "rules", "user", "limit"), COST_LIMITS)
async def test_a_run_under_a_cost_limit_may_use_a_priced_model(
    fields: dict[str, Any], rules: TenantRules, user: str | None, limit: str
) -> None:
    checker = pricing(unpriced={"openai/gpt-4o"}, fallbacks={"priced": ["steady"]})
    plan = await plan_run(request(model="priced", **fields), SETTINGS, catalog()[0], checker, rules=rules, user=user)
    assert plan.model == "priced"


async def test_a_priced_model_falling_back_to_an_unpriced_one_is_refused_naming_the_fallback() -> None:
    checker = pricing(unpriced={"openai/gpt-4o"}, fallbacks={"priced": ["steady", "openai/gpt-4o"]})
    with pytest.raises(ApiError) as caught:
        await plan_run(request(model="priced", maxCostUsd=1), SETTINGS, catalog()[0], checker)
    assert (caught.value.status, caught.value.code) == (403, "model_not_priced")
    message = caught.value.message
    assert "The model 'priced' falls back to one without a price in completion-service's catalog (openai/gpt-4o)" in (
        message
    )
    assert "the request's maxCostUsd" in message


async def test_without_a_cost_limit_an_unpriced_model_runs() -> None:
    checker = pricing(unpriced={"openai/gpt-4o"}, fallbacks={"openai/gpt-4o": ["steady"]})
    token_budgets = TenantRules(monthly_tokens=1000, max_run_tokens=100, user_monthly_tokens=10)
    for rules in (TenantRules(), token_budgets):
        plan = await plan_run(request(model="openai/gpt-4o"), SETTINGS, catalog()[0], checker, rules=rules, user="ann")
        assert plan.model == "openai/gpt-4o"


async def test_an_end_users_cost_budget_needs_a_price_only_for_runs_with_an_end_user() -> None:
    checker = pricing(unpriced={"openai/gpt-4o"})
    rules = TenantRules(user_monthly_cost_usd=5)
    plan = await plan_run(request(model="openai/gpt-4o"), SETTINGS, catalog()[0], checker, rules=rules)
    assert plan.model == "openai/gpt-4o"
    with pytest.raises(ApiError) as caught:
        await plan_run(request(model="openai/gpt-4o"), SETTINGS, catalog()[0], checker, rules=rules, user="ann")
    assert caught.value.code == "model_not_priced"


async def test_the_prices_are_remembered_with_the_model_within_the_ttl() -> None:
    checker = pricing(unpriced={"openai/gpt-4o"})
    client = checker.client
    for _ in range(3):
        with pytest.raises(ApiError):
            await plan_run(request(model="openai/gpt-4o", maxCostUsd=1), SETTINGS, catalog()[0], checker)
        await plan_run(request(model="priced", maxCostUsd=1), SETTINGS, catalog()[0], checker)
    assert client.calls == 2  # type: ignore[attr-defined]


async def test_the_catalog_lists_each_tenants_tools_apart_and_forgets_one_on_a_change() -> None:
    tools, client = catalog("web_search", ttl=60)
    await tools.tools(Deadline.after(5), tenant="a")
    await tools.tools(Deadline.after(5), tenant="b")
    await tools.tools(Deadline.after(5), tenant="a")  # cached
    assert client.tenants == ["a", "b"]

    tools.forget("a")
    await tools.tools(Deadline.after(5), tenant="a")
    await tools.tools(Deadline.after(5), tenant="b")
    assert client.tenants == ["a", "b", "a"]


async def test_the_catalog_keeps_at_most_its_bound_of_tenants_lists() -> None:
    client = FakeToolsClient(["web_search"])
    tools = ToolCatalog(client, 60, max_tenants=2)  # type: ignore[arg-type]
    for tenant in ("a", "b", "c", "a"):
        await tools.tools(Deadline.after(5), tenant=tenant)
    assert client.tenants == ["a", "b", "c", "a"]  # a's list was the oldest, dropped for c's


async def test_a_run_asks_for_its_tenants_tools() -> None:
    tools, client = catalog("web_search")
    await plan_run(request(), SETTINGS, tools, MODELS, tenant="acme")
    assert client.tenants == ["acme"]


def runtime(stored: dict[str, Any]) -> TenantRuntime:
    return runtime_in_force(stored, SETTINGS, TenantRules())


async def test_the_tenants_runtime_caps_a_runs_iterations_and_is_its_default() -> None:
    tools, _ = catalog("web_search")
    plan = await plan_run(request(), SETTINGS, tools, MODELS, runtime=runtime({"maxIterations": 4}))
    assert plan.limits.max_iterations == 4
    with pytest.raises(ApiError) as caught:
        await plan_run(request(maxIterations=6), SETTINGS, tools, MODELS, runtime=runtime({"maxIterations": 4}))
    assert caught.value.status == 400
    assert "at most 4, the tenant's runtime" in caught.value.message


async def test_a_run_carries_the_tenants_tool_cache_lifetime() -> None:
    tools, _ = catalog("web_search")
    plan = await plan_run(request(), SETTINGS, tools, MODELS, runtime=runtime({"toolCacheSeconds": 0}))
    assert plan.tool_cache_seconds == 0
    assert (await plan_run(request(), SETTINGS, tools, MODELS)).tool_cache_seconds is None


async def test_a_tenant_with_the_agent_disabled_gets_no_tool_and_the_gateway_is_not_asked() -> None:
    tools, client = catalog("web_search")
    off = runtime({"agentEnabled": False})
    plan = await plan_run(request(), SETTINGS, tools, MODELS, runtime=off)
    assert plan.tools == []
    with pytest.raises(ApiError) as caught:
        await plan_run(request(tools=["web_search"]), SETTINGS, tools, MODELS, runtime=off)
    assert caught.value.code == "unknown_tools"
    assert client.calls == 0


class UnreachableGateway(FakeToolsClient):
    async def list_tools(self, deadline: Deadline, *, tenant: str | None = None) -> list[ToolInfo]:
        self.calls += 1
        raise UpstreamError("upstream_unavailable", "mcp-client-service is unreachable", status=503)


async def test_a_tool_list_the_gateway_cannot_give_leaves_a_best_effort_run_without_tools() -> None:
    client = UnreachableGateway(["web_search"])
    tools = ToolCatalog(client, 0)  # type: ignore[arg-type]
    plan = await plan_run(request(), SETTINGS, tools, MODELS, tools_best_effort=True)
    assert plan.tools == []
    with pytest.raises(ApiError) as caught:  # without best effort, or naming tools: the gateway's failure
        await plan_run(request(), SETTINGS, tools, MODELS)
    assert caught.value.status == 503
    with pytest.raises(ApiError):
        await plan_run(request(tools=["web_search"]), SETTINGS, tools, MODELS, tools_best_effort=True)
