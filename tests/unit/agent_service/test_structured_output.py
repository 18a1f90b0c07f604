"""A run with ``responseFormat``: the format on every LLM call, the final answer validated, one repair round, then
``invalid_output``; against scripted services."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agent_service.core.limits import RunLimits
from agent_service.core.run import RunPlan
from suite_common.deadline import Deadline
from suite_common.wire import (
    JsonSchemaFormat,
    Message,
    ResponseFormat,
    RunDone,
    RunError,
    RunEvent,
    RunText,
    ToolInfo,
)
from support.answer_formats import CITY_SCHEMA, PARIS
from support.scripted import Scripted, answer, call_tools

pytestmark = pytest.mark.anyio

CITY_FORMAT = ResponseFormat(
    type="json_schema", json_schema=JsonSchemaFormat(name="city", schema=CITY_SCHEMA, strict=True)
)


def plan(response_format: ResponseFormat | None = CITY_FORMAT, **fields: Any) -> RunPlan:
    base = RunPlan(
        run_id="run_test",
        model="scripted",
        messages=[Message(role="user", content="Biggest city of France?")],
        tools=[ToolInfo(name="lookup", description="Look up.", input_schema={"type": "object"}, server="s")],
        tool_choice="auto",
        limits=RunLimits(max_iterations=15, deadline=Deadline.after(10)),
        response_format=response_format,
    )
    return replace(base, **fields)


class Recorder:
    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    async def __call__(self, event: RunEvent) -> None:
        self.events.append(event)


async def lookup(_: dict[str, Any]) -> str:
    return "Paris, 2102650 inhabitants"


async def test_a_valid_answer_is_the_runs_output_and_the_format_goes_with_every_call() -> None:
    valid = json.dumps(PARIS)
    scripted = Scripted([call_tools(("c1", "lookup", {})), answer(valid)], {"lookup": lookup})
    events = Recorder()
    outcome = await scripted.loop().run(plan(), events, stream_text=True)
    assert (outcome.finish_reason, outcome.output) == ("stop", PARIS)
    done = events.events[-1]
    assert isinstance(done, RunDone)
    assert done.output == PARIS
    # The answer is told once valid, whole: no delta of an answer that might still be invalid.
    assert [event.delta for event in events.events if isinstance(event, RunText)] == [valid]
    formats = [request["responseFormat"] for request in scripted.completion_requests]
    assert (
        formats == [{"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True}}] * 2
    )


async def test_an_invalid_answer_gets_exactly_one_repair_round_saying_what_failed() -> None:
    valid = json.dumps(PARIS)
    scripted = Scripted([answer('{"city": "Paris"}'), answer(valid)])
    events = Recorder()
    outcome = await scripted.loop().run(plan(), events, stream_text=True)
    assert (outcome.finish_reason, outcome.iterations, outcome.error) == ("stop", 2, None)
    assert outcome.output == PARIS
    repair = scripted.completion_requests[1]["messages"][-1]
    assert repair["role"] == "user"
    assert "'population' is a required property" in repair["content"]
    # The invalid answer and the repair request stay in the conversation, in order.
    assert [message.role for message in outcome.appended] == ["assistant", "user", "assistant"]
    assert outcome.appended[0].content == '{"city": "Paris"}'


async def test_an_answer_still_invalid_after_the_repair_fails_the_run_with_invalid_output() -> None:
    scripted = Scripted([answer("Paris, I think."), answer('{"city": "Paris", "population": "many"}')])
    events = Recorder()
    outcome = await scripted.loop().run(plan(), events, stream_text=True)
    assert len(scripted.completion_requests) == 2  # one repair, no more
    assert outcome.error is not None
    assert (outcome.finish_reason, outcome.error.code, outcome.error.status) == ("error", "invalid_output", 422)
    assert outcome.output is None
    error = events.events[-1]
    assert isinstance(error, RunError)
    assert error.code == "invalid_output"
    assert "population" in error.message
    assert not [event for event in events.events if isinstance(event, RunText)]


async def test_json_object_takes_any_object_and_refuses_other_json() -> None:
    scripted = Scripted([answer("[1, 2]"), answer('{"anything": [1, 2]}')])
    outcome = await scripted.loop().run(plan(ResponseFormat(type="json_object")), Recorder(), stream_text=False)
    assert outcome.output == {"anything": [1, 2]}
    assert "not a JSON object" in scripted.completion_requests[1]["messages"][-1]["content"]


async def test_a_run_without_a_format_has_no_output_and_streams_its_text_as_it_comes() -> None:
    scripted = Scripted([answer("the answer is 42")])
    events = Recorder()
    outcome = await scripted.loop().run(plan(None), events, stream_text=True)
    assert outcome.output is None
    assert len([event for event in events.events if isinstance(event, RunText)]) > 1
    assert "responseFormat" not in scripted.completion_requests[0]


async def test_a_schema_whose_ref_does_not_resolve_fails_the_run_at_once_not_the_service() -> None:
    broken = ResponseFormat(
        type="json_schema", json_schema=JsonSchemaFormat(name="x", schema={"$ref": "https://schemas.example/x.json"})
    )
    scripted = Scripted([answer("{}")])
    outcome = await scripted.loop().run(plan(broken), Recorder(), stream_text=False)
    assert outcome.error is not None
    assert (outcome.error.code, len(scripted.completion_requests)) == ("invalid_output", 1)
    assert "$ref" in outcome.error.message


async def test_a_schema_whose_references_loop_fails_the_run_with_invalid_output_not_a_crash() -> None:
    looping = ResponseFormat(
        type="json_schema",
        json_schema=JsonSchemaFormat(name="x", schema={"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}),
    )
    scripted = Scripted([answer("{}")])
    outcome = await scripted.loop().run(plan(looping), Recorder(), stream_text=False)
    assert outcome.error is not None
    assert (outcome.error.code, len(scripted.completion_requests)) == ("invalid_output", 1)
    assert "loop" in outcome.error.message


async def test_a_run_out_of_iterations_before_its_repair_is_answered_fails_with_invalid_output() -> None:
    scripted = Scripted([answer('{"city": "Paris"}')])
    events = Recorder()
    limits = RunLimits(max_iterations=1, deadline=Deadline.after(10))
    outcome = await scripted.loop().run(plan(limits=limits), events, stream_text=False)
    assert len(scripted.completion_requests) == 1
    assert outcome.error is not None
    assert (outcome.finish_reason, outcome.error.code, outcome.output) == ("error", "invalid_output", None)
    error = events.events[-1]
    assert isinstance(error, RunError)
    assert error.code == "invalid_output"


async def test_a_run_out_of_iterations_without_a_repair_keeps_its_finish_reason() -> None:
    scripted = Scripted([call_tools(("c1", "lookup", {}))], {"lookup": lookup})
    limits = RunLimits(max_iterations=1, deadline=Deadline.after(10))
    outcome = await scripted.loop().run(plan(limits=limits), Recorder(), stream_text=False)
    assert (outcome.finish_reason, outcome.error, outcome.output) == ("max_iterations", None, None)
