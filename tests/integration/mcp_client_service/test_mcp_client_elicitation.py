"""A server's question during a tool call (``elicitation/create``, form mode) reaches the person behind the call.

Behind a real gateway: ``asking_mcp_server.py`` (the SDK's ``MCPServer``, protocol 2026: the question rides the
call's ``InputRequiredResult``) over stdio and over streamable HTTP, and ``raw_mcp_server.py --mode elicit``
(handshake era: a standalone ``elicitation/create`` request on stdio, matched to the one call in flight). The
callers are ``call-tool`` over SSE (the ``elicitation`` event, ``POST /mcp/v1/elicitations/{id}``), with ``callId``
to leave and follow again (``GET /mcp/v1/calls/{callId}/events``), and plain JSON calls (declined at once).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import pytest
from mcp_types import TextContent
from structlog.testing import capture_logs

from suite_common.sse_parser import EventStreamParser, ServerSentEvent
from support.asking_mcp_server import build_asking_server
from support.mcp_gateway import Gateway, echo_stdio_server, face_client, raw_stdio_server, running_gateway
from support.processes import polled
from support.servers import serve_app

pytestmark = pytest.mark.anyio

ASKING_SCRIPT = Path(__file__).resolve().parents[2] / "support" / "asking_mcp_server.py"

SECONDS = 20.0
"""Bound of every wait in these tests."""

ASKING = {
    "stdio": {"name": "s_greet", "arguments": {}},
    "streamable HTTP": {"name": "h_greet", "arguments": {}},
    "streamable HTTP, handshake era": {"name": "old_greet", "arguments": {}},
    "stdio, handshake era": {"name": "ask", "arguments": {"message": "Who are you?"}},
}
"""One call of a tool that asks for a name (and has a default ``greeting``), per server and transport."""


class Events:
    """The events of one SSE answer, read one at a time (leaving the block closes the connection)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._chunks = response.aiter_bytes()
        self._parser = EventStreamParser()
        self._ready: list[ServerSentEvent] = []

    async def next(self) -> ServerSentEvent:
        while not self._ready:
            chunk = await anext(self._chunks)
            self._ready.extend(self._parser.feed(chunk))
        return self._ready.pop(0)

    async def next_json(self, kind: str) -> dict[str, Any]:
        event = await self.next()
        assert event.event == kind, (event.event, event.data)
        data: dict[str, Any] = json.loads(event.data)
        return data

    async def result_text(self) -> Any:
        result = await self.next_json("result")
        return json.loads(result["content"][0]["text"])


@asynccontextmanager
async def sse(
    gateway: Gateway, method: str, url: str, *, body: dict[str, Any] | None = None, tenant: str | None = None
) -> AsyncIterator[Events]:
    headers = {"Accept": "text/event-stream", **({"X-Tenant-Id": tenant} if tenant else {})}
    async with gateway.http.stream(method, url, json=body, headers=headers) as response:
        assert response.status_code == 200, (await response.aread()).decode()
        yield Events(response)


async def answer(
    gateway: Gateway, elicitation_id: str, body: dict[str, Any], tenant: str | None = None
) -> httpx.Response:
    headers = {"X-Tenant-Id": tenant} if tenant else {}
    return await gateway.http.post(f"/mcp/v1/elicitations/{elicitation_id}", json=body, headers=headers)


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[Gateway]:
    async with (
        serve_app(build_asking_server().streamable_http_app()) as asking_url,
        serve_app(build_asking_server(handshake_era=True).streamable_http_app()) as handshake_url,
    ):
        servers = {
            "asking-stdio": {"command": sys.executable, "args": [str(ASKING_SCRIPT)], "toolPrefix": "s_"},
            "asking-http": {"url": asking_url + "/mcp", "toolPrefix": "h_"},
            "asking-http-2025": {"url": handshake_url + "/mcp", "toolPrefix": "old_"},
            "legacy": raw_stdio_server("elicit"),
            "echo": echo_stdio_server("echo", tool_prefix="echo_"),
        }
        async with running_gateway(servers) as gateway:
            await gateway.wait_until_ready(*servers)
            yield gateway


