"""``LiveCalls``: a call-tool with ``callId`` and ``Accept: text/event-stream, application/json``, followed in
process (the HTTP side is the integration tests'): its plain answer, its ping, its kept result, its events past a
slow follower, its end when the gateway stops."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest
from mcp_types import ElicitRequestFormParams, ElicitResult
from starlette.responses import Response

from mcp_client_service.calls import live_calls
from mcp_client_service.calls.elicitation import ElicitationBroker
from mcp_client_service.calls.live_calls import CallEnd, CallInProgress, Follower, LiveCalls
from mcp_client_service.connection.elicitation import Asker
from suite_common.sse import PING, Emit, encode_event
from suite_common.sse_parser import EventStreamParser
from suite_common.wire import ElicitationAnswer

pytestmark = pytest.mark.anyio

RESULT = CallEnd("result", '{"content":[],"isError":false,"server":"echo","durationMs":1.0}')
QUESTION = ElicitRequestFormParams(
    message="Who?", requested_schema={"type": "object", "properties": {"name": {"type": "string"}}}
)


@asynccontextmanager
async def running_calls(result_seconds: float = 60.0) -> AsyncIterator[LiveCalls]:
    calls = LiveCalls(ElicitationBroker(timeout_seconds=60.0), result_seconds=result_seconds)
    async with calls.running():
        yield calls


class Written:
    """What a follower's relay writes to its caller."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    async def send(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    def events(self) -> list[tuple[str, str]]:
        return [(event.event, event.data) for event in EventStreamParser().feed(b"".join(self.chunks))]


async def answers_plainly(follower: Follower) -> tuple[Response | None, Written]:
    written = Written()
    with anyio.fail_after(5):
        return await follower.relay_or_answer(written.send), written


async def test_a_call_that_ends_before_any_event_is_answered_plainly_and_its_call_id_is_free_at_once() -> None:
    async def work(send: Emit, ask: Asker) -> CallEnd:
        return RESULT

    async with running_calls() as calls:
        response, written = await answers_plainly(calls.start("acme", "run-1/call-1", work))
        assert response is not None
        assert response.status_code == 200
        assert response.body == RESULT.data.encode()
        assert written.chunks == []
        assert calls.follow("acme", "run-1/call-1") is None  # its result was given
        calls.start("acme", "run-1/call-1", work)  # not CallInProgress


async def test_a_call_of_the_same_call_id_is_refused_while_one_runs() -> None:
    release = anyio.Event()

    async def work(send: Emit, ask: Asker) -> CallEnd:
        await release.wait()
        return RESULT

    async with running_calls() as calls:
        follower = calls.start("acme", "run-1/call-1", work)
        with pytest.raises(CallInProgress):
            calls.start("acme", "run-1/call-1", work)
        calls.start("globex", "run-1/call-1", work)  # another tenant's callId is another call
        release.set()
        response, _ = await answers_plainly(follower)
        assert response is not None


async def test_a_silent_call_starts_its_stream_with_a_ping_and_ends_with_its_result_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(live_calls, "START_WITHIN_SECONDS", 0.01)
    release = anyio.Event()

    async def work(send: Emit, ask: Asker) -> CallEnd:
        await release.wait()
        return RESULT

    async with running_calls() as calls:
        written = Written()

        async def pinged(chunk: bytes) -> None:
            await written.send(chunk)
            release.set()  # the call ends once its stream has started

        with anyio.fail_after(5):
            response = await calls.start(None, "c", work).relay_or_answer(pinged)

    assert response is None
    assert written.chunks[0] == PING
    assert written.events() == [("result", RESULT.data)]


