"""``GET /api/v1/agent/audit``, what call-tool carries, and a call the outbound policy blocks, through the real
services on both backends.

agent-service stores in SQLite or in a PostgreSQL database of its own, with the callers file of the usage API's
tests (tenants ``acme``, with a trusted key and an untrusted one, and ``globex``); the tools are the echo MCP
server's behind a real mcp-client-service, in front of which a scripted front (``support.gateway_front``) records
each call-tool and answers a call of ``add`` as the gateway answers a server whose address the outbound policy
blocks (403 ``outbound_ssrf_blocked``); only the LLM is scripted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from integration.agent_service.test_usage_api import ACME_APP_KEY, ACME_KEY, CALLERS_FILE, GLOBEX_KEY

from support import fake_openai
from support.caller_keys import as_caller
from support.databases import fresh_postgres_database
from support.gateway_front import BLOCKED_MESSAGE, GatewayFront
from support.servers import serve_app
from support.stacks import running_agent, running_upstreams

pytestmark = pytest.mark.anyio


@dataclass
class Stack:
    llm: fake_openai.ScriptedOpenAI
    front: GatewayFront
    http: httpx.AsyncClient


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
async def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    folder = tmp_path_factory.mktemp("audit")
    callers = folder / "callers.toml"
    callers.write_text(CALLERS_FILE)
    with ExitStack() as databases:
        # A database of its own: agent-service takes over the expired runs it finds in its database.
        url = (
            f"sqlite:///{folder}/runs.db"
            if request.param == "sqlite"
            else databases.enter_context(fresh_postgres_database())
        )
        async with running_upstreams() as upstreams:
            front = GatewayFront(upstreams.gateway.url, blocked={"add"})
            async with (
                serve_app(front.app) as front_url,
                running_agent(
                    upstreams.completion_url,
                    replace(upstreams.gateway, url=front_url),
                    database_url=url,
                    callers_file=callers,
                ) as agent_url,
                httpx.AsyncClient(base_url=agent_url, timeout=30) as http,
            ):
                yield Stack(upstreams.llm, front, http)


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "go"}], "tools": ["echo", "add"], **fields}


async def _run(stack: Stack, key: str, *replies: fake_openai.Reply, user: str | None = None) -> dict[str, Any]:
    stack.llm.push(*replies)
    response = await stack.http.post("/api/v1/agent/run", json=_body(), headers=as_caller(key, user))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def _audit(stack: Stack, key: str, **params: str) -> dict[str, Any]:
    response = await stack.http.get("/api/v1/agent/audit", params=params, headers=as_caller(key))
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def _since() -> str:
    return (datetime.now(UTC) - timedelta(milliseconds=1)).isoformat()


async def test_the_audit_lists_each_tool_call_of_the_tenants_runs_once_and_another_tenant_sees_none(
    stack: Stack,
) -> None:
    start = _since()
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    first = await _run(
        stack,
        ACME_KEY,
        fake_openai.tool_calls(("c1", "echo", {"text": "one"}), ("c2", "invented", {})),
        fake_openai.tool_calls(("c3", "echo", {"text": "two"})),
        fake_openai.text("Done."),
        user=alice,
    )
    second = await _run(
        stack, ACME_KEY, fake_openai.tool_calls(("c1", "echo", {"text": "x"})), fake_openai.text("Ok."), user=bob
    )
    theirs = await _run(
        stack, GLOBEX_KEY, fake_openai.tool_calls(("c1", "echo", {"text": "y"})), fake_openai.text("Ok.")
    )

    page = await _audit(stack, ACME_APP_KEY, **{"from": start})  # any key of the tenant
    assert page["tenant"] == "acme"
    assert "nextCursor" not in page
    rows = [
        (
            row["runId"],
            row["iteration"],
            row["callIndex"],
            row["toolCallId"],
            row.get("server"),
            row["tool"],
            row["status"],
        )
        for row in page["calls"]
    ]
    assert sorted(rows, key=str) == sorted(
        [
            (second["runId"], 1, 0, "c1", "tools", "echo", "ok"),
            (first["runId"], 2, 0, "c3", "tools", "echo", "ok"),
            (first["runId"], 1, 1, "c2", None, "invented", "refused"),
            (first["runId"], 1, 0, "c1", "tools", "echo", "ok"),
        ],
        key=str,
    )
    moments = [datetime.fromisoformat(row["at"]) for row in page["calls"]]
    assert moments == sorted(moments, reverse=True)  # newest first
    assert rows[0][0] == second["runId"]
    # The tool calls of the runs' own messages, one row each.
    for run in (first, second):
        asked = {call["id"] for message in run["messages"] for call in message.get("toolCalls") or []}
        assert sorted(row[3] for row in rows if row[0] == run["runId"]) == sorted(asked)
    assert {row["user"] for row in page["calls"] if row["runId"] == first["runId"]} == {alice}
    assert all(row["attempt"] == 0 and row["latencyMs"] >= 0 for row in page["calls"])

    globex = await _audit(stack, GLOBEX_KEY, **{"from": start})
    assert [(row["runId"], row["toolCallId"]) for row in globex["calls"]] == [(theirs["runId"], "c1")]
    assert (await _audit(stack, GLOBEX_KEY, **{"from": start, "user": alice}))["calls"] == []

    refused = await _audit(stack, ACME_KEY, **{"from": start, "status": "refused"})
    assert [row["tool"] for row in refused["calls"]] == ["invented"]
    by_bob = await _audit(stack, ACME_KEY, **{"from": start, "user": bob, "tool": "echo"})
    assert [row["runId"] for row in by_bob["calls"]] == [second["runId"]]


async def test_pages_of_the_audit_follow_each_other_with_the_cursor(stack: Stack) -> None:
    start = _since()
    await _run(
        stack,
        ACME_KEY,
        fake_openai.tool_calls(("c1", "echo", {"text": "a"})),
        fake_openai.tool_calls(("c2", "echo", {"text": "b"})),
        fake_openai.tool_calls(("c3", "echo", {"text": "c"})),
        fake_openai.text("Done."),
    )
    whole = await _audit(stack, ACME_KEY, **{"from": start})
    seen: list[str] = []
    params = {"from": start, "limit": "2"}
    for _ in range(5):
        page = await _audit(stack, ACME_KEY, **params)
        seen += [row["toolCallId"] for row in page["calls"]]
        if "nextCursor" not in page:
            break
        params["cursor"] = page["nextCursor"]
    assert seen == [row["toolCallId"] for row in whole["calls"]] == ["c3", "c2", "c1"]


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"from": "yesterday"}, "from must be an ISO 8601 date"),
        ({"from": "2026-11-02", "to": "2026-11-01"}, "is after to"),
        ({"status": "failed"}, "status must be one of ok, error, refused, cancelled, cached"),
        ({"tool": ""}, "tool must be a tool's name"),
        ({"tool": "a\x00b"}, "tool must be a tool's name"),
        ({"user": "two words"}, "user must be an X-User-Id"),
        ({"limit": "0"}, "limit must be a whole number from 1 to 500"),
        ({"cursor": "not-a-cursor"}, "cursor must be the nextCursor of a page"),
    ],
)
async def test_a_bad_filter_is_a_400_that_says_why(stack: Stack, params: dict[str, str], says: str) -> None:
    response = await stack.http.get("/api/v1/agent/audit", params=params, headers=as_caller(ACME_KEY))
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert says in response.json()["error"]["message"]


async def test_the_audit_needs_a_key(stack: Stack) -> None:
    assert (await stack.http.get("/api/v1/agent/audit")).status_code == 401


async def test_call_tool_names_the_runs_tenant_and_whom_it_acts_for(stack: Stack) -> None:
    user = f"carol-{uuid.uuid4().hex[:8]}"
    conversation = f"conv-{uuid.uuid4().hex[:8]}"
    calls_before = len(stack.front.calls)
    stack.llm.push(fake_openai.tool_calls(("c1", "echo", {"text": "who"})), fake_openai.text("Ok."))
    response = await stack.http.post(
        "/api/v1/agent/run", json=_body(conversationId=conversation), headers=as_caller(ACME_KEY, user)
    )
    assert response.status_code == 200, response.text
    [sent] = stack.front.calls[calls_before:]
    assert sent.headers["x-tenant-id"] == "acme"
    assert sent.body["caller"] == {
        "tenant": "acme",
        "user": user,
        "role": "user",
        "runId": response.json()["runId"],
        "conversationId": conversation,
    }


async def test_a_call_the_outbound_policy_blocks_ends_a_run_with_403_stored_as_its_error(stack: Stack) -> None:
    start = _since()
    asked = len(stack.llm.requests)
    stack.llm.push(fake_openai.tool_calls(("c1", "add", {"a": 1, "b": 2})))  # no answer scripted: none is asked
    response = await stack.http.post("/api/v1/agent/run", json=_body(), headers=as_caller(ACME_KEY))
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "outbound_ssrf_blocked"
    assert "10.20.30.40" not in json.dumps(response.json())
    assert len(stack.llm.requests) == asked + 1  # the model was never asked again, so never told

    run_id = response.headers["x-agent-run-id"]
    stored = (await stack.http.get(f"/api/v1/agent/runs/{run_id}", headers=as_caller(ACME_KEY))).json()
    assert (stored["status"], stored["error"]["code"]) == ("failed", "outbound_ssrf_blocked")
    assert not any(BLOCKED_MESSAGE in (message.get("content") or "") for message in stored["messages"])
    audit = await _audit(stack, ACME_KEY, **{"from": start, "tool": "add"})
    assert [(row["runId"], row["status"]) for row in audit["calls"]] == [(run_id, "refused")]


async def test_a_call_the_outbound_policy_blocks_ends_a_streamed_run_with_an_error_event(stack: Stack) -> None:
    asked = len(stack.llm.requests)
    stack.llm.push(fake_openai.tool_calls(("c1", "add", {"a": 1, "b": 2})))  # no answer scripted: none is asked
    async with stack.http.stream(
        "POST", "/api/v1/agent/run", json=_body(stream=True), headers=as_caller(ACME_KEY)
    ) as response:
        assert response.status_code == 200
        text = (await response.aread()).decode()
    events = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    assert events[-1] == "error"
    assert "done" not in events
    assert "tool_result" not in events
    last_data = [line for line in text.splitlines() if line.startswith("data: ")][-1]
    assert json.loads(last_data.removeprefix("data: "))["code"] == "outbound_ssrf_blocked"
    assert "10.20.30.40" not in text
    assert len(stack.llm.requests) == asked + 1
