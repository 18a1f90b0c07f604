"""Questions tool servers ask during a run (MCP elicitation), handed to a person, for real: agent-service processes
on SQLite and PostgreSQL, the scripted OpenAI behind a real completion-service, and a scripted gateway that speaks
the gateway's side of elicitation exactly (``support.scripted_elicit_gateway``).

A question parks the run in the store as an approval does: the replica that asked may die; another (or a restarted
one) takes the answer, forwards it to the gateway and follows the call to its result; a bad answer is refused; a
question nobody answers is declined once its wait runs out; a gateway that lost the call while the run waited makes
the result say its outcome is unknown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from integration.agent_service.test_run_takeover import TAKEOVER_SECONDS, EventStream, Replica, ended, kinds
from pydantic import SecretStr

from agent_service.app import create_app
from agent_service.core.run import INPUT_LOST
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.caller_keys import as_caller, key_entry
from support.fake_openai import ScriptedOpenAI, text, tool_calls
from support.mcp_gateway import GATEWAY_SECRET
from support.processes import agent_env, spawned
from support.run_streams import events_of, streamed_run
from support.scripted_elicit_gateway import Question, ScriptedElicitGateway, ScriptedTool
from support.servers import free_port, serve_app
from support.stacks import wait_for_run

pytestmark = pytest.mark.anyio

ACME_KEY = "sk-acme-inputs-0123456789"
GLOBEX_KEY = "sk-globex-inputs-0123456789"
WAIT_SECONDS = 1.5

PARTY = Question(
    "How many people, and which room?",
    {
        "type": "object",
        "properties": {
            "partySize": {"type": "integer", "minimum": 1},
            "room": {"type": "string", "enum": ["garden", "hall"], "default": "garden"},
        },
        "required": ["partySize"],
    },
)
CONFIRM = Question("Book it?", {"type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]})


def _callers(input_timeout: float | None = None) -> str:
    timeout = f"input_timeout_seconds = {input_timeout}\n" if input_timeout is not None else ""
    return (
        f"[tenants.acme]\n{timeout}\n[tenants.globex]\n\n"
        + key_entry("acme-app", "acme", ACME_KEY, trusted=True)
        + "\n"
        + key_entry("globex-app", "globex", GLOBEX_KEY, trusted=True)
    )


@dataclass
class Upstreams:
    llm: ScriptedOpenAI
    gateway: ScriptedElicitGateway
    gateway_url: str
    completion_url: str


@pytest.fixture
async def upstreams() -> AsyncIterator[Upstreams]:
    llm = ScriptedOpenAI()
    gateway = ScriptedElicitGateway(
        GATEWAY_SECRET,
        [
            ScriptedTool("book_table", "bookings", [PARTY]),
            ScriptedTool("book_carefully", "bookings", [PARTY, CONFIRM]),
        ],
    )
    async with AsyncExitStack() as running:
        llm_url = await running.enter_async_context(serve_app(llm.app))
        gateway_url = await running.enter_async_context(serve_app(gateway.app))
        settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), max_retries=0
        )
        completion_url = await running.enter_async_context(serve_app(create_completion_app(settings)))
        yield Upstreams(llm, gateway, gateway_url, completion_url)


@asynccontextmanager
async def _replica(
    upstreams: Upstreams, database_url: str, folder: Path, name: str, callers: str
) -> AsyncIterator[Replica]:
    """An agent-service process on ``database_url`` with a one-second lease and ``callers``; killed at the end."""
    port = free_port()
    callers_file = folder / f"{name}-callers.toml"
    callers_file.write_text(callers)
    env = agent_env(
        port,
        upstreams.completion_url,
        upstreams.gateway_url,
        database_url=database_url,
        lease_seconds=1.0,
        callers_file=callers_file,
    )
    async with (
        spawned("agent_service", env, port, folder / f"{name}.log") as process,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
    ):
        yield Replica(process, http)


def _body(content: str, tool: str = "book_table") -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}], "tools": [tool], "stream": True}


def _asked(events: list[tuple[int, str, dict[str, Any]]]) -> bool:
    return events[-1][1] == "input_required"


async def _ask(replica: Replica, tool: str = "book_table") -> tuple[str, dict[str, Any]]:
    """A streamed run on ``replica`` whose tool asks a question; its client leaves once asked. Its id and the
    ``input_required`` event."""
    body = _body("Book a table.", tool)
    async with replica.http.stream("POST", "/api/v1/agent/run", json=body, headers=as_caller(ACME_KEY, "alice")) as r:
        assert r.status_code == 200
        seen = await EventStream(r).read(until=_asked)
    assert kinds(seen) == ["run_started", "tool_call", "input_required"]
    return seen[0][2]["runId"], seen[-1][2]


async def test_a_question_parks_the_run_and_an_answer_on_another_replica_resumes_it_after_the_first_dies(
    upstreams: Upstreams, tmp_path: Path, own_postgres_url: str
) -> None:
    llm, gateway = upstreams.llm, upstreams.gateway
    llm.push(tool_calls(("call_book", "book_table", {})), text("Booked."))
    headers = as_caller(ACME_KEY, "alice")

    async with (
        _replica(upstreams, own_postgres_url, tmp_path, "a", _callers()) as a,
        _replica(upstreams, own_postgres_url, tmp_path, "b", _callers()) as b,
    ):
        run_id, asked = await _ask(a)
        await a.kill()
        assert (asked["toolCallId"], asked["name"], asked["server"]) == ("call_book", "book_table", "bookings")
        assert asked["message"] == PARTY.message
        assert asked["requestedSchema"] == PARTY.schema
        assert "expiresAt" in asked
        # The call was made with the run's key for it, and waits at the gateway.
        assert gateway.call_requests[0]["callId"] == f"{run_id}/call_book"
        input_id = asked["inputId"]

        b.http.headers.update(headers)
        waiting = (await b.http.get(f"/api/v1/agent/runs/{run_id}")).json()
        assert waiting["status"] == "waiting"
        [question] = waiting["inputs"]
        assert (question["inputId"], question["status"], question["toolCallId"]) == (input_id, "pending", "call_book")

        url = f"/api/v1/agent/runs/{run_id}/inputs"
        accept = {"inputs": [{"inputId": input_id, "action": "accept", "content": {"partySize": 4}}]}
        other = await b.http.post(url, json=accept, headers=as_caller(GLOBEX_KEY))
        assert other.status_code == 404
        assert other.json()["error"]["code"] == "run_not_found"
        wrong = {"inputs": [{"inputId": input_id, "action": "accept", "content": {"partySize": "four"}}]}
        invalid = await b.http.post(url, json=wrong)
        assert invalid.status_code == 400
        assert invalid.json()["error"]["code"] == "invalid_input"
        assert "partySize" in invalid.json()["error"]["message"]
        twice = await b.http.post(url, json={"inputs": [accept["inputs"][0], accept["inputs"][0]]})
        assert twice.status_code == 400
        unknown = await b.http.post(url, json={"inputs": [{"inputId": "el_nope", "action": "decline"}]})
        assert unknown.status_code == 409
        assert unknown.json()["error"]["code"] == "input_not_pending"
        assert gateway.answers == []  # nothing refused reached the gateway

        answered = await b.http.post(url, json=accept)
        assert answered.status_code == 200, answered.text
        assert answered.json()["inputs"][0]["status"] == "accepted"
        again = await b.http.post(url, json=accept)
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "input_not_pending"

        run = await wait_for_run(b.http, run_id, ended, within=TAKEOVER_SECONDS)
        async with b.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events") as replay:
            stored = await EventStream(replay).read()

    assert run["status"] == "completed", run
    assert run["resumes"] == 0  # an answer is no crash
    # The gateway got the answer with the schema's default filled, and was followed within the run's tenant.
    assert [(known, answer.action, answer.content) for known, answer in gateway.answers] == [
        (input_id, "accept", {"partySize": 4, "room": "garden"})
    ]
    assert gateway.follows[-1]["x-tenant-id"] == "acme"
    results = {m["toolCallId"]: m["content"] for m in run["messages"] if m["role"] == "tool"}
    assert results == {"call_book": 'book_table: accept {"partySize": 4, "room": "garden"}'}
    assert run["messages"][-1]["content"] == "Booked."
    [question] = run["inputs"]
    assert (question["status"], question["decidedBy"]) == ("accepted", "acme-app/alice")
    assert 'partySize": 4' not in str(run["inputs"])  # the answer is the server's to read, never shown
    assert list(dict.fromkeys(kinds(stored)))[2:] == ["input_required", "input_decided", "tool_result", "text", "done"]


async def test_a_question_nobody_answers_is_declined_when_its_wait_runs_out_on_the_restarted_replica(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    llm, gateway = upstreams.llm, upstreams.gateway
    llm.push(tool_calls(("call_book", "book_table", {})), text("Not booked."))
    database_url = f"sqlite:///{tmp_path}/runs.db"
    callers = _callers(input_timeout=WAIT_SECONDS)

    async with _replica(upstreams, database_url, tmp_path, "first", callers) as first:
        run_id, asked = await _ask(first)
        await first.kill()

    async with _replica(upstreams, database_url, tmp_path, "restarted", callers) as restarted:
        restarted.http.headers.update(as_caller(ACME_KEY))
        run = await wait_for_run(restarted.http, run_id, ended, within=TAKEOVER_SECONDS)

    assert run["status"] == "completed", run
    assert [(known, answer.action) for known, answer in gateway.answers] == [(asked["inputId"], "decline")]
    [question] = run["inputs"]
    assert (question["status"], question.get("decidedBy")) == ("declined", None)
    results = {m["toolCallId"]: m["content"] for m in run["messages"] if m["role"] == "tool"}
    assert results == {"call_book": "book_table: decline"}


async def test_a_call_asking_again_waits_again_and_a_call_the_gateway_lost_meanwhile_is_told_unknown(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    llm, gateway = upstreams.llm, upstreams.gateway
    llm.push(tool_calls(("call_book", "book_carefully", {})), text("Unsure."))
    headers = as_caller(ACME_KEY)

    async with _replica(upstreams, f"sqlite:///{tmp_path}/runs.db", tmp_path, "a", _callers()) as a:
        run_id, first = await _ask(a, "book_carefully")
        a.http.headers.update(headers)
        url = f"/api/v1/agent/runs/{run_id}/inputs"
        answer = {"inputs": [{"inputId": first["inputId"], "action": "accept", "content": {"partySize": 2}}]}
        assert (await a.http.post(url, json=answer)).status_code == 200

        def asked_again(run: dict[str, Any]) -> bool:
            return run["status"] == "waiting" and any(q["status"] == "pending" for q in run.get("inputs") or [])

        waiting = await wait_for_run(a.http, run_id, asked_again, within=TAKEOVER_SECONDS)
        [second] = [question for question in waiting["inputs"] if question["status"] == "pending"]
        assert second["message"] == CONFIRM.message
        gateway.forget_calls()  # the gateway restarts while the run waits
        answer = {"inputs": [{"inputId": second["inputId"], "action": "accept", "content": {"sure": True}}]}
        assert (await a.http.post(url, json=answer)).status_code == 200
        run = await wait_for_run(a.http, run_id, ended, within=TAKEOVER_SECONDS)

    assert run["status"] == "completed", run
    [result] = [m for m in run["messages"] if m["role"] == "tool"]
    assert (result["content"], result["isError"]) == (INPUT_LOST, True)


async def test_a_run_nobody_can_wait_for_declines_the_question_at_once_and_goes_on(upstreams: Upstreams) -> None:
    # Not stored (no database): it cannot wait, so it sends no callId and declines the gateway's question itself.
    llm, gateway = upstreams.llm, upstreams.gateway
    llm.push(tool_calls(("call_book", "book_table", {})), text("Could not book."))
    settings = AgentSettings(
        completion_url=upstreams.completion_url,
        mcp_client_url=upstreams.gateway_url,
        mcp_service_secret=SecretStr(GATEWAY_SECRET),
        catalog_cache_seconds=0,
        database_url="",
    )
    async with serve_app(create_app(settings)) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        events = await streamed_run(http, "/api/v1/agent/run", _body("Book a table."), seconds=TAKEOVER_SECONDS)

    assert "callId" not in gateway.call_requests[0]
    assert [answer.action for _, answer in gateway.answers] == ["decline"]
    assert events_of(events, "input_required") == []
    [result] = events_of(events, "tool_result")
    assert result["content"] == "book_table: decline"
    assert events[-1][0] == "done", events


async def test_cancelling_a_run_that_waits_for_an_answer_cancels_its_question_at_the_gateway_too(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    upstreams.llm.push(tool_calls(("call_book", "book_table", {})))
    async with _replica(upstreams, f"sqlite:///{tmp_path}/runs.db", tmp_path, "a", _callers()) as a:
        run_id, asked = await _ask(a)
        a.http.headers.update(as_caller(ACME_KEY))
        cancelled = await a.http.post(f"/api/v1/agent/runs/{run_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        run = await wait_for_run(a.http, run_id, ended, within=TAKEOVER_SECONDS)

    assert run["status"] == "cancelled"
    assert [question["status"] for question in run["inputs"]] == ["cancelled"]
    # The call waiting at the gateway ends now, not when the gateway's own limit passes.
    assert [(known, answer.action) for known, answer in upstreams.gateway.answers] == [(asked["inputId"], "cancel")]


async def test_an_answer_the_gateway_did_not_take_is_sent_again_when_the_question_still_waits(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    upstreams.llm.push(tool_calls(("call_book", "book_table", {})), text("Booked."))
    upstreams.gateway.unavailable_answers = 1
    async with _replica(upstreams, f"sqlite:///{tmp_path}/runs.db", tmp_path, "a", _callers()) as a:
        run_id, asked = await _ask(a)
        a.http.headers.update(as_caller(ACME_KEY))
        answer = {"inputs": [{"inputId": asked["inputId"], "action": "accept", "content": {"partySize": 3}}]}
        assert (await a.http.post(f"/api/v1/agent/runs/{run_id}/inputs", json=answer)).status_code == 200
        run = await wait_for_run(a.http, run_id, ended, within=TAKEOVER_SECONDS)

    assert run["status"] == "completed", run
    results = [m["content"] for m in run["messages"] if m["role"] == "tool"]
    assert results == ['book_table: accept {"partySize": 3, "room": "garden"}']
    assert len(upstreams.gateway.answers) == 1