async def test_progress_past_a_lagging_follower_is_dropped_but_a_question_still_reaches_it() -> None:
    answer: list[ElicitResult] = []

    async def work(send: Emit, ask: Asker) -> CallEnd:
        for step in range(100):
            await send(encode_event(json.dumps({"progress": step}), event="progress"))
        answer.append(await ask("crm", QUESTION))
        return RESULT

    async with running_calls() as calls:
        follower = calls.start("acme", "c", work)
        with anyio.fail_after(5):
            await anyio.wait_all_tasks_blocked()  # the call has sent it all and asks, nobody reading yet
            written = Written()

            async def decline_the_question(chunk: bytes) -> None:
                await written.send(chunk)
                if chunk.startswith(b"event: elicitation"):
                    [event] = EventStreamParser().feed(chunk)
                    calls.broker.answer(
                        json.loads(event.data)["elicitationId"], "acme", ElicitationAnswer(action="decline")
                    )

            assert await follower.relay_or_answer(decline_the_question) is None

    kinds = [kind for kind, _ in written.events()]
    assert kinds.count("progress") == live_calls._BUFFER - live_calls._KEPT_FOR_QUESTIONS
    assert kinds[-2:] == ["elicitation", "result"]
    assert answer == [ElicitResult(action="decline")]


async def test_the_result_of_a_call_whose_follower_left_waits_for_the_next_follower_of_the_same_tenant() -> None:
    release = anyio.Event()

    async def work(send: Emit, ask: Asker) -> CallEnd:
        await send(encode_event("{}", event="progress"))
        await release.wait()
        return RESULT

    async with running_calls() as calls:
        first = calls.start("acme", "c", work)
        written = Written()

        async def leave_after_the_first_event(chunk: bytes) -> None:
            await written.send(chunk)
            release.set()
            await anyio.sleep_forever()  # the caller hangs until it is cancelled (it went away)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(first.relay_or_answer, leave_after_the_first_event)
                await anyio.wait_all_tasks_blocked()  # the call has ended; its caller hangs
                group.cancel_scope.cancel()  # and goes away before it was written the result
        assert written.events() == [("progress", "{}")]
        assert calls.follow("globex", "c") is None
        call = calls.follow("acme", "c")
        assert call is not None
        again = Written()
        with anyio.fail_after(5):
            await call.attach().relay(again.send)
        assert again.events() == [("result", RESULT.data)]
        assert calls.follow("acme", "c") is None  # given once


async def test_the_result_of_a_detached_call_is_forgotten_once_its_time_is_up() -> None:
    async def work(send: Emit, ask: Asker) -> CallEnd:
        await ask("crm", QUESTION)
        return RESULT

    async with running_calls(result_seconds=0.0) as calls:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(calls.start("acme", "c", work).relay_or_answer, Written().send)
                await anyio.wait_all_tasks_blocked()  # the question was sent; the caller goes away
                group.cancel_scope.cancel()
            call = calls.follow("acme", "c")
            assert call is not None
            assert call.question is not None  # detached: kept for the answer
            calls.broker.answer(call.question.elicitation_id, "acme", ElicitationAnswer(action="decline"))
            while calls.follow("acme", "c") is not None:  # the call ends; its result, unfollowed, expires
                await anyio.lowlevel.checkpoint()


async def test_stopping_the_gateway_ends_a_running_call_with_the_cancelled_error() -> None:
    started = anyio.Event()
    cancelled = anyio.Event()

    async def work(send: Emit, ask: Asker) -> CallEnd:
        await send(encode_event("{}", event="progress"))
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    written = Written()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group, running_calls() as calls:
            group.start_soon(calls.start("acme", "c", work).relay_or_answer, written.send)
            await started.wait()

    assert cancelled.is_set()
    assert [kind for kind, _ in written.events()] == ["progress", "error"]
    assert json.loads(written.events()[-1][1])["code"] == "call_cancelled"


async def test_the_call_id_of_a_call_whose_follower_never_relays_is_freed_once_its_time_is_up() -> None:
    """The follower's relay frees the ``callId`` when it sends the result; should it never run (its response was
    dropped), the kept result's clock still does."""

    async def work(send: Emit, ask: Asker) -> CallEnd:
        return RESULT

    async with running_calls(result_seconds=0.0) as calls:
        calls.start("acme", "c", work)  # the follower is never relayed
        with anyio.fail_after(5):
            while calls.follow("acme", "c") is not None:
                await anyio.lowlevel.checkpoint()
