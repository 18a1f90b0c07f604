"""The gateway's side of a server's question: matching it to a call (``connection.elicitation``) and the broker of
questions waiting for a person (``calls.elicitation``). End to end: the integration test of that name.
"""

from __future__ import annotations

import contextvars
import math
from typing import Any, cast

import anyio
import pytest
from mcp.client.session import ClientRequestContext
from mcp_types import ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult, ErrorData

from mcp_client_service.calls.elicitation import ElicitationAnswered, ElicitationBroker, ElicitationNotFound
from mcp_client_service.connection.elicitation import CallClock, CallElicitations
from suite_common.elicitation import InvalidAnswer
from suite_common.wire import ElicitationAnswer

pytestmark = pytest.mark.anyio

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "greeting": {"type": "string", "default": "hello"}},
    "required": ["name"],
}
QUESTION = ElicitRequestFormParams(message="Who?", requested_schema=SCHEMA)
CONTEXT = ClientRequestContext(session=cast(Any, None), request_id=1)


class Person:
    """An ``Asker`` that answers every question ``accept`` with a name, and counts them."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, server: str, params: ElicitRequestFormParams) -> ElicitResult:
        self.asked.append(server)
        return ElicitResult(action="accept", content={"name": "Ada"})


async def test_an_accepted_answer_reaches_the_server_with_the_schemas_defaults_filled() -> None:
    broker = ElicitationBroker(60)
    pending = broker.open("books", "acme", QUESTION)

    broker.answer(pending.elicitation_id, "acme", ElicitationAnswer(action="accept", content={"name": "Ada"}))

    assert await broker.wait(pending) == ElicitResult(action="accept", content={"name": "Ada", "greeting": "hello"})
    event = pending.event()
    assert (event.server, event.message, event.requested_schema) == ("books", "Who?", SCHEMA)


async def test_a_question_is_answered_once_and_by_its_own_tenant_only() -> None:
    broker = ElicitationBroker(60)
    pending = broker.open("books", "acme", QUESTION)

    with pytest.raises(ElicitationNotFound):
        broker.answer(pending.elicitation_id, "globex", ElicitationAnswer(action="decline"))
    with pytest.raises(ElicitationNotFound):
        broker.answer(pending.elicitation_id, None, ElicitationAnswer(action="decline"))
    with pytest.raises(ElicitationNotFound):
        broker.answer("unknown", "acme", ElicitationAnswer(action="decline"))
    broker.answer(pending.elicitation_id, "acme", ElicitationAnswer(action="decline"))
    with pytest.raises(ElicitationAnswered):
        broker.answer(pending.elicitation_id, "acme", ElicitationAnswer(action="cancel"))
    assert await broker.wait(pending) == ElicitResult(action="decline")
    with pytest.raises(ElicitationAnswered):  # remembered once settled
        broker.answer(pending.elicitation_id, "acme", ElicitationAnswer(action="cancel"))


async def test_an_answer_that_does_not_fit_leaves_the_question_waiting() -> None:
    broker = ElicitationBroker(60)
    pending = broker.open("books", None, QUESTION)

    with pytest.raises(InvalidAnswer, match="name"):
        broker.answer(pending.elicitation_id, None, ElicitationAnswer(action="accept", content={}))
    with pytest.raises(InvalidAnswer, match="only with accept"):
        broker.answer(pending.elicitation_id, None, ElicitationAnswer(action="decline", content={"name": "x"}))

    assert pending.result is None
    broker.answer(pending.elicitation_id, None, ElicitationAnswer(action="cancel"))
    assert await broker.wait(pending) == ElicitResult(action="cancel")


async def test_a_question_nobody_answers_in_time_is_answered_cancel() -> None:
    broker = ElicitationBroker(0.05)
    pending = broker.open("books", None, QUESTION)

    with anyio.fail_after(5):
        assert await broker.wait(pending) == ElicitResult(action="cancel")
    with pytest.raises(ElicitationAnswered):
        broker.answer(pending.elicitation_id, None, ElicitationAnswer(action="accept", content={"name": "late"}))


async def test_a_call_clock_stops_while_paused_and_resumes_with_what_was_left() -> None:
    clock = CallClock(10)
    left_before = clock.scope.deadline - anyio.current_time()

    clock.pause()
    clock.pause()  # two questions at once
    assert clock.scope.deadline == math.inf
    clock.resume()
    assert clock.scope.deadline == math.inf
    clock.resume()

    assert 0 < clock.scope.deadline - anyio.current_time() <= left_before


async def test_the_question_goes_to_the_one_call_in_flight_or_is_declined() -> None:
    elicitations = CallElicitations("books")
    person = Person()

    declined_idle = await elicitations.callback(CONTEXT, QUESTION)
    with elicitations.call("lookup", person, None):
        answered = await elicitations.callback(CONTEXT, QUESTION)
        url_mode = ElicitRequestURLParams(message="Open", url="https://example.com", elicitation_id="1")
        declined_url = await elicitations.callback(CONTEXT, url_mode)
    with elicitations.call("lookup", None, None):  # a plain JSON call: nobody to ask
        declined_json = await elicitations.callback(CONTEXT, QUESTION)

    assert declined_idle == ElicitResult(action="decline")
    assert answered == ElicitResult(action="accept", content={"name": "Ada"})
    assert declined_url == ElicitResult(action="decline")
    assert declined_json == ElicitResult(action="decline")
    assert person.asked == ["books"]


async def test_with_two_calls_in_flight_only_a_question_in_a_calls_own_context_is_put_to_a_person() -> None:
    elicitations = CallElicitations("books")
    person = Person()
    from_elsewhere: list[ElicitResult | ErrorData] = []

    async def ask_from_the_transport() -> None:
        from_elsewhere.append(await elicitations.callback(CONTEXT, QUESTION))

    with elicitations.call("one", person, None), elicitations.call("two", person, None):
        in_context = await elicitations.callback(CONTEXT, QUESTION)  # the innermost call's context names it
        async with anyio.create_task_group() as tg:
            # As a stdio reader task would: a context of its own, naming no call.
            contextvars.Context().run(tg.start_soon, ask_from_the_transport)

    assert in_context == ElicitResult(action="accept", content={"name": "Ada"})
    assert from_elsewhere == [ElicitResult(action="decline")]
    assert person.asked == ["books"]
