"""Structured answers (``response_format`` / ``responseFormat``) through the real services: the official ``openai``
SDK against the OpenAI front, and the agent API, with a scripted OpenAI behind completion-service (its requests
show what each LLM call asked for) and the stored run read back."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.shared_params import ResponseFormatJSONSchema
from pydantic import BaseModel

from agent_service.core.limits import RunLimits
from agent_service.core.run import LlmCall, RunPlan
from agent_service.runs.journal import RunJournal
from agent_service.runs.plans import Takeover, stored_plan, takeover
from agent_service.store import NewApproval, NewRun, RunStore
from suite_common.deadline import Deadline
from suite_common.wire import JsonSchemaFormat, Message, ResponseFormat, RunEvent, ToolInfo, Usage
from support import fake_openai
from support.answer_formats import CITY_SCHEMA, PARIS
from support.scripted import Scripted, answer, call_tools
from support.stacks import AgentStack, running_stack

pytestmark = pytest.mark.anyio

CITY_FORMAT: ResponseFormatJSONSchema = {
    "type": "json_schema",
    "json_schema": {"name": "city_facts", "schema": CITY_SCHEMA, "strict": True},
}


class CityFacts(BaseModel):
    city: str
    population: int


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentStack]:
    database_url = f"sqlite:///{tmp_path_factory.mktemp('runs')}/runs.db"
    async with running_stack(database_url=database_url) as running:
        yield running


@pytest.fixture
async def fresh(stack: AgentStack) -> AgentStack:
    stack.llm.requests.clear()
    return stack


@pytest.fixture
async def client(stack: AgentStack) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=f"{stack.agent_url}/v1", api_key="any", max_retries=0) as sdk:
        yield sdk


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_the_sdk_gets_a_valid_object_for_a_json_schema_response_format(
    fresh: AgentStack, client: openai.AsyncOpenAI
) -> None:
    fresh.llm.push(fake_openai.text(json.dumps(PARIS)))
    completion = await client.chat.completions.create(
        model="gpt-4o",
        messages=user("Biggest city of France?"),
        response_format=CITY_FORMAT,
    )
    content = completion.choices[0].message.content
    assert json.loads(content or "") == PARIS
    # The provider was asked for the schema, the OpenAI way.
    [sent] = fresh.llm.requests
    assert sent["response_format"] == CITY_FORMAT


async def test_the_sdks_parse_helper_gets_its_pydantic_model_back(
    fresh: AgentStack, client: openai.AsyncOpenAI
) -> None:
    fresh.llm.push(fake_openai.text(json.dumps(PARIS)))
    completion = await client.chat.completions.parse(
        model="gpt-4o", messages=user("Biggest city of France?"), response_format=CityFacts
    )
    assert completion.choices[0].message.parsed == CityFacts(city="Paris", population=2102650)
    assert fresh.llm.requests[0]["response_format"]["type"] == "json_schema"


async def test_an_invalid_first_answer_gets_one_repair_round_and_the_client_only_the_valid_one(
    fresh: AgentStack, client: openai.AsyncOpenAI
) -> None:
    fresh.llm.push(fake_openai.text("The biggest city is Paris."), fake_openai.text(json.dumps(PARIS)))
    stream = await client.chat.completions.create(
        model="gpt-4o",
        messages=user("Biggest city of France?"),
        response_format=CITY_FORMAT,
        stream=True,
    )
    streamed = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert json.loads(streamed) == PARIS
    first, repair = fresh.llm.requests
    told = repair["messages"][-2:]
    assert told[0] == {"role": "assistant", "content": "The biggest city is Paris."}
    assert told[1]["role"] == "user"
    assert "not JSON" in told[1]["content"]
    assert repair["response_format"] == first["response_format"] == CITY_FORMAT


async def test_json_object_is_honoured_and_still_invalid_answers_fail_with_invalid_output(
    fresh: AgentStack, client: openai.AsyncOpenAI
) -> None:
    fresh.llm.push(fake_openai.text("[1, 2]"), fake_openai.text("still no object"))
    with pytest.raises(openai.APIStatusError) as failure:
        await client.chat.completions.create(
            model="gpt-4o", messages=user("Answer in JSON"), response_format={"type": "json_object"}
        )
    assert failure.value.status_code == 422
    assert failure.value.code == "invalid_output"
    assert len(fresh.llm.requests) == 2
    assert fresh.llm.requests[0]["response_format"] == {"type": "json_object"}


async def test_the_agent_api_answers_and_stores_the_output(fresh: AgentStack) -> None:
    fresh.llm.push(fake_openai.text(json.dumps(PARIS)))
    body = {
        "model": "gpt-4o",
        "messages": user("Biggest city of France?"),
        "tools": [],
        "responseFormat": CITY_FORMAT,
    }
    response = await fresh.http.post("/api/v1/agent/run", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["output"] == PARIS
    stored = await fresh.http.get(f"/api/v1/agent/runs/{result['runId']}")
    assert stored.json()["output"] == PARIS


UNUSABLE_SCHEMAS = {
    "not JSON Schema": {"type": "no-such-type"},
    "references that loop": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
    "a loop below the root": {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/b"}},
        "$defs": {"b": {"type": "object", "$ref": "#/$defs/b"}},
    },
    "a remote reference": {"type": "object", "properties": {"a": {"$ref": "https://schemas.example/a.json"}}},
    "a dynamic reference to nowhere": {"$dynamicRef": "#meta"},
}


@pytest.mark.parametrize("schema", UNUSABLE_SCHEMAS.values(), ids=UNUSABLE_SCHEMAS.keys())
async def test_the_agent_api_refuses_a_schema_no_answer_could_be_checked_against(
    fresh: AgentStack, schema: dict[str, Any]
) -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    body = {"model": "gpt-4o", "messages": user("hi"), "responseFormat": bad}
    response = await fresh.http.post("/api/v1/agent/run", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert fresh.llm.requests == []


async def test_a_streamed_agent_run_fails_with_an_invalid_output_error_event(fresh: AgentStack) -> None:
    fresh.llm.push(fake_openai.text("no"), fake_openai.text("still no"))
    body = {"model": "gpt-4o", "messages": user("hi"), "tools": [], "stream": True, "responseFormat": CITY_FORMAT}
    async with fresh.http.stream("POST", "/api/v1/agent/run", json=body) as response:
        events = [json.loads(line[5:]) async for line in response.aiter_lines() if line.startswith("data:")]
    assert events[-1]["type"] == "error"
    assert events[-1]["code"] == "invalid_output"
    run = await fresh.http.get(f"/api/v1/agent/runs/{events[-1]['runId']}")
    stored = run.json()
    assert (stored["status"], stored["finishReason"], stored["error"]["code"]) == ("failed", "error", "invalid_output")
    assert "output" not in stored


# --- the repair round stored (a real RunJournal on SQLite) ---------------------------------------------------------

REPAIR_FORMAT = ResponseFormat(type="json_schema", json_schema=JsonSchemaFormat(name="city", schema=CITY_SCHEMA))


async def stored_run(tmp_path: Path) -> tuple[RunStore, RunPlan]:
    store = await RunStore.open(f"sqlite:///{tmp_path}/repair.db")
    plan = RunPlan(
        run_id="run_repair",
        model="scripted",
        messages=[Message(role="user", content="Biggest city?")],
        tools=[ToolInfo(name="lookup", description="Look up.", input_schema={"type": "object"}, server="s")],
        tool_choice="auto",
        limits=RunLimits(max_iterations=15, deadline=Deadline.after(30)),
        response_format=REPAIR_FORMAT,
        approval_tools=frozenset({"lookup"}),
    )
    run = NewRun(run_id=plan.run_id, model=plan.model, plan=stored_plan(plan), input_messages=plan.messages)
    await store.create_run(run, owner="A", lease_seconds=30)
    return store, plan


async def no_events(_: RunEvent) -> None:
    return None


async def test_a_repair_round_that_waits_for_approval_keeps_the_invalid_answer_and_the_repair_stored(
    tmp_path: Path,
) -> None:
    store, plan = await stored_run(tmp_path)

    async def lookup(_: dict[str, Any]) -> str:
        return "Paris"

    scripted = Scripted([answer('{"city": 1}'), call_tools(("c1", "lookup", {}))], {"lookup": lookup})
    journal = RunJournal(plan.run_id, store=store, owner="A", base=0)
    outcome = await scripted.loop().run(plan, journal.emit, stream_text=False, recorder=journal)
    assert outcome.waiting
    held = [NewApproval("c1", outcome.iterations, "lookup", "s", {})]
    await journal.park(held, wait_seconds=60, deadline_left_seconds=20)
    own = await store.run_messages(plan.run_id)
    # No gap: the invalid answer and the repair request are stored before the round's tool-call turn.
    assert [(message.role, message.content) for message in own[:2]] == [
        ("user", "Biggest city?"),
        ("assistant", '{"city": 1}'),
    ]
    assert own[2].role == "user"
    assert "not valid" in (own[2].text or "")
    assert own[3].role == "assistant"
    assert [call.id for call in own[3].tool_calls or []] == ["c1"]
    record = await store.get_run(plan.run_id)
    assert record is not None
    taken = takeover(record, [], own)
    assert (taken.finished, taken.resume.turn_position) == (None, 3)
    await store.aclose()


async def taken_over_after_its_repair(tmp_path: Path) -> tuple[RunStore, Takeover]:
    """A run whose invalid answer and repair request were stored, taken over by another replica right then."""
    store, plan = await stored_run(tmp_path)
    journal = RunJournal(plan.run_id, store=store, owner="A", base=0)
    invalid = Message(role="assistant", content='{"city": 1}')
    repair = Message(role="user", content="Your answer is not valid.")
    call = LlmCall("scripted", "scripted", Usage(), iteration=1)
    await journal.turn(1, invalid, iterations=1, usage=Usage(), call=call)
    await journal.repair(1, invalid, repair, iterations=1, usage=Usage())
    own = await store.run_messages(plan.run_id)
    record = await store.get_run(plan.run_id)
    assert record is not None
    return store, takeover(record, [], own)


async def test_a_run_taken_over_right_after_its_repair_was_stored_asks_the_model_again(tmp_path: Path) -> None:
    store, taken = await taken_over_after_its_repair(tmp_path)
    # The repair round goes on, the run does not end.
    assert taken.finished is None
    assert [message.role for message in taken.plan.messages] == ["user", "assistant", "user"]
    scripted = Scripted([answer(json.dumps(PARIS))])
    outcome = await scripted.loop().run(taken.plan, no_events, stream_text=False, resume=taken.resume)
    assert (outcome.finish_reason, outcome.output, outcome.iterations) == ("stop", PARIS, 2)
    await store.aclose()


async def test_a_run_taken_over_after_its_repair_round_gets_no_second_one(tmp_path: Path) -> None:
    store, taken = await taken_over_after_its_repair(tmp_path)
    assert taken.resume.repaired
    # The model answers invalid JSON again: the run's one repair was spent before the takeover, so it fails.
    scripted = Scripted([answer('{"city": 2}'), answer(json.dumps(PARIS))])
    outcome = await scripted.loop().run(taken.plan, no_events, stream_text=False, resume=taken.resume)
    assert outcome.error is not None
    assert outcome.error.code == "invalid_output"
    await store.aclose()
