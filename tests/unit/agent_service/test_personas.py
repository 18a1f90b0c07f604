"""Personas of the callers file: parsing (and every way a persona can be wrong), filling a run request from one, and
the system-prompt cascade."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import pytest

from agent_service.access.callers_file import CallersFileError, parse_callers
from agent_service.admission.planning import ModelCheck, apply_persona, plan_run, system_prompt_of
from agent_service.core.personas import Persona, with_system_prompt
from agent_service.core.tenancy import TenantRules
from agent_service.runs.plans import plan_from_record, stored_plan
from suite_common.errors import ApiError
from suite_common.wire import AgentRunRequest, Message, ModelTarget, ReasoningControl
from unit.agent_service.test_planning import MODELS, SETTINGS, FakeCompletionClient, catalog
from unit.agent_service.test_resume import record

pytestmark = pytest.mark.anyio

_KEY = f'[[keys]]\nname = "k"\ntenant = "acme"\nsha256 = "{hashlib.sha256(b"x").hexdigest()}"\n'

_FILE = (
    """
[personas.concise]
description = "Short answers"
system_prompt = "Answer in one sentence."
model = "demo"
max_iterations = 3

[personas.researcher]
system_prompt = "Search first."
tools = ["search_documents"]
deadline_seconds = 30
max_total_tokens = 5000
max_cost_usd = 0.25
temperature = 0.2
max_tokens = 400

[tenants.acme]
system_prompt = "You answer for ACME."

[tenants.acme.personas.concise]
system_prompt = "ACME, briefly."
model = "gpt-4o-mini"

