"""The loop's behaviour, against scripted services."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import anyio
import httpx
import pytest

from agent_service.core.errors import UpstreamError
from agent_service.core.limits import RunLimits
from agent_service.core.run import RunPlan
from suite_common.deadline import Deadline
from suite_common.wire import (
    BudgetName,
    CallToolProgress,
    CompletionResponse,
    Message,
    ReasoningBlock,
    ReasoningControl,
    RunDone,
    RunError,
    RunEvent,
    RunReasoning,
    RunText,
    RunToolCall,
    RunToolProgress,
    RunToolResult,
    ToolCall,
    ToolInfo,
    ToolSpec,
    Usage,
    dump,
)
from support.scripted import Scripted, answer, call_tools

pytestmark = pytest.mark.anyio


def tool(name: str) -> ToolInfo:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    return ToolInfo(name=name, description=f"{name} tool", input_schema=schema, server="s")


def plan(*tools: str, max_iterations: int = 15, deadline: float = 10.0, tool_choice: Any = "auto") -> RunPlan:
    return RunPlan(
        run_id="run_test",
        model="scripted",
        messages=[Message(role="user", content="question")],
        tools=[tool(name) for name in tools],
        tool_choice=tool_choice,
        limits=RunLimits(max_iterations=max_iterations, deadline=Deadline.after(deadline)),
    )


class Recorder:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    async def __call__(self, event: RunEvent) -> None:
        self.events.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]


async def echo(arguments: dict[str, Any]) -> str:
    return f"echo {arguments.get('q')}"


async def test_a_text_answer_ends_the_run_after_one_round_with_streamed_deltas() -> None:
    scripted = Scripted([answer("the answer is 42")])
    events = Recorder()
    outcome = await scripted.loop().run(plan("echo"), events, stream_text=True)
    assert outcome.finish_reason == "stop"
    assert outcome.iterations == 1
    assert "".join(e.delta for e in events.of(RunText)) == "the answer is 42"
    assert len(events.of(RunText)) == 4
    assert isinstance(events.events[-1], RunDone)
    assert events.events[-1].usage.input_tokens == 10
    assert outcome.appended == [Message(role="assistant", content="the answer is 42")]


async def test_tool_calls_of_one_round_run_concurrently_and_results_return_in_call_order() -> None:
    both_started = anyio.Event()
    started: list[str] = []

    async def rendezvous(arguments: dict[str, Any]) -> str:
        # Each call waits until both are running: sequential dispatch would hang here.
        started.append(arguments["q"])
        if len(started) == 2:
            both_started.set()
        await both_started.wait()
        return f"done {arguments['q']}"

    scripted = Scripted(
        [call_tools(("c1", "slow", {"q": "a"}), ("c2", "slow", {"q": "b"})), answer("ok")], {"slow": rendezvous}
    )
    events = Recorder()
    with anyio.fail_after(5):
        outcome = await scripted.loop().run(plan("slow"), events, stream_text=True)
    assert outcome.finish_reason == "stop"
    assert outcome.iterations == 2
    assert [e.id for e in events.of(RunToolCall)] == ["c1", "c2"]
    assert {e.tool_call_id for e in events.of(RunToolResult)} == {"c1", "c2"}
    second_request = scripted.completion_requests[1]["messages"]
    assert [m.get("toolCallId") for m in second_request[-2:]] == ["c1", "c2"]
    assert [m["content"] for m in second_request[-2:]] == ["done a", "done b"]


async def test_a_failing_tool_is_fed_back_as_an_error_and_the_loop_goes_on() -> None:
    async def broken(_: dict[str, Any]) -> str:
        raise RuntimeError("backend exploded")

    scripted = Scripted([call_tools(("c1", "broken", {})), answer("recovered")], {"broken": broken})
    events = Recorder()
    outcome = await scripted.loop().run(plan("broken"), events, stream_text=True)
    [result] = events.of(RunToolResult)
    assert result.is_error
    assert "backend exploded" in result.content
    fed_back = scripted.completion_requests[1]["messages"][-1]
    assert fed_back == {"role": "tool", "content": "backend exploded", "toolCallId": "c1", "isError": True}
    assert outcome.finish_reason == "stop"


async def test_the_run_stops_at_max_iterations_with_every_tool_call_answered() -> None:
    scripted = Scripted([call_tools((f"c{i}", "echo", {"q": str(i)})) for i in range(3)], {"echo": echo})
    events = Recorder()
    outcome = await scripted.loop().run(plan("echo", max_iterations=3), events, stream_text=True)
    assert outcome.finish_reason == "max_iterations"
    assert outcome.iterations == 3
    assert len(scripted.completion_requests) == 3
    assert [m.role for m in outcome.appended] == ["assistant", "tool"] * 3
    done = events.events[-1]
    assert isinstance(done, RunDone)
    assert (done.finish_reason, done.iterations) == ("max_iterations", 3)


async def test_a_hung_llm_cannot_push_the_run_past_its_deadline() -> None:
    scripted = Scripted([None])
    events = Recorder()
    with anyio.fail_after(5):
        outcome = await scripted.loop().run(plan("echo", deadline=0.3), events, stream_text=True)
    assert outcome.finish_reason == "deadline"
    assert isinstance(events.events[-1], RunDone)


async def test_a_deadline_during_tool_calls_keeps_finished_results_and_closes_the_rest() -> None:
    async def hang(_: dict[str, Any]) -> str:
        await anyio.sleep_forever()
        return ""

    scripted = Scripted([call_tools(("fast", "echo", {"q": "x"}), ("stuck", "hang", {}))], {"echo": echo, "hang": hang})
    with anyio.fail_after(5):
        outcome = await scripted.loop().run(plan("echo", "hang", deadline=0.5), Recorder(), stream_text=False)
    assert outcome.finish_reason == "deadline"
    results = {m.tool_call_id: m for m in outcome.appended if m.role == "tool"}
    assert results["fast"].content == "echo x"
    assert results["stuck"].is_error
    assert "deadline" in (results["stuck"].content or "")


async def test_a_tool_the_run_does_not_allow_is_refused_without_being_called() -> None:
    scripted = Scripted([call_tools(("c1", "delete_everything", {})), answer("sorry")], {"echo": echo})
    events = Recorder()
    await scripted.loop().run(plan("echo"), events, stream_text=True)
    [result] = events.of(RunToolResult)
    assert result.is_error
    assert "not available" in result.content
    assert "echo" in result.content
    assert scripted.tool_calls == []


async def test_arguments_that_are_not_json_are_sent_back_to_the_model_not_to_the_tool() -> None:
    reply = call_tools(("c1", "echo", {}))
    assert reply.message.tool_calls is not None
    reply.message.tool_calls[0].invalid_arguments = '{"q": "unterminated'
    scripted = Scripted([reply, answer("fixed")], {"echo": echo})
    events = Recorder()
    await scripted.loop().run(plan("echo"), events, stream_text=True)
    [result] = events.of(RunToolResult)
    assert result.is_error
    assert "not a JSON object" in result.content
    assert scripted.tool_calls == []


async def test_a_forced_tool_choice_applies_to_the_first_round_only() -> None:
    scripted = Scripted([call_tools(("c1", "echo", {"q": "x"})), answer("done")], {"echo": echo})
    await scripted.loop().run(plan("echo", tool_choice="required"), Recorder(), stream_text=False)
    assert [r["toolChoice"] for r in scripted.completion_requests] == ["required", "auto"]


async def test_a_long_tool_result_is_cut_with_a_visible_marker() -> None:
    async def verbose(_: dict[str, Any]) -> str:
        return "x" * 5000

    scripted = Scripted([call_tools(("c1", "verbose", {})), answer("ok")], {"verbose": verbose})
    events = Recorder()
    await scripted.loop(tool_result_max_chars=1000).run(plan("verbose"), events, stream_text=True)
    [result] = events.of(RunToolResult)
    assert result.content.startswith("x" * 1000)
    assert result.content.endswith("[... truncated: 4000 more characters]")


async def test_a_failing_completion_ends_the_run_with_an_error_event_and_no_done() -> None:
    class Refusing(Scripted):
        async def handle(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(502, json={"error": {"code": "auth_failed", "message": "provider rejected the key"}})

    events = Recorder()
    outcome = await Refusing([]).loop().run(plan("echo"), events, stream_text=True)
    assert outcome.error is not None
    assert outcome.finish_reason == "error"
    assert isinstance(events.events[-1], RunError)
    assert events.events[-1].code == "auth_failed"
    assert not events.of(RunDone)


async def test_non_streamed_runs_ask_for_whole_completions() -> None:
    scripted = Scripted([answer("whole")])
    events = Recorder()
    outcome = await scripted.loop().run(plan(), events, stream_text=False)
    assert scripted.completion_requests[0]["stream"] is False
    assert not events.of(RunText)
    assert outcome.appended[-1].content == "whole"


@pytest.mark.parametrize("ids", [["c1"], ["c1", "c2"]], ids=["one call", "parallel calls"])
async def test_a_rejected_secret_during_a_round_ends_the_run_with_an_error_and_every_call_answered(
    ids: list[str],
) -> None:
    class SecretRotated(Scripted):
        async def handle(self, request: httpx.Request) -> httpx.Response:
            if request.url.path == "/mcp/v1/tools/call-tool":
                return httpx.Response(401, json={"error": {"code": "unauthorized", "message": "wrong secret"}})
            return await super().handle(request)

    scripted = SecretRotated([call_tools(*((id_, "echo", {"q": id_}) for id_ in ids))], {"echo": echo})
    events = Recorder()
    outcome = await scripted.loop().run(plan("echo"), events, stream_text=True)
    assert outcome.error is not None
    assert outcome.error.code == "tools_unauthorized"
    assert isinstance(events.events[-1], RunError)
    assert not events.of(RunToolResult)  # nothing of the failure reaches the model as a tool result
    assert [m.tool_call_id for m in outcome.appended if m.role == "tool"] == ids


async def test_a_deadline_during_a_single_tool_call_closes_it_and_ends_the_run() -> None:
    async def hang(_: dict[str, Any]) -> str:
        await anyio.sleep_forever()
        return ""

    scripted = Scripted([call_tools(("stuck", "hang", {}))], {"hang": hang})
    with anyio.fail_after(5):
        outcome = await scripted.loop().run(plan("hang", deadline=0.3), Recorder(), stream_text=False)
    assert outcome.finish_reason == "deadline"
    [result] = [m for m in outcome.appended if m.role == "tool"]
    assert result.is_error
    assert "deadline" in (result.content or "")


async def test_a_callee_giving_up_at_the_deadline_ends_the_run_with_finish_reason_deadline() -> None:
    class GivesUpAtDeadline(Scripted):
        async def handle(self, request: httpx.Request) -> httpx.Response:
            # Like completion-service: work until the X-Deadline-Ms it was given, then answer 504.
            await anyio.sleep(int(request.headers["X-Deadline-Ms"]) / 1000)
            return httpx.Response(504, json={"error": {"code": "upstream_timeout", "message": "too slow"}})

    events = Recorder()
    with anyio.fail_after(5):
        outcome = await GivesUpAtDeadline([]).loop().run(plan("echo", deadline=0.3), events, stream_text=True)
    assert outcome.error is None
    assert outcome.finish_reason == "deadline"
    assert isinstance(events.events[-1], RunDone)


async def test_streamed_reasoning_is_forwarded_and_its_blocks_go_back_with_the_next_turn() -> None:
    thinking = ReasoningBlock(text="I should look it up first.", signature="sig-1", provider="anthropic")
    first = call_tools(("call_1", "echo", {"q": "x"}))
    first.message.reasoning = [thinking]
    assert first.message.tool_calls is not None
    first.message.tool_calls[0].signature = "opaque-call-signature"
    scripted = Scripted([first, answer("done")], tools={"echo": echo})
    events = Recorder()
    outcome = await scripted.loop().run(plan("echo"), events, stream_text=True)
    assert outcome.finish_reason == "stop"
    reasoning = events.of(RunReasoning)
    assert "".join(e.delta for e in reasoning) == "I should look it up first."
    assert {e.iteration for e in reasoning} == {1}
    replayed = scripted.completion_requests[1]["messages"][1]
    assert replayed["reasoning"] == [
        {"text": "I should look it up first.", "signature": "sig-1", "provider": "anthropic"}
    ]
    assert replayed["toolCalls"][0]["signature"] == "opaque-call-signature"


def weather_spec() -> ToolSpec:
    return ToolSpec(name="get_weather", description="the client's own tool", input_schema={"type": "object"})


async def test_a_call_of_a_client_side_tool_ends_the_run_and_is_handed_back_undispatched() -> None:
    scripted = Scripted([call_tools(("c1", "get_weather", {"city": "Oslo"}))], {"echo": echo})
    events = Recorder()
    run_plan = replace(plan("echo"), client_tools=[weather_spec()])
    outcome = await scripted.loop().run(run_plan, events, stream_text=True)
    assert (outcome.finish_reason, outcome.iterations) == ("tool_calls", 1)
    assert outcome.appended[-1].tool_calls == [ToolCall(id="c1", name="get_weather", arguments={"city": "Oslo"})]
    assert scripted.tool_calls == []
    assert events.of(RunToolCall) == []
    [done] = events.of(RunDone)
    assert done.finish_reason == "tool_calls"
    offered = [tool["name"] for tool in scripted.completion_requests[0]["tools"]]
    assert offered == ["echo", "get_weather"]


async def test_our_tools_called_in_the_same_turn_as_a_client_side_tool_are_dropped_unrun() -> None:
    scripted = Scripted(
        [call_tools(("c1", "echo", {"q": "x"}), ("c2", "get_weather", {"city": "Oslo"}))], {"echo": echo}
    )
    run_plan = replace(plan("echo"), client_tools=[weather_spec()])
    outcome = await scripted.loop().run(run_plan, Recorder(), stream_text=False)
    assert outcome.finish_reason == "tool_calls"
    # The caller can only answer its own call: the conversation it continues must not hold ours.
    assert [call.id for call in outcome.appended[-1].tool_calls or []] == ["c2"]
    assert scripted.tool_calls == []


STEPS = [
    CallToolProgress(progress=1, total=2, message="halfway"),
    CallToolProgress(progress=2, total=2),
]


async def test_a_streamed_run_reports_each_tools_progress_before_its_result() -> None:
    scripted = Scripted(
        [call_tools(("c1", "echo", {"q": "a"}), ("c2", "slow", {"q": "b"})), answer("done")],
        {"echo": echo, "slow": echo},
        progress={"slow": STEPS},
    )
    events = Recorder()
    await scripted.loop().run(plan("echo", "slow"), events, stream_text=True)

    # The event stream, or plain JSON for a call with no event to send (the gateway chooses).
    assert scripted.tool_call_accepts == ["text/event-stream, application/json"] * 2
    assert [(e.iteration, e.tool_call_id, e.progress, e.total, e.message) for e in events.of(RunToolProgress)] == [
        (1, "c2", 1, 2, "halfway"),
        (1, "c2", 2, 2, None),
    ]
    kinds = [(type(e).__name__, getattr(e, "tool_call_id", None)) for e in events.events]
    slow_events = [kind for kind, call_id in kinds if call_id == "c2"]
    assert slow_events == ["RunToolProgress", "RunToolProgress", "RunToolResult"]
    assert events.of(RunToolResult)[1].content == "echo b"


async def test_a_non_streamed_run_asks_for_json_tool_answers_and_reports_no_progress() -> None:
    scripted = Scripted(
        [call_tools(("c1", "slow", {"q": "b"})), answer("done")], {"slow": echo}, progress={"slow": STEPS}
    )
    events = Recorder()
    outcome = await scripted.loop().run(plan("slow"), events, stream_text=False)

    assert "text/event-stream" not in scripted.tool_call_accepts[0]
    assert not events.of(RunToolProgress)
    assert outcome.appended[1].content == "echo b"


async def test_an_error_event_of_a_streamed_tool_call_is_an_error_result_for_the_model() -> None:
    scripted = Scripted(
        [call_tools(("c1", "gone", {})), answer("sorry")],
        stream_errors={"gone": ("tool_not_found", 'No MCP server offers a tool named "gone".')},
    )
    events = Recorder()
    outcome = await scripted.loop().run(plan("gone"), events, stream_text=True)

    [result] = events.of(RunToolResult)
    assert result.is_error is True
    assert result.content == 'The tool call failed: No MCP server offers a tool named "gone".'
    assert outcome.finish_reason == "stop"


# --- budgets: the run's own, and the monthly ones through its spend guard -------------------------------------


def priced(reply: CompletionResponse, cost_usd: float) -> CompletionResponse:
    """``reply`` with a cost, as completion-service reports it for a model with a price in its catalog."""
    return reply.model_copy(update={"usage": reply.usage.model_copy(update={"cost_usd": cost_usd})})


def with_limits(run_plan: RunPlan, **limits: Any) -> RunPlan:
    return replace(run_plan, limits=replace(run_plan.limits, **limits))


async def test_a_run_reaching_its_token_budget_ends_with_budget_and_keeps_its_partial_result() -> None:
    # Each scripted call uses 15 tokens: 15, 30 (under 40: one more call), 45 (stop before the fourth).
    scripted = Scripted([call_tools((f"c{i}", "echo", {"q": str(i)})) for i in range(5)], {"echo": echo})
    events = Recorder()
    outcome = await scripted.loop().run(with_limits(plan("echo"), max_total_tokens=40), events, stream_text=True)
    assert (outcome.finish_reason, outcome.budget) == ("budget", "run_tokens")
    assert len(scripted.completion_requests) == 3
    assert outcome.usage.total_tokens == 45
    assert [m.role for m in outcome.appended] == ["assistant", "tool"] * 3  # every call answered
    done = events.events[-1]
    assert isinstance(done, RunDone)
    assert (done.finish_reason, done.budget, done.iterations) == ("budget", "run_tokens", 3)


async def test_a_run_reaching_its_cost_budget_ends_with_budget_run_cost() -> None:
    calls = [call_tools((f"c{i}", "echo", {"q": str(i)})) for i in range(5)]
    replies: list[CompletionResponse | None] = [priced(reply, 0.004) for reply in calls]
    scripted = Scripted(replies, {"echo": echo})
    events = Recorder()
    outcome = await scripted.loop().run(with_limits(plan("echo"), max_cost_usd=0.01), events, stream_text=False)
    assert (outcome.finish_reason, outcome.budget) == ("budget", "run_cost")
    assert len(scripted.completion_requests) == 3  # 0.004, 0.008, then 0.012 reaches 0.01
    assert outcome.usage.cost_usd == pytest.approx(0.012)
    done = events.of(RunDone)[0]
    assert (done.finish_reason, done.budget) == ("budget", "run_cost")


class FakeSpendGuard:
    """A monthly budget with ``left`` tokens: told every call, asked before every call."""

    def __init__(self, left: int, *, unavailable: bool = False) -> None:
        self.left = left
        self.unavailable = unavailable
        self.told: list[Usage] = []
        self.asked = 0

    async def exhausted(self) -> BudgetName | None:
        self.asked += 1
        if self.unavailable and self.told:
            raise UpstreamError("limits_unavailable", "Redis is down", status=503)
        return "tenant_monthly_tokens" if sum(u.total_tokens for u in self.told) >= self.left else None

    async def spent(self, usage: Usage) -> None:
        self.told.append(usage)


async def test_a_spend_guard_is_told_each_calls_usage_and_ends_the_run_with_its_budget() -> None:
    scripted = Scripted([call_tools((f"c{i}", "echo", {"q": str(i)})) for i in range(5)], {"echo": echo})
    guard = FakeSpendGuard(left=30)
    events = Recorder()
    outcome = await scripted.loop().run(replace(plan("echo"), spending=guard), events, stream_text=True)
    assert (outcome.finish_reason, outcome.budget) == ("budget", "tenant_monthly_tokens")
    assert guard.told == [Usage(input_tokens=10, output_tokens=5)] * 2
    assert guard.asked == 3
    assert [m.role for m in outcome.appended] == ["assistant", "tool"] * 2
    assert events.of(RunDone)[0].budget == "tenant_monthly_tokens"


async def test_the_runs_own_limits_are_asked_before_its_spend_guard() -> None:
    scripted = Scripted([call_tools(("c0", "echo", {"q": "0"}))], {"echo": echo})
    guard = FakeSpendGuard(left=15)  # used up by the first call, but the round limit comes first
    outcome = await scripted.loop().run(
        replace(plan("echo", max_iterations=1), spending=guard), Recorder(), stream_text=True
    )
    assert (outcome.finish_reason, outcome.budget) == ("max_iterations", None)
    assert guard.asked == 1  # before the first call only


async def test_budgets_that_cannot_be_checked_end_the_run_with_an_error_before_its_next_call() -> None:
    scripted = Scripted([call_tools((f"c{i}", "echo", {"q": str(i)})) for i in range(3)], {"echo": echo})
    events = Recorder()
    outcome = await scripted.loop().run(
        replace(plan("echo"), spending=FakeSpendGuard(left=1000, unavailable=True)), events, stream_text=True
    )
    assert outcome.finish_reason == "error"
    assert outcome.error is not None
    assert outcome.error.code == "limits_unavailable"
    assert len(scripted.completion_requests) == 1
    assert [m.role for m in outcome.appended] == ["assistant", "tool"]  # the first round is kept
    assert events.events[-1] == RunError(run_id="run_test", code="limits_unavailable", message="Redis is down")


async def test_the_runs_reasoning_and_verbosity_go_with_every_llm_call() -> None:
    scripted = Scripted([call_tools(("c1", "echo", {"q": "x"})), answer("done")], tools={"echo": echo})
    controlled = replace(plan("echo"), reasoning=ReasoningControl(effort="high", summary="auto"), verbosity="low")
    await scripted.loop().run(controlled, Recorder(), stream_text=False)
    assert len(scripted.completion_requests) == 2
    for sent in scripted.completion_requests:
        assert (sent["reasoning"], sent["verbosity"]) == ({"effort": "high", "summary": "auto"}, "low")


@pytest.mark.parametrize("stream_text", [True, False])
async def test_the_calls_warnings_and_reasoning_tokens_reach_the_done_event_and_the_outcome(stream_text: bool) -> None:
    ignored = "The model 'scripted' cannot reason: reasoning was ignored."
    first, last = call_tools(("c1", "echo", {"q": "x"})), answer("done")
    first.warnings = [ignored]
    last.warnings = [ignored, "verbosity was ignored."]
    first.usage = Usage(input_tokens=10, output_tokens=5, reasoning_tokens=3)
    scripted = Scripted([first, last], tools={"echo": echo})
    events = Recorder()
    outcome = await scripted.loop().run(plan("echo"), events, stream_text=stream_text)
    [done] = events.of(RunDone)
    assert done.warnings == outcome.warnings == [ignored, "verbosity was ignored."]  # each once, in order
    assert done.usage == Usage(input_tokens=20, output_tokens=10, reasoning_tokens=3)


async def test_a_run_whose_calls_warn_of_nothing_has_no_warnings() -> None:
    events = Recorder()
    await Scripted([answer("ok")]).loop().run(plan(), events, stream_text=True)
    [done] = events.of(RunDone)
    assert done.warnings is None
    assert "warnings" not in dump(done)