@pytest.mark.parametrize("where", list(ASKING))
async def test_the_question_reaches_the_sse_caller_and_the_answer_gets_the_schemas_defaults(
    gateway: Gateway, where: str
) -> None:
    with anyio.fail_after(SECONDS):
        async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=ASKING[where]) as events:
            question = await events.next_json("elicitation")
            assert question["requestedSchema"]["properties"]["greeting"]["default"] == "hello"
            assert question["requestedSchema"]["required"] == ["name"]
            assert question["server"] in ("asking-stdio", "asking-http", "asking-http-2025", "legacy")
            assert question["expiresAt"]
            answered = await answer(
                gateway, question["elicitationId"], {"action": "accept", "content": {"name": "Ada"}}
            )
            assert answered.status_code == 200
            assert answered.json() == {"elicitationId": question["elicitationId"], "action": "accept"}
            outcome = await events.result_text()

    if where == "stdio, handshake era":  # the server's ElicitResult as it got it
        assert outcome == {"action": "accept", "content": {"greeting": "hello", "name": "Ada"}}
    else:
        assert outcome == {"action": "accept", "greeting": "hello", "name": "Ada", "times": 1}


@pytest.mark.parametrize("where", list(ASKING))
async def test_a_plain_json_call_has_nobody_to_ask_so_the_question_is_declined_at_once(
    gateway: Gateway, where: str
) -> None:
    with anyio.fail_after(SECONDS):
        response = await gateway.http.post("/mcp/v1/tools/call-tool", json=ASKING[where])

    assert response.status_code == 200
    assert json.loads(response.json()["content"][0]["text"])["action"] == "decline"


async def test_the_gateways_own_mcp_endpoint_has_nobody_to_ask_either(gateway: Gateway) -> None:
    with anyio.fail_after(SECONDS):
        async with face_client(gateway) as client:
            result = await client.call_tool("h_greet", {})

    assert json.loads(cast(TextContent, result.content[0]).text) == {"action": "decline"}


async def test_an_answer_that_does_not_fit_the_schema_is_400_and_the_question_still_waits(gateway: Gateway) -> None:
    with anyio.fail_after(SECONDS):
        async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=ASKING["streamable HTTP"]) as events:
            question = await events.next_json("elicitation")
            elicitation = question["elicitationId"]

            missing = await answer(gateway, elicitation, {"action": "accept", "content": {"greeting": "hi"}})
            wrong_type = await answer(gateway, elicitation, {"action": "accept", "content": {"name": 7}})
            stray = await answer(gateway, elicitation, {"action": "decline", "content": {"name": "Ada"}})
            unknown_action = await answer(gateway, elicitation, {"action": "maybe"})
            declined = await answer(gateway, elicitation, {"action": "decline"})
            again = await answer(gateway, elicitation, {"action": "accept", "content": {"name": "Ada"}})
            outcome = await events.result_text()
        unknown = await answer(gateway, "no-such-question", {"action": "cancel"})

    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == "invalid_input"
    assert "name" in missing.json()["error"]["message"]
    assert wrong_type.status_code == 400
    assert wrong_type.json()["error"]["code"] == "invalid_input"
    assert stray.status_code == 400
    assert unknown_action.status_code == 400
    assert declined.status_code == 200
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "elicitation_answered"
    assert outcome == {"action": "decline"}
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "elicitation_not_found"


