"""Which of a run's tools wait for a person's approval: the tenant's, the persona's and the request's patterns."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent_service.admission.approval_rules import approval_tools
from agent_service.admission.planning import plan_run
from agent_service.core.personas import Persona
from agent_service.core.run import RunPlan
from agent_service.core.tenancy import TenantRules
from agent_service.runs.plans import plan_from_record, stored_plan
from agent_service.runs.waiting import stored_failure
from agent_service.store import RunRecord
from suite_common.errors import ApiError
from suite_common.wire import ToolInfo, Usage
from unit.agent_service.test_planning import MODELS, SETTINGS, catalog, request

pytestmark = pytest.mark.anyio


def tool(name: str, server: str = "ledger", **annotations: bool) -> ToolInfo:
    return ToolInfo(name=name, input_schema={"type": "object"}, server=server, annotations=annotations or None)


LEDGER = [
    tool("get_status", readOnlyHint=True),
    tool("set_status", idempotentHint=True),
    tool("send_payment", destructiveHint=True),
    tool("web_search", server="web"),
]


def test_destructive_means_every_tool_that_does_not_say_it_is_read_only() -> None:
    assert approval_tools(LEDGER, ["destructive"]) == {"set_status", "send_payment", "web_search"}


def test_names_and_server_patterns_match_as_the_tools_rules_do() -> None:
    assert approval_tools(LEDGER, ["send_payment"]) == {"send_payment"}
    assert approval_tools(LEDGER, ["web:*"]) == {"web_search"}
    assert approval_tools(LEDGER, ["ledger:get_status"]) == {"get_status"}
    assert approval_tools(LEDGER, ["other:*", "nothing"]) == frozenset()


def test_the_tenants_the_personas_and_the_requests_patterns_add_up() -> None:
    assert approval_tools(LEDGER, ["send_payment"], None, ["web:*"]) == {"send_payment", "web_search"}
    assert approval_tools(LEDGER, (), None, None) == frozenset()


async def test_planning_resolves_the_patterns_into_the_plan_and_the_stored_plan_keeps_them() -> None:
    tools, _ = catalog("get_status", "send_payment", "web_search")
    persona = Persona(name="careful", model="demo", approval=("web_search",))
    rules = TenantRules(approval=("send_payment",), approval_timeout_seconds=60, personas={"careful": persona})
    plan = await plan_run(
        request(persona="careful", requireApproval=["get_status"]), SETTINGS, tools, MODELS, rules=rules
    )
    assert plan.approval_tools == {"send_payment", "web_search", "get_status"}
    assert plan.approval_timeout_seconds == 60
    stored = stored_plan(plan)
    assert stored["approvalTools"] == ["get_status", "send_payment", "web_search"]
    assert stored["approvalTimeoutSeconds"] == 60


async def test_a_request_pattern_of_no_form_is_a_400() -> None:
    tools, listing = catalog("send_payment")
    with pytest.raises(ApiError) as refused:
        await plan_run(request(requireApproval=["a:b:c"]), SETTINGS, tools, MODELS)
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert listing.calls == 0  # refused before any peer is asked


async def test_a_plan_stored_before_approvals_reads_back_without_any() -> None:
    now = datetime.now(UTC)
    record = RunRecord(
        run_id="run_1", conversation_id=None, caller=None, tenant=None, user=None, model="demo",
        status="tool_loop", iterations=1, usage=Usage(), finish_reason=None, budget=None, error=None,
        plan={"tools": [], "toolChoice": "auto", "maxIterations": 5, "deadlineSeconds": 30},
        created_at=now, updated_at=now, lease_owner=None, lease_expires_at=None, resumes=0,
        cancel_requested=False, last_seq=0,
    )  # fmt: skip
    plan = plan_from_record(record, [], deadline_seconds=3.0)
    assert plan.approval_tools == frozenset()
    assert plan.limits.deadline.remaining() <= 3.0
    assert plan.input_timeout_seconds == 600.0  # it may wait for answers, as long as a tenant's default


async def test_the_tenants_input_timeout_is_planned_and_stored_and_a_front_that_cannot_ask_waits_for_none() -> None:
    tools, _ = catalog("get_status")
    rules = TenantRules(input_timeout_seconds=90)
    plan = await plan_run(request(), SETTINGS, tools, MODELS, rules=rules)
    assert plan.input_timeout_seconds == 90
    assert plan_from_record_of(plan).input_timeout_seconds == 90
    openai_front = await plan_run(request(), SETTINGS, tools, MODELS, rules=rules, offer_approval_tools=False)
    assert openai_front.input_timeout_seconds is None  # its tools' questions are declined by the gateway at once


def plan_from_record_of(plan: RunPlan) -> RunPlan:
    """``plan`` as a replica taking its run over rebuilds it from the store."""
    now = datetime.now(UTC)
    record = RunRecord(
        run_id=plan.run_id, conversation_id=None, caller=None, tenant=None, user=None, model=plan.model,
        status="tool_loop", iterations=1, usage=Usage(), finish_reason=None, budget=None, error=None,
        plan=stored_plan(plan), created_at=now, updated_at=now, lease_owner=None, lease_expires_at=None,
        resumes=0, cancel_requested=False, last_seq=0,
    )  # fmt: skip
    return plan_from_record(record, [])


async def test_a_front_that_cannot_approve_leaves_the_tools_out_before_checking_the_tool_choice() -> None:
    tools, _ = catalog("get_status", "send_payment")
    rules = TenantRules(approval=("send_payment",))
    plan = await plan_run(request(), SETTINGS, tools, MODELS, rules=rules, offer_approval_tools=False)
    assert [tool.name for tool in plan.tools] == ["get_status"]
    assert plan.approval_tools == frozenset()
    forced = request(toolChoice={"type": "function", "name": "send_payment"})
    with pytest.raises(ApiError) as refused:
        await plan_run(forced, SETTINGS, tools, MODELS, rules=rules, offer_approval_tools=False)
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert "needs a person's approval" in refused.value.message


@pytest.mark.parametrize(
    ("code", "status"),
    [("invalid_output", 422), ("outbound_ssrf_blocked", 403), ("context_length_exceeded", 400), ("other", 502)],
)
def test_a_run_that_waited_fails_with_the_status_a_live_run_of_its_error_answers(code: str, status: int) -> None:
    assert stored_failure(code, "it failed").status == status