[tenants.globex]
"""
    + _KEY
)


def test_personas_are_global_or_a_tenants_own_which_wins_over_the_global_one_of_its_name() -> None:
    rules = parse_callers(_FILE).rules
    acme, globex = rules["acme"], rules["globex"]
    assert acme.system_prompt == "You answer for ACME."
    assert globex.system_prompt is None
    assert sorted(acme.personas) == sorted(globex.personas) == ["concise", "researcher"]
    assert acme.personas["concise"] == Persona(name="concise", system_prompt="ACME, briefly.", model="gpt-4o-mini")
    assert globex.personas["concise"] == Persona(
        name="concise",
        description="Short answers",
        system_prompt="Answer in one sentence.",
        model="demo",
        max_iterations=3,
    )
    assert globex.personas["researcher"] == Persona(
        name="researcher",
        system_prompt="Search first.",
        tools=("search_documents",),
        deadline_seconds=30.0,
        max_total_tokens=5000,
        max_cost_usd=0.25,
        temperature=0.2,
        max_tokens=400,
    )


def test_a_tenants_own_persona_is_not_another_tenants() -> None:
    text = '[tenants.acme.personas.mine]\nmodel = "demo"\n[tenants.globex]\n' + _KEY
    rules = parse_callers(text).rules
    assert list(rules["acme"].personas) == ["mine"]
    assert rules["globex"].personas == {}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[personas.p]\nprompt = "x"\n', "persona 'p': unknown field 'prompt'"),
        ('[personas."a b"]\n', "persona 'a b': a name is letters"),
        ("[personas.p]\nsystem_prompt = 1\n", "persona 'p': system_prompt must be a non-empty string"),
        ('[personas.p]\nsystem_prompt = " "\n', "system_prompt must be a non-empty string"),
        ("[personas.p]\nmodel = 3\n", "persona 'p': model must be a non-empty string"),
        ('[personas.p]\ntools = "search"\n', "persona 'p': tools must be a list of tool names"),
        ('[personas.p]\ntools = [""]\n', "tools must be a list of tool names"),
        ("[personas.p]\nmax_iterations = 0\n", "max_iterations must be a whole number, 1 or more"),
        ("[personas.p]\nmax_iterations = 2.5\n", "max_iterations must be a whole number, 1 or more"),
        ("[personas.p]\nmax_tokens = true\n", "max_tokens must be a whole number"),
        ("[personas.p]\nmax_total_tokens = -1\n", "max_total_tokens must be a whole number"),
        ("[personas.p]\ndeadline_seconds = 0\n", "deadline_seconds must be more than 0"),
        ('[personas.p]\nmax_cost_usd = "1"\n', "max_cost_usd must be a number"),
        ("[personas.p]\nmax_cost_usd = nan\n", "max_cost_usd must be a number"),
        ("[personas.p]\ntemperature = 2.5\n", "temperature must be from 0 to 2"),
        ("[personas]\np = 1\n", "persona 'p' must be a table"),
        ("personas = 1\n", "personas must be tables"),
        ("[tenants.acme.personas.p]\nsteps = 1\n", "tenant 'acme': persona 'p': unknown field 'steps'"),
        ("[tenants.acme]\nsystem_prompt = 1\n", "tenant 'acme': system_prompt must be a non-empty string"),
        ("[tenants.acme]\npersonas = 1\n", "tenants.acme.personas must be tables"),
        ('[personas.p]\nreasoning_effort = "extreme"\n', "reasoning_effort must be one of minimal, low, medium, high"),
        ('[personas.p]\nreasoning_summary = "detailed"\n', "reasoning_summary must be one of auto, none"),
        ("[tenants.acme]\nverbosity = 3\n", "tenant 'acme': verbosity must be one of low, medium, high"),
    ],
)
def test_a_wrong_persona_is_one_line_naming_it(text: str, problem: str) -> None:
    if "[tenants.acme" not in text:
        text += "[tenants.acme]\n"
    with pytest.raises(CallersFileError) as refused:
        parse_callers(text + _KEY, source="callers.toml")
    message = str(refused.value)
    assert problem in message
    assert message.startswith("AGENT_CALLERS_FILE: callers.toml: ")
    assert "\n" not in message


def _request(**fields: Any) -> AgentRunRequest:
    return AgentRunRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **fields})


_RULES = TenantRules(
    system_prompt="Tenant prompt.",
    personas={
        "concise": Persona(name="concise", system_prompt="Persona prompt.", model="demo", max_iterations=3),
        "tooled": Persona(name="tooled", tools=("search_documents",), temperature=0.5, max_cost_usd=0.1),
        "modelless": Persona(name="modelless", system_prompt="No model."),
    },
)


def test_a_persona_fills_what_the_request_omits_and_the_requests_own_fields_win() -> None:
    filled = apply_persona(_request(persona="concise"), _RULES)
    assert (filled.model, filled.max_iterations, filled.tools) == ("demo", 3, None)
    own = apply_persona(_request(persona="concise", model="fast", maxIterations=5), _RULES)
    assert (own.model, own.max_iterations) == ("fast", 5)
    tooled = apply_persona(_request(persona="tooled", model="demo"), _RULES)
    assert (tooled.tools, tooled.temperature, tooled.max_cost_usd) == (["search_documents"], 0.5, 0.1)
    assert apply_persona(_request(persona="tooled", model="demo", tools=[]), _RULES).tools == []


def test_a_request_without_a_persona_is_unchanged() -> None:
    request = _request(model="demo")
    assert apply_persona(request, _RULES) is request


def test_an_unknown_persona_is_a_400_listing_the_tenants_personas() -> None:
    with pytest.raises(ApiError) as refused:
        apply_persona(_request(persona="verbose", model="demo"), _RULES)
    assert (refused.value.status, refused.value.code) == (400, "unknown_persona")
    assert "Personas this caller may use: concise, modelless, tooled." in refused.value.message
    with pytest.raises(ApiError) as open_api:
        apply_persona(_request(persona="concise"), TenantRules())
    assert "may use: none." in open_api.value.message


def test_a_request_left_without_a_model_is_a_400_unless_the_service_has_a_default_model() -> None:
    for request in (_request(persona="modelless"), _request()):
        with pytest.raises(ApiError) as refused:
            apply_persona(request, _RULES)
        assert (refused.value.status, refused.value.code) == (400, "invalid_request")
        assert "model is required" in refused.value.message
        assert "AGENT_DEFAULT_MODEL" in refused.value.message
        assert apply_persona(request, _RULES, "demo").model == "demo"
    assert apply_persona(_request(persona="concise"), _RULES, "default-model").model == "demo"  # the persona's
    assert apply_persona(_request(model="gpt-4o"), _RULES, "default-model").model == "gpt-4o"


def test_the_system_prompt_is_the_requests_then_the_personas_then_the_tenants_then_none() -> None:
    own = _request(
        persona="concise", messages=[{"role": "system", "content": "Mine."}, {"role": "user", "content": "hi"}]
    )
    assert system_prompt_of(own, _RULES) is None  # the request's own system message is the one used
    assert system_prompt_of(_request(persona="concise"), _RULES) == "Persona prompt."
    assert system_prompt_of(_request(persona="tooled", model="demo"), _RULES) == "Tenant prompt."
    assert system_prompt_of(_request(model="demo"), _RULES) == "Tenant prompt."
    assert system_prompt_of(_request(model="demo"), TenantRules()) is None


def test_the_prompt_goes_first_once_and_never_over_a_conversations_own_system_message() -> None:
    user = Message(role="user", content="hi")
    assert with_system_prompt([user], "Be brief.") == [Message(role="system", content="Be brief."), user]
    assert with_system_prompt([user], None) == [user]
    earlier = [Message(role="system", content="Stored."), Message(role="assistant", content="yes"), user]
    assert with_system_prompt(earlier, "Be brief.") == earlier


async def test_a_planned_run_takes_the_personas_model_tools_limits_and_prompt() -> None:
    tools, _ = catalog("search_documents", "web_search")
    plan = await plan_run(_request(persona="tooled", model="demo"), SETTINGS, tools, MODELS, rules=_RULES)
    assert [tool.name for tool in plan.tools] == ["search_documents"]
    assert (plan.model, plan.temperature, plan.system_prompt) == ("demo", 0.5, "Tenant prompt.")
    assert [message.role for message in plan.messages] == ["user"]  # the prompt is not part of the conversation
    plan = await plan_run(_request(persona="concise"), SETTINGS, tools, MODELS, rules=_RULES)
    assert (plan.model, plan.limits.max_iterations, plan.system_prompt) == ("demo", 3, "Persona prompt.")
    assert stored_plan(plan)["systemPrompt"] == "Persona prompt."


async def test_a_run_taken_over_keeps_its_system_prompt() -> None:
    stored = record(plan={**record().plan, "systemPrompt": "Persona prompt."})
    assert plan_from_record(stored, []).system_prompt == "Persona prompt."
    assert plan_from_record(record(), []).system_prompt is None


async def test_a_personas_limits_above_the_tenants_caps_are_lowered_to_them_the_requests_own_are_refused() -> None:
    tools, _ = catalog("search_documents")
    generous = Persona(name="generous", model="demo", max_iterations=12, deadline_seconds=100, max_total_tokens=9000)
    rules = replace(_RULES, max_iterations=4, max_run_seconds=30, max_run_tokens=500, personas={"generous": generous})
    plan = await plan_run(_request(persona="generous"), SETTINGS, tools, MODELS, rules=rules)
    assert (plan.limits.max_iterations, plan.limits.max_total_tokens) == (4, 500)
    assert plan.limits.deadline.remaining() <= 30
    with pytest.raises(ApiError) as refused:  # the caller's own ask above the cap: told, not lowered
        await plan_run(_request(persona="generous", maxIterations=12), SETTINGS, tools, MODELS, rules=rules)
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert "maxIterations may be at most 4" in refused.value.message


async def test_a_personas_model_the_tenant_may_not_run_is_refused_naming_the_persona() -> None:
    tools, _ = catalog("search_documents")
    rules = replace(_RULES, models=("gpt-4o*",))
    with pytest.raises(ApiError) as refused:
        await plan_run(_request(persona="concise"), SETTINGS, tools, MODELS, rules=rules)
    assert (refused.value.status, refused.value.code) == (403, "model_not_allowed")
    assert "the model of the persona 'concise'" in refused.value.message


_GENERATION_FILE = (
    """
