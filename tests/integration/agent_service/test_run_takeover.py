"""Crashes, for real: agent-service processes get SIGKILL in the middle of a tool call, and their runs go on.

agent-service runs as real processes (``python -m agent_service``) with a one-second lease; everything else runs in
the test's process and so outlives the kill: the scripted LLM behind an in-test completion-service, and the ledger
MCP server (an idempotent ``set_status``, a non-idempotent ``send_payment``, each call held at a gate the test
opens) behind an in-test mcp-client-service. After a kill, a restarted process on the same SQLite file, or the
other replica on the same PostgreSQL database, takes the run over once its lease has expired and resumes it from
its last stored step: the idempotent calls left without a result are made again, the others are answered with
``UNKNOWN_OUTCOME`` for the model to decide.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import asyncpg
import httpx
import pytest

from agent_service.core.run import UNKNOWN_OUTCOME
from suite_common.sse_parser import EventStreamParser
from support import stacks
from support.fake_openai import text, text_then_hang, tool_calls
from support.ledger_mcp_server import Ledger
from support.processes import agent_env, spawned
from support.servers import free_port
from support.stacks import running_upstreams, wait_for_run

pytestmark = pytest.mark.anyio

Event = tuple[int, str, dict[str, Any]]

_log = logging.getLogger(__name__)
"""How long takeovers took, for a reader of the test log (``-o log_cli=true``)."""

LEASE_SECONDS = 1.0
"""The shortest lease there is: a run is taken over about a second after its replica died."""
TAKEOVER_SECONDS = 15.0
"""Bound of the wait for a run to be taken over and to end (a restart imports the service first)."""

PACKED_1 = {"key": "order-1", "value": "packed"}
PACKED_2 = {"key": "order-2", "value": "packed"}
PAYMENT = {"amount": 42}


@dataclass
class Upstreams(stacks.Upstreams):
    """What the agent-service processes use, all in the test's process: it survives their kills."""

    ledger: Ledger


@dataclass
class Replica:
    process: anyio.abc.Process
    http: httpx.AsyncClient

    async def kill(self) -> float:
        """SIGKILL: no shutdown, no lease released, connections cut by the kernel; returns when it happened."""
        self.process.kill()
        killed_at = time.monotonic()
        with anyio.fail_after(10):
            await self.process.wait()
        return killed_at


@pytest.fixture
async def upstreams() -> AsyncIterator[Upstreams]:
    ledger = Ledger()
    async with (
        ledger.serving() as ledger_url,
        running_upstreams(echo={}, servers={"ledger": {"url": ledger_url}}) as running,
    ):
        yield Upstreams(**vars(running), ledger=ledger)


@asynccontextmanager
async def replica(upstreams: Upstreams, database_url: str, log: Path, **settings: object) -> AsyncIterator[Replica]:
    """An agent-service process on ``database_url``, with a one-second lease (unless ``settings`` say otherwise);
    killed and reaped at the end."""
    port = free_port()
    env = agent_env(
        port,
        upstreams.completion_url,
        upstreams.gateway,
        database_url=database_url,
        **{"lease_seconds": LEASE_SECONDS, **settings},
    )
    async with (
        spawned("agent_service", env, port, log) as process,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
    ):
        yield Replica(process, http)


def run_body(content: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": content}],
        "tools": ["set_status", "send_payment"],
        "stream": True,
        **fields,
    }


class EventStream:
    """The events of a streamed answer, read in as many parts as a test needs."""

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.aiter_bytes()
        self._parser = EventStreamParser()
        self._parsed: list[Event] = []

    async def read(self, *, until: Callable[[list[Event]], bool] | None = None) -> list[Event]:
        """The next events, to the stream's end or until ``until(events read by this call)`` holds."""
        events: list[Event] = []
        while True:
            while self._parsed:
                events.append(self._parsed.pop(0))
                if until is not None and until(events):
                    return events
            chunk = await anext(self._chunks, None)
            if chunk is None:
                return events
            for event in self._parser.feed(chunk):
                self._parsed.append((int(event.id or 0), event.event or "message", json.loads(event.data)))


def tool_calls_seen(count: int) -> Callable[[list[Event]], bool]:
    return lambda events: sum(kind == "tool_call" for _, kind, _ in events) >= count


