"""Stored runs through the real services: read back, re-attached, cancelled, continued as conversations.

agent-service stores in SQLite and in PostgreSQL (each test runs on both); the tools are the echo MCP server's
over streamable HTTP behind a real mcp-client-service; only the LLM is scripted (OpenAI's wire format).
The ``gate`` tool holds a call open until the test opens it: a run stays in its tool loop exactly as long as
a test needs, without sleeping.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from agent_service.store import NewRun, RunStore
from suite_common.sse_parser import EventStreamParser
from suite_common.wire import Message
from support import fake_openai
from support.databases import fresh_postgres_database
from support.stacks import AgentStack, running_stack, status_in, wait_for_run

pytestmark = pytest.mark.anyio

Event = tuple[int, str, dict[str, Any]]


@dataclass
class Stack(AgentStack):
    database_url: str


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
async def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    with ExitStack() as databases:
        if request.param == "sqlite":
            database_url = f"sqlite:///{tmp_path_factory.mktemp('runs')}/runs.db"
        else:  # the module's own: an agent-service takes over the runs it finds, other tests' included
            database_url = databases.enter_context(fresh_postgres_database())
        async with running_stack(database_url=database_url, lease_seconds=1.5) as stack:
            yield Stack(**vars(stack), database_url=database_url)


def _run(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}], "tools": ["echo", "gate"], **extra}


class EventReader:
    """A streamed answer's events, read in parts without closing the stream in between."""

    def __init__(self, response: httpx.Response) -> None:
        self.chunks = response.aiter_bytes()
        self.parser = EventStreamParser()
        self.ready: list[Event] = []

    async def read(self, *, until: str | None = None) -> list[Event]:
        """Events up to the first of type ``until`` (to the stream's end without one)."""
        events: list[Event] = []
        while True:
            while self.ready:
                event = self.ready.pop(0)
                events.append(event)
                if until is not None and event[1] == until:
                    return events
            chunk = await anext(self.chunks, None)
            if chunk is None:
                return events
            for parsed in self.parser.feed(chunk):
                self.ready.append((int(parsed.id or 0), parsed.event or "message", json.loads(parsed.data)))


async def _events(response: httpx.Response, *, until: str | None = None) -> list[Event]:
    """The events of a streamed answer, to its end or to the first event of type ``until`` (the stream then closes:
    a client leaving)."""
    return await EventReader(response).read(until=until)


async def _gate_started(stack: Stack, tag: str) -> None:
    reply = await stack.gateway.http.post(
        "/mcp/v1/tools/call-tool", json={"name": "await_hold", "arguments": {"tag": tag, "event": "started"}}
    )
    assert reply.status_code == 200, reply.text


async def _open_gate(stack: Stack, tag: str) -> None:
    reply = await stack.gateway.http.post(
        "/mcp/v1/tools/call-tool", json={"name": "open_gate", "arguments": {"tag": tag}}
    )
    assert reply.status_code == 200, reply.text