@pytest.mark.parametrize("where", ["stdio", "streamable HTTP"])
async def test_a_call_with_call_id_outlives_its_caller_while_a_question_waits_and_is_followed_again(
    gateway: Gateway, where: str
) -> None:
    call_id = f"run-1/{where}"
    body = {**ASKING[where], "callId": call_id}
    with anyio.fail_after(SECONDS):
        async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=body, tenant="acme") as events:
            question = await events.next_json("elicitation")
        # The caller has gone: the call waits. Another tenant neither follows it nor answers its question.
        other_follow = await gateway.http.get(f"/mcp/v1/calls/{call_id}/events", headers={"X-Tenant-Id": "globex"})
        other_answer = await answer(gateway, question["elicitationId"], {"action": "cancel"}, tenant="globex")
        untenanted = await gateway.http.get(f"/mcp/v1/calls/{call_id}/events")

        async with sse(gateway, "GET", f"/mcp/v1/calls/{call_id}/events", tenant="acme") as events:
            assert await events.next_json("elicitation") == question  # still waiting: told first
            content = {"name": "Grace", "times": 2}
            answered = await answer(
                gateway, question["elicitationId"], {"action": "accept", "content": content}, "acme"
            )
            assert answered.status_code == 200
            outcome = await events.result_text()
        followed_again = await gateway.http.get(f"/mcp/v1/calls/{call_id}/events", headers={"X-Tenant-Id": "acme"})

    assert other_follow.status_code == 404
    assert other_follow.json()["error"]["code"] == "call_not_found"
    assert other_answer.status_code == 404
    assert untenanted.status_code == 404
    assert outcome == {"action": "accept", "greeting": "hello", "name": "Grace", "times": 2}
    assert followed_again.status_code == 404  # its result went to one follower


async def test_a_detached_calls_result_waits_for_its_follower(gateway: Gateway) -> None:
    call_id = "run-2/call-1"
    body = {**ASKING["stdio"], "callId": call_id}
    with anyio.fail_after(SECONDS):
        async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=body) as events:
            question = await events.next_json("elicitation")
            duplicate = await gateway.http.post(
                "/mcp/v1/tools/call-tool", json=body, headers={"Accept": "text/event-stream"}
            )
        answered = await answer(gateway, question["elicitationId"], {"action": "accept", "content": {"name": "Lin"}})
        assert answered.status_code == 200
        # Nobody follows while the call ends: its result is kept for the follower to come.
        async with sse(gateway, "GET", f"/mcp/v1/calls/{call_id}/events") as events:
            outcome = await events.result_text()

    assert duplicate.status_code == 409
    assert duplicate.json()["error"]["code"] == "call_in_progress"
    assert outcome == {"action": "accept", "greeting": "hello", "name": "Lin", "times": 1}


async def test_a_caller_that_leaves_with_no_question_waiting_still_cancels_its_call(gateway: Gateway) -> None:
    body = {"name": "echo_hold", "arguments": {"tag": "left"}, "callId": "run-3/call-1"}
    with anyio.fail_after(SECONDS):
        async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=body):
            started = await gateway.http.post(
                "/mcp/v1/tools/call-tool",
                json={"name": "echo_await_hold", "arguments": {"tag": "left", "event": "started"}},
            )
            assert started.json()["content"][0]["text"] == "left started"
        cancelled = await gateway.http.post(
            "/mcp/v1/tools/call-tool",
            json={"name": "echo_await_hold", "arguments": {"tag": "left", "event": "cancelled"}},
        )
        async with sse(gateway, "GET", "/mcp/v1/calls/run-3/call-1/events") as events:
            ended = await events.next_json("error")  # kept for a follower: how it ended

    assert cancelled.json()["content"][0]["text"] == "left cancelled"
    assert ended["code"] == "call_cancelled"


async def test_over_streamable_http_each_of_two_calls_in_flight_gets_its_own_question(gateway: Gateway) -> None:
    body = ASKING["streamable HTTP, handshake era"]
    session = gateway.registry.connections["asking-http-2025"].client
    assert session is not None
    assert session.protocol_version == "2025-11-25"  # questions as requests, each on its call's response stream
    with anyio.fail_after(SECONDS):
        async with (
            sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=body) as first,
            sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=body) as second,
        ):
            questions = [await first.next_json("elicitation"), await second.next_json("elicitation")]
            for question, name in zip(questions, ["Ada", "Grace"], strict=True):
                content = {"name": name}
                await answer(gateway, question["elicitationId"], {"action": "accept", "content": content})
            outcomes = [await first.result_text(), await second.result_text()]

    assert [outcome["name"] for outcome in outcomes] == ["Ada", "Grace"]