async def start_detached(http: httpx.AsyncClient, content: str, **fields: Any) -> str:
    """Starts a run that goes on without its client (``onDisconnect: continue``); returns its id."""
    async with http.stream("POST", "/api/v1/agent/run", json=run_body(content, onDisconnect="continue", **fields)) as r:
        assert r.status_code == 200
        [(_, kind, started)] = await EventStream(r).read(until=lambda events: True)
    assert kind == "run_started"
    run_id: str = started["runId"]
    return run_id


def kinds(events: list[Event]) -> list[str]:
    return [kind for _, kind, _ in events]


def answer_text(events: list[Event]) -> str:
    return "".join(data["delta"] for _, kind, data in events if kind == "text")


def ended(run: dict[str, Any]) -> bool:
    return run["status"] in ("completed", "failed", "cancelled")


def result_stored(call_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda run: any(message.get("toolCallId") == call_id for message in run["messages"])


def tool_messages(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The tool results of an OpenAI request's messages, by tool call id."""
    return {message["tool_call_id"]: message["content"] for message in messages if message["role"] == "tool"}


async def test_a_run_killed_mid_tool_call_resumes_on_restart_redoing_only_its_idempotent_calls(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(
        tool_calls(
            ("call_packed_1", "set_status", PACKED_1),
            ("call_packed_2", "set_status", PACKED_2),
            ("call_pay", "send_payment", PAYMENT),
        ),
        text("Both orders are packed; the payment needs checking."),
    )
    ledger.open("set_status", PACKED_1)  # finishes before the crash; the other two are in flight when it comes
    ledger.open("send_payment", PAYMENT, attempt=2)  # were it made again, it would pay twice (and the test says so)
    database_url = f"sqlite:///{tmp_path}/runs.db"
    log = tmp_path / "agent.log"

    async with replica(upstreams, database_url, log) as first:
        run_id = await start_detached(first.http, "Pack both orders and pay.")
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("set_status", PACKED_2, 1, "started")
            await ledger.wait_for_state("send_payment", PAYMENT, 1, "started")
        await wait_for_run(first.http, run_id, result_stored("call_packed_1"), within=TAKEOVER_SECONDS)
        killed_at = await first.kill()

    # The gateway abandons the calls of a caller whose connection is gone: neither completes behind the run's back.
    with anyio.fail_after(10):
        await ledger.wait_for_state("set_status", PACKED_2, 1, "cancelled")
        await ledger.wait_for_state("send_payment", PAYMENT, 1, "cancelled")

    async with replica(upstreams, database_url, log) as restarted:
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("set_status", PACKED_2, 2, "started")
        _log.info("killed_to_call_made_again_seconds: %.2f", time.monotonic() - killed_at)
        ledger.open("set_status", PACKED_2, attempt=2)
        run = await wait_for_run(restarted.http, run_id, ended, within=TAKEOVER_SECONDS)

    assert run["status"] == "completed", run
    assert run["resumes"] == 1
    assert run["messages"][-1]["content"] == "Both orders are packed; the payment needs checking."
    # Each idempotent call completed exactly once: the stored one was not made again, the lost one was.
    assert ledger.completed("set_status") == [PACKED_1, PACKED_2]
    assert [call.attempt for call in ledger.of("set_status")] == [1, 1, 2]
    # The payment started once and never again; the model was told its outcome is unknown.
    assert ledger.started("send_payment") == 1
    assert ledger.completed("send_payment") == []
    assert len(llm.requests) == 2
    results = tool_messages(llm.requests[1]["messages"])
    assert results["call_packed_1"] == "order-1 is packed"
    assert results["call_packed_2"] == "order-2 is packed"
    assert UNKNOWN_OUTCOME in results["call_pay"]
    stored = {message["toolCallId"]: message for message in run["messages"] if message["role"] == "tool"}
    assert stored["call_pay"]["content"] == UNKNOWN_OUTCOME
    assert stored["call_pay"]["isError"] is True


async def test_the_surviving_replica_takes_a_killed_replicas_run_over_and_a_re_attached_client_gets_the_rest_once(
    upstreams: Upstreams, tmp_path: Path, own_postgres_url: str
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(tool_calls(("call_packed", "set_status", PACKED_1)), text("The order is packed."))

    async with (
        replica(upstreams, own_postgres_url, tmp_path / "a.log") as a,
        replica(upstreams, own_postgres_url, tmp_path / "b.log") as b,
    ):
        body = run_body("Pack the order.", onDisconnect="continue")
        async with a.http.stream("POST", "/api/v1/agent/run", json=body) as response:
            assert response.status_code == 200
            stream = EventStream(response)
            seen = await stream.read(until=tool_calls_seen(1))
            with anyio.fail_after(TAKEOVER_SECONDS):
                await ledger.wait_for_state("set_status", PACKED_1, 1, "started")
            killed_at = await a.kill()
            with pytest.raises(httpx.TransportError):  # the stream is cut, not ended
                seen += await stream.read()
        run_id = seen[0][2]["runId"]
        assert "done" not in [kind for _, kind, _ in seen]
        last_seen = seen[-1][0]

        rest: list[Event] = []
        resumed_after: list[float] = []

        def resumed(events: list[Event]) -> bool:
            if events[-1][1] == "run_resumed" and not resumed_after:
                resumed_after.append(time.monotonic() - killed_at)
            return False

        async def open_the_call_made_again() -> None:
            await ledger.wait_for_state("set_status", PACKED_1, 2, "started")
            ledger.open("set_status", PACKED_1, attempt=2)

        headers = {"Last-Event-ID": str(last_seen)}
        with anyio.fail_after(TAKEOVER_SECONDS):
            async with (
                b.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events", headers=headers) as again,
                anyio.create_task_group() as tg,
            ):
                assert again.status_code == 200
                tg.start_soon(open_the_call_made_again)
                rest = await EventStream(again).read(until=resumed)
        run = (await b.http.get(f"/api/v1/agent/runs/{run_id}")).json()
        async with b.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events", headers=headers) as replay:
            stored = await EventStream(replay).read()

    _log.info("killed_to_run_resumed_seconds: %.2f", resumed_after[0])
    kinds = [kind for _, kind, _ in rest]
    assert kinds[0] == "run_resumed"
    assert kinds[-1] == "done"
    assert kinds.count("run_resumed") == kinds.count("done") == 1
    assert "tool_result" in kinds
    seqs = [seq for seq, _, _ in rest]
    assert seqs == sorted(set(seqs))  # in order, each once
    assert seqs[0] > last_seen
    assert rest[-1][2]["finishReason"] == "stop"
    assert rest == stored  # what the re-attached client got live is what was stored, no more, no less
    assert "".join(data["delta"] for _, kind, data in rest if kind == "text") == "The order is packed."
    assert run["status"] == "completed"
    assert run["resumes"] == 1
    assert ledger.completed("set_status") == [PACKED_1]
    with anyio.fail_after(10):
        await ledger.wait_for_state("set_status", PACKED_1, 1, "cancelled")
    assert len(llm.requests) == 2


async def test_a_client_that_saw_text_never_stored_still_gets_every_event_of_the_run_taken_over(
    upstreams: Upstreams, tmp_path: Path, own_postgres_url: str
) -> None:
    """Text is stored with the step that ends the answer: A streamed events it never stored, and B's events must still
    come after them (B numbers on past a gap), or a client re-attaching with the last id it saw would miss them."""
    llm = upstreams.llm
    llm.push(text_then_hang("Let me think"), text("The answer is 42."))

    async with (
        replica(upstreams, own_postgres_url, tmp_path / "a.log") as a,
        replica(upstreams, own_postgres_url, tmp_path / "b.log") as b,
    ):
        body = run_body("Think.", onDisconnect="continue")
        async with a.http.stream("POST", "/api/v1/agent/run", json=body) as response:
            stream = EventStream(response)
            seen = await stream.read(
                until=lambda events: "".join(d.get("delta", "") for _, _, d in events) == "Let me think"
            )
            await a.kill()
            with pytest.raises(httpx.TransportError):
                seen += await stream.read()
        run_id = seen[0][2]["runId"]
        headers = {"Last-Event-ID": str(seen[-1][0])}
        with anyio.fail_after(TAKEOVER_SECONDS):
            async with b.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events", headers=headers) as again:
                rest = await EventStream(again).read()
        run = (await b.http.get(f"/api/v1/agent/runs/{run_id}")).json()

    assert (rest[0][1], rest[-1][1]) == ("run_resumed", "done")
    assert [seq for seq, _, _ in rest] == sorted({seq for seq, _, _ in rest})
    assert rest[0][0] > seen[-1][0]
    # The unfinished answer is not part of the run: the resumed run asked the model again and kept its answer only.
    assert "".join(data["delta"] for _, kind, data in rest if kind == "text") == "The answer is 42."
    assert run["status"] == "completed"
    assert [message["content"] for message in run["messages"]] == ["Think.", "The answer is 42."]
    assert len(llm.requests) == 2


async def test_a_run_killed_again_after_its_takeover_is_taken_over_again_and_counts_its_resumes(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(tool_calls(("call_packed", "set_status", PACKED_1)), text("The order is packed."))
    database_url = f"sqlite:///{tmp_path}/runs.db"
    log = tmp_path / "agent.log"

    async with replica(upstreams, database_url, log) as first:
        run_id = await start_detached(first.http, "Pack the order.")
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("set_status", PACKED_1, 1, "started")
        await first.kill()
    async with replica(upstreams, database_url, log) as second:
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("set_status", PACKED_1, 2, "started")
        await second.kill()
    async with replica(upstreams, database_url, log) as third:
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("set_status", PACKED_1, 3, "started")
        ledger.open("set_status", PACKED_1, attempt=3)
        run = await wait_for_run(third.http, run_id, ended, within=TAKEOVER_SECONDS)
        async with third.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events") as replay:
            events = await EventStream(replay).read()

    assert run["status"] == "completed"
    assert run["resumes"] == 2
    assert ledger.completed("set_status") == [PACKED_1]
    resumed = [data for _, kind, data in events if kind == "run_resumed"]
    assert [data["resumes"] for data in resumed] == [1, 2]
    seqs = [seq for seq, _, _ in events]
    assert seqs == sorted(set(seqs))
    assert events[-1][1] == "done"
    assert len(llm.requests) == 2
    # Each LLM call logged once, with the attempt (the run's resumes) it was made on: round 1 by the first replica,
    # round 2 by the third.
    with closing(sqlite3.connect(tmp_path / "runs.db")) as database:
        query = "SELECT iteration, attempt FROM usage_log WHERE run_id = ? ORDER BY id"
        assert database.execute(query, (run_id,)).fetchall() == [(1, 0), (2, 2)]


async def test_a_run_taken_over_more_often_than_max_resumes_is_failed_and_not_run_again(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(tool_calls(("call_packed", "set_status", PACKED_1)), text("What next?"))
    database_url = f"sqlite:///{tmp_path}/runs.db"
    log = tmp_path / "agent.log"

    async with replica(upstreams, database_url, log, max_resumes=0) as first:
        run_id = await start_detached(first.http, "Pack the order.", conversationId="conv-failed")
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("set_status", PACKED_1, 1, "started")
        await first.kill()

    async with replica(upstreams, database_url, log, max_resumes=0) as restarted:
        run = await wait_for_run(restarted.http, run_id, ended, within=TAKEOVER_SECONDS)
        async with restarted.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events") as replay:
            events = await EventStream(replay).read()
        following = await restarted.http.post(
            "/api/v1/agent/run", json=run_body("Is it packed?", conversationId="conv-failed", stream=False)
        )

    assert run["status"] == "failed"
    assert run["error"]["code"] == "resumed_too_often"
    assert events[-1][1] == "error"
    assert events[-1][2]["code"] == "resumed_too_often"
    assert "run_resumed" not in [kind for _, kind, _ in events]
    assert ledger.started("set_status") == 1  # not made again
    # Its open call was answered, so the conversation goes on.
    assert run["messages"][-1]["toolCallId"] == "call_packed"
    assert following.status_code == 200, following.text
    assert len(llm.requests) == 2
    assert "The run failed before this tool call finished" in tool_messages(llm.requests[1]["messages"])["call_packed"]


async def test_cancel_through_one_replica_stops_a_run_executing_on_another(
    upstreams: Upstreams, tmp_path: Path, own_postgres_url: str
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(tool_calls(("call_pay", "send_payment", PAYMENT)), text("Never asked for."))

    async with (
        replica(upstreams, own_postgres_url, tmp_path / "a.log") as a,
        replica(upstreams, own_postgres_url, tmp_path / "b.log") as b,
    ):
        async with a.http.stream("POST", "/api/v1/agent/run", json=run_body("Pay.")) as response:
            assert response.status_code == 200
            stream = EventStream(response)
            seen = await stream.read(until=tool_calls_seen(1))
            run_id = seen[0][2]["runId"]
            with anyio.fail_after(TAKEOVER_SECONDS):
                await ledger.wait_for_state("send_payment", PAYMENT, 1, "started")
            cancelled = await b.http.post(f"/api/v1/agent/runs/{run_id}/cancel")
            assert cancelled.status_code in (200, 202), cancelled.text
            with anyio.fail_after(TAKEOVER_SECONDS):
                rest = await stream.read()
        run = await wait_for_run(b.http, run_id, ended, within=TAKEOVER_SECONDS)

    assert rest[-1][1] == "done"
    assert rest[-1][2]["finishReason"] == "cancelled"
    assert run["status"] == "cancelled"
    assert run["cancelRequested"] is True
    assert run["resumes"] == 0
    with anyio.fail_after(10):  # the call was abandoned, not left to complete
        await ledger.wait_for_state("send_payment", PAYMENT, 1, "cancelled")
    assert ledger.completed("send_payment") == []
    assert len(llm.requests) == 1


async def test_a_run_cancelled_while_no_replica_holds_it_answers_its_open_tool_calls_and_its_conversation_goes_on(
    upstreams: Upstreams, tmp_path: Path, own_postgres_url: str
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(tool_calls(("call_pay", "send_payment", PAYMENT)), text("What next?"))

    async with (
        replica(upstreams, own_postgres_url, tmp_path / "a.log") as a,
        replica(upstreams, own_postgres_url, tmp_path / "b.log") as b,
    ):
        run_id = await start_detached(a.http, "Pay.", conversationId="conv-orphan")
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("send_payment", PAYMENT, 1, "started")
        await a.kill()
        # Before the lease expires: the run is A's still, and nobody executes it.
        cancelled = await b.http.post(f"/api/v1/agent/runs/{run_id}/cancel")
        assert cancelled.status_code in (200, 202), cancelled.text
        run = await wait_for_run(b.http, run_id, ended, within=TAKEOVER_SECONDS)
        following = await b.http.post(
            "/api/v1/agent/run", json=run_body("Did it go through?", conversationId="conv-orphan", stream=False)
        )

    assert run["status"] == "cancelled"
    assert run["resumes"] == 1
    # Every tool call has its result, so the conversation can go on.
    assert run["messages"][-1]["toolCallId"] == "call_pay"
    assert run["messages"][-1]["isError"] is True
    assert following.status_code == 200, following.text
    assert tool_messages(llm.requests[-1]["messages"]).keys() == {"call_pay"}
    assert ledger.started("send_payment") == 1


async def test_a_run_cancelled_during_a_call_made_again_after_its_takeover_answers_that_call(
    upstreams: Upstreams, tmp_path: Path, own_postgres_url: str
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(tool_calls(("call_packed", "set_status", PACKED_1)), text("What next?"))

    async with (
        replica(upstreams, own_postgres_url, tmp_path / "a.log") as a,
        replica(upstreams, own_postgres_url, tmp_path / "b.log") as b,
    ):
        run_id = await start_detached(a.http, "Pack the order.", conversationId="conv-again")
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("set_status", PACKED_1, 1, "started")
        await a.kill()
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("set_status", PACKED_1, 2, "started")
        cancelled = await b.http.post(f"/api/v1/agent/runs/{run_id}/cancel")
        assert cancelled.status_code in (200, 202), cancelled.text
        run = await wait_for_run(b.http, run_id, ended, within=TAKEOVER_SECONDS)
        following = await b.http.post(
            "/api/v1/agent/run", json=run_body("Is it packed?", conversationId="conv-again", stream=False)
        )

    assert run["status"] == "cancelled"
    assert run["messages"][-1]["toolCallId"] == "call_packed"
    assert run["messages"][-1]["isError"] is True
    assert following.status_code == 200, following.text
    assert tool_messages(llm.requests[-1]["messages"]).keys() == {"call_packed"}
    with anyio.fail_after(10):
        await ledger.wait_for_state("set_status", PACKED_1, 2, "cancelled")
    assert ledger.completed("set_status") == []


# --- what a client is told is stored already -------------------------------------------------------------------

QUIET_SECONDS = 0.3
"""How long a test watches a stream for an event that must not come yet. An absence is only seen over a window; this
one starts once the replica has done everything before the event (the text before ``done``, the tool call before its
``tool_result``), so that an event sent too early (within a millisecond) falls well inside it."""


@dataclass
class Store:
    """The database the replicas share, and a way for the test to hold its write lock."""

    url: str
    sqlite_file: Path | None = None

    @asynccontextmanager
    async def writes_held(self) -> AsyncIterator[None]:
        """No run step can be written meanwhile (the replicas' writes wait for the lock, within their timeouts)."""
        if self.sqlite_file is not None:
            with closing(sqlite3.connect(self.sqlite_file, isolation_level=None)) as database:
                database.execute("BEGIN IMMEDIATE")  # SQLite's one write lock
                try:
                    yield
                finally:
                    database.execute("ROLLBACK")
            return
        connection = await asyncpg.connect(self.url)
        try:
            async with connection.transaction():
                await connection.execute("LOCK TABLE run_events IN SHARE MODE")  # every step inserts its events
                yield
        finally:
            await connection.close()

    async def execute(self, statement: str) -> None:
        if self.sqlite_file is not None:
            with closing(sqlite3.connect(self.sqlite_file, isolation_level=None)) as database:
                database.execute(statement)
            return
        connection = await asyncpg.connect(self.url)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return Store(f"sqlite:///{tmp_path}/runs.db", tmp_path / "runs.db")
    url: str = request.getfixturevalue("own_postgres_url")
    return Store(url)


class Following:
    """A streamed answer read in the background as it comes, so that a test can also check what has not come."""

    def __init__(self, response: httpx.Response) -> None:
        self._stream = EventStream(response)
        self.events: list[Event] = []
        self.cut = False
        """The stream was cut (its replica was killed), not ended."""
        self._changed = anyio.Event()

    async def run(self) -> None:
        try:
            await self._stream.read(until=self._seen)
        except httpx.TransportError:
            self.cut = True
        self._changed.set()

    def _seen(self, events: list[Event]) -> bool:
        self.events.append(events[-1])
        self._changed.set()
        self._changed = anyio.Event()
        return False

    async def wait_for(self, condition: Callable[[list[Event]], bool]) -> None:
        with anyio.fail_after(TAKEOVER_SECONDS):
            while not condition(self.events):
                await self._changed.wait()

    async def wait_for_event(self, kind: str) -> dict[str, Any]:
        await self.wait_for(lambda events: kind in kinds(events))
        return next(data for _, seen, data in self.events if seen == kind)


# "continue": the request follows the run it started (as a re-attached client would), "cancel": it is attached to it.
@pytest.mark.parametrize("on_disconnect", ["cancel", "continue"])
async def test_a_client_told_done_finds_the_run_stored_finished_with_that_answer_though_its_replica_died_at_once(
    upstreams: Upstreams, store: Store, tmp_path: Path, on_disconnect: str
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    answer = "The order is packed."
    answering = anyio.Event()
    llm.push(tool_calls(("call_packed", "set_status", PACKED_1)), text(answer, held_until=answering))
    ledger.open("set_status", PACKED_1)
    log = tmp_path / "agent.log"

    async with (
        replica(upstreams, store.url, log) as first,
        first.http.stream(
            "POST", "/api/v1/agent/run", json=run_body("Pack the order.", onDisconnect=on_disconnect)
        ) as response,
        anyio.create_task_group() as tg,
    ):
        assert response.status_code == 200
        following = Following(response)
        tg.start_soon(following.run)
        await following.wait_for_event("tool_result")
        async with store.writes_held():  # the run's end cannot be stored now
            answering.set()
            await following.wait_for(lambda events: answer_text(events) == answer)
            await anyio.sleep(QUIET_SECONDS)
            told_before_stored = kinds(following.events)
        done = await following.wait_for_event("done")
        await first.kill()  # at once: nothing the replica does after the client read done can count

    assert "done" not in told_before_stored, following.events
    run_id = following.events[0][2]["runId"]
    async with replica(upstreams, store.url, log) as other:
        run = await wait_for_run(other.http, run_id, ended, within=TAKEOVER_SECONDS)
        async with other.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events") as replay:
            stored_events = await EventStream(replay).read()

    # What the client was told is what is stored: the run finished, with the answer the client saw, not asked again.
    assert run["status"] == "completed"
    assert run["resumes"] == 0
    assert run["messages"][-1] == {"role": "assistant", "content": answer}
    assert run["iterations"] == done["iterations"] == 2
    assert run["usage"] == done["usage"]
    assert stored_events[-1] == next(event for event in following.events if event[1] == "done")
    assert len(llm.requests) == 2


async def test_a_tool_result_the_client_saw_is_kept_by_the_replica_that_takes_the_run_over(
    upstreams: Upstreams, store: Store, tmp_path: Path
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    # The answer twice: the replica killed may have asked for it already, and the one taking over asks again.
    llm.push(tool_calls(("call_pay", "send_payment", PAYMENT)), text("Paid."), text("Paid."))
    log = tmp_path / "agent.log"

    async with (
        replica(upstreams, store.url, log) as first,
        first.http.stream("POST", "/api/v1/agent/run", json=run_body("Pay.")) as response,
        anyio.create_task_group() as tg,
    ):
        assert response.status_code == 200
        following = Following(response)
        tg.start_soon(following.run)
        with anyio.fail_after(TAKEOVER_SECONDS):  # started: its turn is stored (a tool runs only then)
            await ledger.wait_for_state("send_payment", PAYMENT, 1, "started")
        async with store.writes_held():  # the payment's result cannot be stored now
            ledger.open("send_payment", PAYMENT)
            with anyio.fail_after(TAKEOVER_SECONDS):
                await ledger.wait_for_state("send_payment", PAYMENT, 1, "completed")
            await anyio.sleep(QUIET_SECONDS)
            told_before_stored = kinds(following.events)
        result = await following.wait_for_event("tool_result")
        await first.kill()  # at once, whatever the replica was doing next

    assert "tool_result" not in told_before_stored
    assert result["content"] == "paid 42"
    run_id = following.events[0][2]["runId"]
    async with replica(upstreams, store.url, log) as other:
        run = await wait_for_run(other.http, run_id, ended, within=TAKEOVER_SECONDS)

    # The result the client saw is the run's: stored, and what the model was told, not "the service restarted".
    assert run["status"] == "completed"
    stored = {message["toolCallId"]: message for message in run["messages"] if message["role"] == "tool"}
    assert stored["call_pay"]["content"] == "paid 42"
    assert tool_messages(llm.requests[-1]["messages"]) == {"call_pay": "paid 42"}
    assert ledger.started("send_payment") == 1


async def test_a_run_whose_end_cannot_be_stored_answers_that_error_and_not_the_answer(
    upstreams: Upstreams, store: Store, tmp_path: Path
) -> None:
    llm = upstreams.llm
    answering = anyio.Event()
    llm.push(text("The answer is 42.", held_until=answering))
    # A long lease: this replica learns of the lease taken from it by writing the run's end, not by renewing it.
    async with replica(upstreams, store.url, tmp_path / "agent.log", lease_seconds=60) as only:
        async with anyio.create_task_group() as tg:
            responses: list[httpx.Response] = []

            async def ask() -> None:
                body = run_body("What is the answer?", tools=[], stream=False)
                responses.append(await only.http.post("/api/v1/agent/run", json=body))

            tg.start_soon(ask)
            with anyio.fail_after(TAKEOVER_SECONDS):
                await llm.wait_for_request(1)
            # As another replica taking the run over would (this one frozen meanwhile): the run's end cannot be
            # stored by this one any more.
            await store.execute("UPDATE runs SET lease_owner = 'another-replica'")
            answering.set()
        [response] = responses
        run = (await only.http.get(f"/api/v1/agent/runs/{response.headers['X-Agent-Run-Id']}")).json()

    # Not the answer, which the run's store does not have: the error that kept it from being stored.
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "run_moved"
    assert run["status"] == "processing"