async def test_a_finished_run_reads_back_with_its_messages_usage_and_every_event(stack: Stack) -> None:
    stack.llm.push(
        fake_openai.tool_calls(("call_1", "echo", {"text": "hello"})),
        fake_openai.text("It said hello."),
    )
    answer = await stack.http.post("/api/v1/agent/run", json=_run("echo hello"))
    assert answer.status_code == 200, answer.text
    run_id = answer.json()["runId"]
    assert answer.headers["x-agent-run-id"] == run_id

    run = (await stack.http.get(f"/api/v1/agent/runs/{run_id}")).json()
    assert run["status"] == "completed"
    assert run["finishReason"] == "stop"
    assert run["iterations"] == 2
    assert run["usage"] == answer.json()["usage"]
    assert [m["role"] for m in run["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert run["messages"][1]["toolCalls"][0]["id"] == "call_1"
    assert run["messages"][2] == {"role": "tool", "toolCallId": "call_1", "content": "hello"}
    assert run["messages"][3]["content"] == "It said hello."
    assert run["messages"][1:] == answer.json()["messages"]

    async with stack.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events") as response:
        assert response.status_code == 200
        events = await _events(response)
    assert [kind for _, kind, _ in events] == ["run_started", "tool_call", "tool_result", "done"]
    assert [seq for seq, _, _ in events] == [1, 2, 3, 4]
    assert events[-1][2]["finishReason"] == "stop"

    async with stack.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events", headers={"Last-Event-ID": "2"}) as later:
        assert [seq for seq, _, _ in await _events(later)] == [3, 4]
    async with stack.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events", params={"after": "3"}) as last:
        assert [kind for _, kind, _ in await _events(last)] == ["done"]


async def test_a_client_that_lost_its_stream_re_attaches_and_gets_every_later_event_once_in_order(stack: Stack) -> None:
    stack.llm.push(
        fake_openai.tool_calls(("call_gate", "gate", {"tag": "reattach"})),
        fake_openai.text("The gate opened."),
    )
    body = _run("wait at the gate", stream=True, onDisconnect="continue")
    async with stack.http.stream("POST", "/api/v1/agent/run", json=body) as response:
        assert response.status_code == 200
        seen = await _events(response, until="tool_call")  # then the connection drops
    run_id = seen[0][2]["runId"]
    await _gate_started(stack, "reattach")
    assert (await stack.http.get(f"/api/v1/agent/runs/{run_id}")).json()["status"] == "tool_loop"

    async with stack.http.stream(
        "GET", f"/api/v1/agent/runs/{run_id}/events", headers={"Last-Event-ID": str(seen[-1][0])}
    ) as again:
        assert again.status_code == 200
        async with anyio.create_task_group() as tg:
            tg.start_soon(_open_gate, stack, "reattach")
            with anyio.fail_after(20):
                rest = await _events(again)
    everything = seen + rest
    assert [seq for seq, _, _ in everything] == list(range(1, len(everything) + 1))
    assert [kind for _, kind, _ in everything if kind != "text"] == ["run_started", "tool_call", "tool_result", "done"]
    assert "".join(data["delta"] for _, kind, data in everything if kind == "text") == "The gate opened."
    assert rest[0][2]["content"] == "reattach passed"
    run = (await stack.http.get(f"/api/v1/agent/runs/{run_id}")).json()
    assert run["status"] == "completed"
    assert run["messages"][-1]["content"] == "The gate opened."


async def test_a_detached_run_goes_on_after_its_client_leaves(stack: Stack) -> None:
    stack.llm.push(fake_openai.tool_calls(("call_gate", "gate", {"tag": "detached"})), fake_openai.text("Done."))
    body = _run("wait", stream=True, onDisconnect="continue")
    async with stack.http.stream("POST", "/api/v1/agent/run", json=body) as response:
        run_id = (await _events(response, until="run_started"))[0][2]["runId"]
    await _gate_started(stack, "detached")
    await _open_gate(stack, "detached")
    run = await wait_for_run(stack.http, run_id, status_in("completed", "failed", "cancelled"))
    assert run["status"] == "completed"
    assert run["messages"][-1]["content"] == "Done."


async def test_a_run_whose_client_leaves_is_cancelled_and_stored_so(stack: Stack) -> None:
    stack.llm.push(fake_openai.tool_calls(("call_gate", "gate", {"tag": "left"})))
    async with stack.http.stream("POST", "/api/v1/agent/run", json=_run("wait", stream=True)) as response:
        run_id = (await _events(response, until="tool_call"))[0][2]["runId"]
    run = await wait_for_run(stack.http, run_id, status_in("cancelled", "completed", "failed"))
    assert run["status"] == "cancelled"
    assert run["finishReason"] == "cancelled"
    # Every tool call has its result, so the conversation can go on.
    assert run["messages"][-1]["role"] == "tool"
    assert run["messages"][-1]["isError"] is True


async def test_cancel_stops_a_run_in_its_tool_loop_and_its_stream_ends_with_done_cancelled(stack: Stack) -> None:
    stack.llm.push(fake_openai.tool_calls(("call_gate", "gate", {"tag": "cancel"})))
    async with stack.http.stream("POST", "/api/v1/agent/run", json=_run("wait", stream=True)) as response:
        reader = EventReader(response)
        seen = await reader.read(until="tool_call")
        run_id = seen[0][2]["runId"]
        await _gate_started(stack, "cancel")
        cancelled = await stack.http.post(f"/api/v1/agent/runs/{run_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        with anyio.fail_after(20):
            rest = await reader.read()
    assert rest[-1][1] == "done"
    assert rest[-1][2]["finishReason"] == "cancelled"
    run = await wait_for_run(stack.http, run_id, status_in("cancelled"))
    assert run["cancelRequested"] is True
    assert run["messages"][-1]["content"] == "The run was cancelled before this tool call finished."
    async with stack.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events") as replay:
        assert [kind for _, kind, _ in await _events(replay)] == ["run_started", "tool_call", "done"]


async def test_a_conversation_continues_with_its_earlier_runs_messages_first(stack: Stack) -> None:
    stack.llm.push(fake_openai.text("Hello Ada."), fake_openai.text("Your name is Ada."))
    first = await stack.http.post("/api/v1/agent/run", json=_run("My name is Ada.", conversationId="conv-ada"))
    second = await stack.http.post("/api/v1/agent/run", json=_run("What is my name?", conversationId="conv-ada"))
    assert first.status_code == second.status_code == 200, second.text
    sent = stack.llm.requests[-1]["messages"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "My name is Ada."),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
    ]
    conversation = (await stack.http.get("/api/v1/agent/conversations/conv-ada")).json()
    assert [m["content"] for m in conversation["messages"]] == [
        "My name is Ada.",
        "Hello Ada.",
        "What is my name?",
        "Your name is Ada.",
    ]
    assert [run["runId"] for run in conversation["runs"]] == [first.json()["runId"], second.json()["runId"]]
    assert all(run["conversationId"] == "conv-ada" for run in conversation["runs"])


async def test_a_conversation_takes_one_run_at_a_time(stack: Stack) -> None:
    stack.llm.push(fake_openai.tool_calls(("call_gate", "gate", {"tag": "busy"})), fake_openai.text("Done."))
    body = _run("wait", stream=True, conversationId="conv-busy")
    async with stack.http.stream("POST", "/api/v1/agent/run", json=body) as response:
        reader = EventReader(response)
        await reader.read(until="tool_call")
        await _gate_started(stack, "busy")
        refused = await stack.http.post("/api/v1/agent/run", json=_run("me too", conversationId="conv-busy"))
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "conversation_busy"
        await _open_gate(stack, "busy")
        assert (await reader.read())[-1][1] == "done"


@pytest.mark.parametrize(
    ("path", "headers", "status", "code"),
    [
        ("/api/v1/agent/runs/run_nope", {}, 404, "run_not_found"),
        ("/api/v1/agent/runs/run_nope/events", {}, 404, "run_not_found"),
        ("/api/v1/agent/conversations/nope", {}, 404, "conversation_not_found"),
        ("/api/v1/agent/runs/run_nope/events?after=-1", {}, 400, "invalid_request"),
        ("/api/v1/agent/runs/run_nope/events", {"Last-Event-ID": "abc"}, 400, "invalid_request"),
    ],
)
async def test_reading_what_is_not_stored_is_a_clear_4xx(
    stack: Stack, path: str, headers: dict[str, str], status: int, code: str
) -> None:
    response = await stack.http.get(path, headers=headers)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


@pytest.mark.parametrize("last_event_id", ["99999999999999999999999", "2147483648", "1_000", "+5"])
async def test_a_last_event_id_no_run_can_have_is_a_400_and_no_store_error(stack: Stack, last_event_id: str) -> None:
    # Past the store's 32-bit event numbers, PostgreSQL refused the query: the stream was cut and an ERROR said
    # "the run store is unavailable", so anyone with a key could set off the store-down alert.
    stack.llm.push(fake_openai.text("Hello."))
    answer = await stack.http.post("/api/v1/agent/run", json=_run("hello"))
    assert answer.status_code == 200, answer.text
    events = f"/api/v1/agent/runs/{answer.json()['runId']}/events"
    with capture_logs() as logs:
        refused = await stack.http.get(events, headers={"Last-Event-ID": last_event_id})
        by_query = await stack.http.get(events, params={"after": last_event_id})
    for response in (refused, by_query):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert "from 0 to 2147483647" in error["message"]
    assert [line for line in logs if line["log_level"] in ("error", "critical")] == []

    async with stack.http.stream("GET", events, headers={"Last-Event-ID": "2147483647"}) as after_the_last:
        assert after_the_last.status_code == 200
        with anyio.fail_after(10):
            assert await _events(after_the_last) == []


async def test_a_conversation_id_that_is_not_an_id_is_refused(stack: Stack) -> None:
    response = await stack.http.post("/api/v1/agent/run", json=_run("hi", conversationId="no spaces allowed"))
    assert response.status_code == 400


async def test_a_run_left_behind_that_cannot_be_resumed_is_failed_once_and_says_so(stack: Stack) -> None:
    """A run another version left (its plan unreadable to this one) is failed, not retried forever; the keeper
    goes on taking over other runs."""
    store = await RunStore.open(stack.database_url)
    try:
        run = NewRun(
            run_id=f"run_{uuid.uuid4().hex}",
            model="gpt-4o",
            plan={"tools": ["not a tool description"]},
            input_messages=[Message(role="user", content="hi")],
        )
        await store.create_run(run, owner="a-replica-long-gone", lease_seconds=0.001)
    finally:
        await store.aclose()
    failed = await wait_for_run(stack.http, run.run_id, status_in("failed"))
    assert failed["error"]["code"] == "not_resumable"
    stack.llm.push(fake_openai.text("Still taking runs."))
    answer = await stack.http.post("/api/v1/agent/run", json=_run("hello"))
    assert answer.json()["message"]["content"] == "Still taking runs."
