"""The context fitter, through the loop against a scripted completion-service: what is sent when a conversation fits
a window, when only old tool results are too long, and what a fit costs."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from agent_service.core.limits import RunLimits
from agent_service.core.run import RunPlan
from agent_service.engine.context import ContextFitter
from agent_service.engine.state import RunState
from agent_service.engine.tokens import CHARS_PER_TOKEN, messages_tokens
from suite_common.deadline import Deadline
from suite_common.wire import CompletionRequest, Message, RunContextCompacted, RunEvent, ToolCall, ToolSpec
from support.scripted import Scripted, answer

pytestmark = pytest.mark.anyio


def _plan(messages: list[Message], window: int | None) -> RunPlan:
    return RunPlan(
        run_id="run_ctx",
        model="scripted",
        messages=messages,
        tools=[],
        tool_choice="auto",
        limits=RunLimits(max_iterations=5, deadline=Deadline.after(10)),
        context_tokens=window,
        max_tokens=1_000,
    )


def _turns(count: int, chars: int) -> list[Message]:
    return [
        Message(role="user" if n % 2 == 0 else "assistant", content=f"turn {n} " + "x" * chars) for n in range(count)
    ]


class _Events:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    async def __call__(self, event: RunEvent) -> None:
        self.events.append(event)


async def test_a_conversation_that_fits_is_sent_as_it_is() -> None:
    messages = [*_turns(20, 300), Message(role="user", content="question")]
    scripted = Scripted([answer("fine")])
    events = _Events()
    await scripted.loop().run(_plan(messages, 32_768), events, stream_text=False)
    assert len(scripted.completion_requests) == 1
    assert len(scripted.completion_requests[0]["messages"]) == len(messages)
    assert not [e for e in events.events if isinstance(e, RunContextCompacted)]


async def test_old_tool_results_are_trimmed_before_any_turn_is_folded() -> None:
    call = ToolCall(id="c1", name="search", arguments={"q": "a"})
    big = "result " * 6_000  # about 14,000 tokens by the estimate
    messages = [
        Message(role="user", content="find it"),
        Message(role="assistant", tool_calls=[call]),
        Message(role="tool", tool_call_id="c1", content=big),
        Message(role="assistant", content="found it"),
        Message(role="user", content="and now?"),
    ]
    scripted = Scripted([answer("now this")])
    events = _Events()
    outcome = await scripted.loop().run(_plan(messages, 16_000), events, stream_text=False)
    assert outcome.finish_reason == "stop"
    (sent,) = scripted.completion_requests  # no summary call: trimming was enough
    tool_result = sent["messages"][2]
    assert tool_result["role"] == "tool"
    assert "removed to fit the model's context window" in tool_result["content"]
    (compacted,) = [e for e in events.events if isinstance(e, RunContextCompacted)]
    assert compacted.messages_folded == 0
    assert compacted.tokens_after < compacted.tokens_before
    assert sent["messages"][-1]["content"] == "and now?"


async def test_the_system_message_and_the_last_user_message_are_never_folded() -> None:
    messages = [Message(role="system", content="Be brief."), *_turns(40, 1_000), Message(role="user", content="q?")]
    scripted = Scripted([answer("Summary: earlier turns."), answer("the answer")])
    await scripted.loop().run(_plan(messages, 16_000), _Events(), stream_text=False)
    summary_call, answered = scripted.completion_requests
    assert "You summarise" in summary_call["messages"][0]["content"]
    sent = answered["messages"]
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[1]["content"] == "Summary of the earlier conversation: Summary: earlier turns."
    assert sent[-1]["content"] == "q?"
    assert messages_tokens([Message.model_validate(m) for m in sent]) < 16_000


async def test_fitting_a_conversation_that_clearly_fits_costs_well_under_a_millisecond_per_hundred_messages() -> None:
    messages = [*_turns(1_000, 40), Message(role="user", content="question")]
    plan = _plan(messages, 1_000_000)
    state = RunState(conversation=list(messages))
    request = CompletionRequest(model="scripted", messages=messages)
    fitter = ContextFitter(Scripted([]).loop().completions)

    async def sent(fitted: CompletionRequest) -> Any:
        return fitted

    started = time.perf_counter()
    assert await fitter.answered(plan, state, _Events(), None, request, sent) is request
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(10):
        state.conversation.append(Message(role="assistant", content="one more turn"))
        request = CompletionRequest(model="scripted", messages=list(state.conversation))
        assert await fitter.answered(plan, state, _Events(), None, request, sent) is request
    later = (time.perf_counter() - started) / 10
    # Measured: about 2.5 ms for the first round's 1,001 messages, then some microseconds a round (only the round's
    # new messages are counted); the bounds leave room for a loaded machine.
    assert first < 0.1
    assert later < 0.005
    assert CHARS_PER_TOKEN == 3.0  # the figure docs/agent-api.md states


async def test_a_run_without_a_known_window_is_never_fitted() -> None:
    messages = [*_turns(200, 3_000), Message(role="user", content="q?")]
    scripted = Scripted([answer("the answer")])
    await scripted.loop().run(replace(_plan(messages, None)), _Events(), stream_text=False)
    assert len(scripted.completion_requests[0]["messages"]) == len(messages)


async def test_the_runs_own_earlier_tool_results_are_trimmed_and_the_current_rounds_kept_whole() -> None:
    big = "result " * 3_000  # about 7,000 tokens by the estimate: two do not fit a 16k window
    messages = [Message(role="user", content="research it")]
    for n in range(3):
        call = ToolCall(id=f"c{n}", name="search", arguments={"q": str(n)})
        messages += [
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id=f"c{n}", content=big),
        ]
    state = RunState(conversation=list(messages))
    state.turn_position = 5
    request = CompletionRequest(model="scripted", messages=messages)
    fitter = ContextFitter(Scripted([]).loop().completions)  # a summary call would find no answer

    async def sent(fitted: CompletionRequest) -> CompletionRequest:
        return fitted

    fitted = await fitter.answered(_plan(messages, 16_000), state, _Events(), None, request, sent)
    roles = [(m.role, m.tool_call_id) for m in fitted.messages]
    assert roles == [(m.role, m.tool_call_id) for m in messages]  # nothing folded: every call keeps its result
    assert [m.text == big for m in fitted.messages if m.role == "tool"] == [False, False, True]
    assert "removed to fit the model's context window" in (fitted.messages[2].text or "")
    assert messages_tokens(fitted.messages) < 16_000


async def test_the_tool_definitions_are_counted_once_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import agent_service.engine.context as context

    counted: list[int] = []

    def counting(tools: list[ToolSpec]) -> int:
        counted.append(len(tools))
        return 10 * len(tools)

    monkeypatch.setattr(context, "tools_tokens", counting)
    specs = [ToolSpec(name=f"tool_{n}", description="d", input_schema={"type": "object"}) for n in range(30)]
    messages = [Message(role="user", content="q?")]
    state = RunState(conversation=list(messages))
    fitter = ContextFitter(Scripted([]).loop().completions)

    async def sent(fitted: CompletionRequest) -> CompletionRequest:
        return fitted

    for _ in range(3):  # each round's request copies the loop's list of specs
        request = CompletionRequest(model="scripted", messages=messages, tools=specs)
        await fitter.answered(_plan(messages, 32_768), state, _Events(), None, request, sent)
    assert counted == [30]