async def test_a_question_on_a_stdio_session_with_two_calls_in_flight_is_declined(gateway: Gateway) -> None:
    with anyio.fail_after(SECONDS):
        async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=ASKING["stdio, handshake era"]) as first:
            question = await first.next_json("elicitation")
            # A second call's question arrives while two calls are in flight on the session: it names neither.
            async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=ASKING["stdio, handshake era"]) as second:
                assert await second.result_text() == {"action": "decline"}
            await answer(gateway, question["elicitationId"], {"action": "accept", "content": {"name": "Ada"}})
            assert (await first.result_text())["action"] == "accept"


async def test_a_question_nobody_answers_in_time_is_cancelled_and_the_call_time_limit_stops_meanwhile() -> None:
    async with (
        serve_app(build_asking_server().streamable_http_app()) as asking_url,
        running_gateway(
            {"asking": {"url": asking_url + "/mcp"}, "legacy": raw_stdio_server("elicit")},
            elicitation_timeout_seconds=0.6,
            call_timeout_seconds=0.3,  # shorter than the wait for the answer: it does not run meanwhile
        ) as gateway,
    ):
        await gateway.wait_until_ready("asking", "legacy")
        with anyio.fail_after(SECONDS):
            for body in ({"name": "greet", "arguments": {}}, ASKING["stdio, handshake era"]):
                async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=body) as events:
                    question = await events.next_json("elicitation")
                    outcome = await events.result_text()
                late = await answer(gateway, question["elicitationId"], {"action": "accept", "content": {"name": "x"}})

                assert outcome == {"action": "cancel"}
                assert late.status_code == 409


async def test_a_late_question_of_an_abandoned_call_never_reaches_another_tenants_call_on_a_shared_stdio_session() -> (
    None
):
    # One deployment stdio server serves every tenant; its questions name no call (handshake era), so the one call
    # in flight is assumed to be the asker. A call the gateway gave up on (its time limit) goes on at the server and
    # asks while another tenant's call is the one in flight: that tenant must not see it, nor answer it.
    legacy = raw_stdio_server("elicit", callTimeoutSeconds=0.5)
    async with running_gateway({"legacy": legacy}) as gateway:
        await gateway.wait_until_ready("legacy")
        ask = {"name": "ask", "arguments": {"message": "Globex: who are you?"}}
        late = {"name": "ask", "arguments": {"message": "Acme: who are you?", "after": 1.0}}
        with capture_logs() as logs, anyio.fail_after(SECONDS):
            async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=ask, tenant="globex") as globex:
                question = await globex.next_json("elicitation")
                async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=late, tenant="acme") as acme:
                    timed_out = await acme.next_json("result")  # abandoned: the server still works on it
                declined = await _logged(logs, "mcp_elicitation_declined")
                await answer(
                    gateway, question["elicitationId"], {"action": "accept", "content": {"name": "Grace"}}, "globex"
                )
                globex_outcome = await globex.result_text()  # and no other question before it

            # Quiet again (no call in flight for the quiet time): the one call in flight gets its question again.
            gateway.registry.connections["legacy"].elicitations.quiet_seconds = 0.0
            async with sse(gateway, "POST", "/mcp/v1/tools/call-tool", body=ask, tenant="acme") as again:
                asked_again = await again.next_json("elicitation")
                await answer(
                    gateway, asked_again["elicitationId"], {"action": "accept", "content": {"name": "Ada"}}, "acme"
                )
                again_outcome = await again.result_text()

    assert timed_out["isError"]
    assert "did not finish within 0.5 s" in timed_out["content"][0]["text"]
    assert "abandoned" in declined["reason"]
    assert (globex_outcome["action"], globex_outcome["content"]["name"]) == ("accept", "Grace")
    assert asked_again["message"] == "Globex: who are you?"
    assert again_outcome["content"]["name"] == "Ada"


async def _logged(logs: list[MutableMapping[str, Any]], event: str) -> MutableMapping[str, Any]:
    """The first log record of ``event`` once the gateway has written it. The question it is about comes from the
    stdio server's own process, on its own clock: nothing here to await, so it is polled (bounded)."""

    async def written() -> bool:
        return any(record["event"] == event for record in logs)

    await polled(written, SECONDS)
    return next(record for record in logs if record["event"] == event)