[personas.thinker]
reasoning_effort = "high"
reasoning_summary = "auto"
verbosity = "high"

[personas.plain]
model = "demo"

[tenants.acme]
reasoning_effort = "low"
verbosity = "low"

[tenants.globex]
"""
    + _KEY
)


def test_a_persona_and_a_tenant_set_reasoning_and_verbosity_each_field_the_requests_then_personas_then_tenants() -> (
    None
):
    rules = parse_callers(_GENERATION_FILE).rules_of("acme")
    thinker = apply_persona(_request(persona="thinker", model="demo"), rules)
    assert (thinker.reasoning, thinker.verbosity) == (ReasoningControl(effort="high", summary="auto"), "high")
    tenants = apply_persona(_request(persona="plain"), rules)  # the persona sets none: the tenant's
    assert (tenants.reasoning, tenants.verbosity) == (ReasoningControl(effort="low"), "low")
    own = apply_persona(
        _request(persona="thinker", model="demo", reasoning={"effort": "minimal"}, verbosity="medium"), rules
    )  # the request's own win, field by field: its effort, the persona's summary
    assert (own.reasoning, own.verbosity) == (ReasoningControl(effort="minimal", summary="auto"), "medium")
    bare = apply_persona(_request(model="demo"), parse_callers(_GENERATION_FILE).rules_of("globex"))
    assert (bare.reasoning, bare.verbosity) == (None, None)  # no persona, a tenant without defaults


async def test_a_planned_run_takes_its_personas_reasoning_and_verbosity_and_stores_them() -> None:
    tools, _ = catalog("search_documents")
    rules = parse_callers(_GENERATION_FILE).rules_of("acme")
    plan = await plan_run(
        _request(persona="thinker", model="demo", verbosity="low"), SETTINGS, tools, MODELS, rules=rules
    )
    assert (plan.reasoning, plan.verbosity) == (ReasoningControl(effort="high", summary="auto"), "low")
    stored = stored_plan(plan)
    assert (stored["reasoning"], stored["verbosity"]) == ({"effort": "high", "summary": "auto"}, "low")


_SUMMARY_FILE = (
    """
