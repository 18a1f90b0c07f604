"""What the loop tells the gateway and the recorder about each tool call: whom the call acts for (``X-Tenant-Id`` and
``caller``), one audit row per dispatched call with its status, the model that answered each LLM call and its latency,
and a call the outbound policy blocks ending the run at once (the model never told)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from agent_service.core.limits import RunLimits
from agent_service.core.run import AskedInput, LlmCall, RunPlan, ToolCallRecord
from agent_service.engine.tool_cache import MemoryStore, ToolCache, ToolCachePolicy
from agent_service.infra.telemetry import RunTelemetry
from suite_common.deadline import Deadline
from suite_common.wire import TENANT_HEADER, Message, RunError, RunToolResult, ToolInfo, Usage
from support.scripted import Scripted, answer, call_tools
from unit.agent_service.test_loop import Recorder, echo

pytestmark = pytest.mark.anyio


def tool(name: str) -> ToolInfo:
    # Server "s": the one the scripted gateway says ran every call.
    return ToolInfo(name=name, input_schema={"type": "object"}, server="s", annotations={"readOnlyHint": True})


def plan(*tools: str, deadline: float = 10.0) -> RunPlan:
    return RunPlan(
        run_id="run_audit",
        model="scripted",
        messages=[Message(role="user", content="question")],
        tools=[tool(name) for name in tools],
        tool_choice="auto",
        limits=RunLimits(max_iterations=5, deadline=Deadline.after(deadline)),
        tenant="acme",
        user="alice",
        role="admin",
        conversation_id="conv-1",
    )


class Steps:
    """The loop's recorder: the LLM calls and the tool calls' audit rows it reports, results and unanswered apart."""

    def __init__(self) -> None:
        self.llm_calls: list[LlmCall] = []
        self.answered: list[ToolCallRecord] = []
        self.unanswered_calls: list[ToolCallRecord] = []

    async def turn(self, position: int, message: Message, *, iterations: int, usage: Usage, call: LlmCall) -> None:
        self.llm_calls.append(call)

    async def result(self, position: int, message: Message, *, audit: ToolCallRecord | None) -> None:
        assert audit is not None
        self.answered.append(audit)

    async def asked(self, question: AskedInput) -> None:
        raise AssertionError("no tool server asks here")

    async def forwarded(self, input_id: str) -> None:
        raise AssertionError("no answer is forwarded here")

    def unanswered(self, audit: ToolCallRecord) -> None:
        self.unanswered_calls.append(audit)

    async def cut_off(self, call: LlmCall, *, usage: Usage) -> None:
        self.llm_calls.append(call)

    async def repair(self, position: int, answer: Message, prompt: Message, *, iterations: int, usage: Usage) -> None:
        raise AssertionError("no answer is repaired here")

    def rows(self) -> list[tuple[str, int, int, str | None, str, str]]:
        every = sorted([*self.answered, *self.unanswered_calls], key=lambda row: (row.iteration, row.call_index))
        return [(row.tool_call_id, row.iteration, row.call_index, row.server, row.tool, row.status) for row in every]


@pytest.mark.parametrize("stream_text", [True, False], ids=["streamed", "json"])
async def test_each_call_tool_names_the_runs_tenant_and_whom_it_acts_for(stream_text: bool) -> None:
    scripted = Scripted([call_tools(("c1", "echo", {"q": "x"})), answer("done")], {"echo": echo})
    outcome = await scripted.loop().run(plan("echo"), Recorder(), stream_text=stream_text)
    assert outcome.error is None
    [sent] = scripted.call_tool_requests
    assert sent.headers[TENANT_HEADER] == "acme"
    assert json.loads(sent.content)["caller"] == {
        "tenant": "acme",
        "user": "alice",
        "role": "admin",
        "runId": "run_audit",
        "conversationId": "conv-1",
    }


async def test_every_dispatched_call_has_one_audit_row_with_how_it_ended() -> None:
    async def broken(_: dict[str, Any]) -> str:
        raise RuntimeError("backend exploded")

    turn = call_tools(
        ("c-ok", "echo", {"q": "x"}),
        ("c-error", "broken", {}),
        ("c-unknown", "invented", {}),
    )
    scripted = Scripted([turn, answer("done")], {"echo": echo, "broken": broken})
    steps = Steps()
    outcome = await scripted.loop().run(plan("echo", "broken"), Recorder(), stream_text=False, recorder=steps)
    assert outcome.error is None
    assert steps.rows() == [
        ("c-ok", 1, 0, "s", "echo", "ok"),
        ("c-error", 1, 1, "s", "broken", "error"),
        ("c-unknown", 1, 2, None, "invented", "refused"),  # no server was chosen for a tool the run does not have
    ]
    assert not steps.unanswered_calls
    assert all(row.latency_ms >= 0 and row.started_at.tzinfo is not None for row in steps.answered)


async def test_a_call_answered_from_the_tool_cache_is_audited_as_cached() -> None:
    scripted = Scripted(
        [call_tools(("c1", "echo", {"q": "x"})), call_tools(("c2", "echo", {"q": "x"})), answer("done")],
        {"echo": echo},
    )
    loop = scripted.loop()
    loop.dispatch.tool_cache = ToolCache(
        ToolCachePolicy(60, {}), MemoryStore(10), b"p" * 32, key_prefix="p:", telemetry=RunTelemetry.disabled()
    )
    steps = Steps()
    await loop.run(plan("echo"), Recorder(), stream_text=False, recorder=steps)
    assert [(row.tool_call_id, row.iteration, row.status) for row in steps.answered] == [
        ("c1", 1, "ok"),
        ("c2", 2, "cached"),
    ]
    assert len(scripted.call_tool_requests) == 1


async def test_a_call_the_deadline_cuts_short_is_audited_as_cancelled_for_the_runs_end_to_store() -> None:
    async def hang(_: dict[str, Any]) -> str:
        await anyio.sleep_forever()
        return ""

    scripted = Scripted([call_tools(("fast", "echo", {"q": "x"}), ("stuck", "hang", {}))], {"echo": echo, "hang": hang})
    steps = Steps()
    with anyio.fail_after(5):
        outcome = await scripted.loop().run(
            plan("echo", "hang", deadline=0.5), Recorder(), stream_text=False, recorder=steps
        )
    assert outcome.finish_reason == "deadline"
    assert [(row.tool_call_id, row.status) for row in steps.answered] == [("fast", "ok")]
    assert [(row.tool_call_id, row.status) for row in steps.unanswered_calls] == [("stuck", "cancelled")]


async def test_each_llm_call_reports_the_model_that_answered_and_its_latency() -> None:
    fallback = answer("done").model_copy(update={"model": "claude-fallback"})
    scripted = Scripted([fallback])
    steps = Steps()
    await scripted.loop().run(plan(), Recorder(), stream_text=True, recorder=steps)
    [call] = steps.llm_calls
    assert (call.model, call.answered_model) == ("scripted", "claude-fallback")
    assert call.latency_ms is not None
    assert call.latency_ms >= 0


@pytest.mark.parametrize("stream_text", [True, False], ids=["streamed", "json"])
async def test_a_call_the_outbound_policy_blocks_ends_the_run_with_403_and_the_model_is_never_told(
    stream_text: bool,
) -> None:
    async def held(_: dict[str, Any]) -> str:
        await anyio.sleep_forever()
        return ""

    scripted = Scripted(
        [call_tools(("c-blocked", "probe", {}), ("c-sibling", "held", {})), answer("never asked")],
        {"held": held},
        blocked={"probe"},
    )
    events, steps = Recorder(), Steps()
    with anyio.fail_after(5):
        outcome = await scripted.loop().run(plan("probe", "held"), events, stream_text=stream_text, recorder=steps)
    assert outcome.error is not None
    assert (outcome.error.code, outcome.error.status) == ("outbound_ssrf_blocked", 403)
    assert "10.0.0.7" not in outcome.error.message  # the gateway's words (the address) stay in the log
    [error] = events.of(RunError)
    assert error.code == "outbound_ssrf_blocked"
    assert events.events[-1] == error
    assert len(scripted.completion_requests) == 1  # no round after it: the model never reads it
    assert not events.of(RunToolResult)
    results = [message for message in outcome.appended if message.role == "tool"]
    assert [message.tool_call_id for message in results] == ["c-blocked", "c-sibling"]
    assert not any("10.0.0.7" in (message.content or "") or "policy" in (message.content or "") for message in results)
    assert steps.rows() == [
        ("c-blocked", 1, 0, "s", "probe", "refused"),
        ("c-sibling", 1, 1, "s", "held", "cancelled"),
    ]


async def test_a_blocked_call_reported_in_a_streamed_answer_ends_the_run_too() -> None:
    scripted = Scripted(
        [call_tools(("c1", "probe", {})), answer("never asked")],
        {},
        stream_errors={"probe": ("outbound_ssrf_blocked", "169.254.169.254 is link-local")},
    )
    outcome = await scripted.loop().run(plan("probe"), Recorder(), stream_text=True)
    assert outcome.error is not None
    assert (outcome.error.code, outcome.error.status) == ("outbound_ssrf_blocked", 403)
    assert len(scripted.completion_requests) == 1


async def test_other_gateway_refusals_are_still_fed_back_to_the_model() -> None:
    scripted = Scripted(
        [call_tools(("c1", "probe", {})), answer("recovered")],
        {},
        stream_errors={"probe": ("tool_unavailable", "The server is restarting.")},
    )
    steps = Steps()
    outcome = await scripted.loop().run(plan("probe"), Recorder(), stream_text=True, recorder=steps)
    assert outcome.error is None
    assert outcome.finish_reason == "stop"
    assert [(row.tool_call_id, row.status) for row in steps.answered] == [("c1", "error")]


def test_calls_of_a_tenants_own_server_are_counted_under_one_label_that_names_neither_server_nor_tool() -> None:
    registry = CollectorRegistry()
    telemetry = RunTelemetry(registry, trace.NoOpTracer())
    for server, tool, own in (("crm", "crm_export", True), ("web", "web_search", False)):
        telemetry.tool_call(
            run_id="run_1",
            round_index=1,
            call_index=0,
            server=server,
            tool=tool,
            status="ok",
            seconds=0.01,
            tenant_server=own,
        )
    series = {
        (sample.labels["server"], sample.labels["tool"])
        for metric in registry.collect()
        if metric.name == "agent_tool_calls"
        for sample in metric.samples
    }
    assert series == {("(tenant)", "(tenant)"), ("web", "web_search")}