[personas.brief]
summary_model = "persona-summariser"

[personas.plain]
model = "demo"

[tenants.acme]
summary_model = "tenant-summariser"
"""
    + _KEY
)


class _Windowed(FakeCompletionClient):
    """completion-service knowing each model's context window."""

    def _target(self, model: str) -> ModelTarget:
        return super()._target(model).model_copy(update={"context_tokens": 32_768})


async def test_a_run_is_fitted_to_its_models_window_and_summarised_by_its_personas_else_its_tenants_model() -> None:
    tools, _ = catalog("search_documents")
    rules = parse_callers(_SUMMARY_FILE).rules_of("acme")
    windowed = ModelCheck(_Windowed({"demo"}), 0)  # type: ignore[arg-type]
    brief = await plan_run(_request(persona="brief", model="demo"), SETTINGS, tools, windowed, rules=rules)
    plain = await plan_run(_request(persona="plain"), SETTINGS, tools, windowed, rules=rules)
    bare = await plan_run(_request(model="demo"), SETTINGS, tools, MODELS)
    assert (brief.context_tokens, brief.summary_model) == (32_768, "persona-summariser")
    assert (plain.context_tokens, plain.summary_model) == (32_768, "tenant-summariser")
    assert (bare.context_tokens, bare.summary_model) == (None, None)  # a window unknown: never fitted
    # A run taken over after a crash is fitted as it was.
    taken = plan_from_record(replace(record(), plan=stored_plan(brief)), brief.messages)
    assert (taken.context_tokens, taken.summary_model) == (32_768, "persona-summariser")
