"""Tool calls that wait for a person's approval, for real: agent-service processes on SQLite and PostgreSQL, the
ledger MCP server (whose ``send_payment`` says what a payment made twice would be) behind a real gateway, and the
scripted OpenAI provider behind a real completion-service.

A waiting run lives in the store only: the replica that parked it may die (SIGKILL), another takes the decision and
runs the approved call exactly once; a denied call is told to the model and never made; a wait that runs out denies
what is undecided, and the time spent waiting is not taken from the run's deadline.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from integration.agent_service.test_run_takeover import (
    TAKEOVER_SECONDS,
    EventStream,
    Replica,
    Upstreams,
    ended,
    kinds,
    replica,
    tool_messages,
    upstreams,
)

from agent_service.core.run import UNKNOWN_OUTCOME
from agent_service.runs.running import CANCELLED_CALL
from support.answer_formats import CITY_SCHEMA, PARIS
from support.caller_keys import as_caller, key_entry
from support.fake_openai import text, tool_calls
from support.stacks import wait_for_run

pytestmark = pytest.mark.anyio

__all__ = ["upstreams"]  # the fixture, imported to be used here

PAYMENT = {"amount": 42}
ACME_KEY = "sk-acme-approvals-0123456789"
GLOBEX_KEY = "sk-globex-approvals-0123456789"
HASTY_KEY = "sk-hasty-approvals-0123456789"
HASTY_WAIT_SECONDS = 2.0

CALLERS_FILE = f"""
[tenants.acme]
approval = ["send_payment"]

[tenants.globex]

[tenants.hasty]
approval = ["destructive"]
approval_timeout_seconds = {HASTY_WAIT_SECONDS}

{key_entry("acme-app", "acme", ACME_KEY, trusted=True)}
{key_entry("globex-app", "globex", GLOBEX_KEY, trusted=True)}
{key_entry("hasty-app", "hasty", HASTY_KEY)}
"""


def _body(content: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": content}],
        "tools": ["get_status", "send_payment"],
        "stream": True,
        **fields,
    }


def _sqlite_replica(upstreams: Upstreams, folder: Path) -> AbstractAsyncContextManager[Replica]:
    """One agent-service process on a SQLite file of ``folder``, with ``CALLERS_FILE``."""
    callers = folder / "callers.toml"
    callers.write_text(CALLERS_FILE)
    return replica(upstreams, f"sqlite:///{folder}/runs.db", folder / "a.log", callers_file=callers)


def _approvals_seen(events: list[tuple[int, str, dict[str, Any]]]) -> bool:
    return events[-1][1] == "approval_required"


async def test_a_waiting_run_survives_its_replicas_kill_and_the_call_another_replica_approves_runs_once(
    upstreams: Upstreams, tmp_path: Path, own_postgres_url: str
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(tool_calls(("call_pay", "send_payment", PAYMENT)), text("Paid."))
    ledger.open("send_payment", PAYMENT)
    ledger.open("send_payment", PAYMENT, attempt=2)  # were it made twice, the test would see it
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE)

    async with (
        replica(upstreams, own_postgres_url, tmp_path / "a.log", callers_file=callers) as a,
        replica(upstreams, own_postgres_url, tmp_path / "b.log", callers_file=callers) as b,
    ):
        headers = as_caller(ACME_KEY, "alice")
        async with a.http.stream("POST", "/api/v1/agent/run", json=_body("Pay 42."), headers=headers) as response:
            assert response.status_code == 200
            stream = EventStream(response)
            seen = await stream.read(until=_approvals_seen)
            run_id = seen[0][2]["runId"]
            required = seen[-1][2]
            await a.kill()
            with pytest.raises(httpx.TransportError):
                await stream.read()

        assert kinds(seen) == ["run_started", "tool_call", "approval_required"]
        assert (required["toolCallId"], required["name"], required["server"]) == ("call_pay", "send_payment", "ledger")
        assert required["arguments"] == PAYMENT
        assert "expiresAt" in required
        b.http.headers.update(headers)
        waiting = (await b.http.get(f"/api/v1/agent/runs/{run_id}")).json()
        assert waiting["status"] == "waiting"
        [approval] = waiting["approvals"]
        assert (approval["toolCallId"], approval["status"]) == ("call_pay", "pending")
        assert ledger.started("send_payment") == 0

        decision = {"decisions": [{"toolCallId": "call_pay", "approve": True}]}
        url = f"/api/v1/agent/runs/{run_id}/approvals"
        other = await b.http.post(url, json=decision, headers=as_caller(GLOBEX_KEY))
        assert other.status_code == 404
        assert other.json()["error"]["code"] == "run_not_found"
        bad = await b.http.post(url, json={"decisions": []}, headers=headers)
        assert bad.status_code == 400

        approved = await b.http.post(url, json=decision, headers=headers)
        assert approved.status_code == 200, approved.text
        assert approved.json()["runId"] == run_id
        assert approved.json()["approvals"][0]["status"] == "approved"
        again = await b.http.post(url, json=decision, headers=headers)
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "approval_not_pending"

        run = await wait_for_run(b.http, run_id, ended, within=TAKEOVER_SECONDS)
        async with b.http.stream("GET", f"/api/v1/agent/runs/{run_id}/events", headers=headers) as replay:
            stored = await EventStream(replay).read()

    assert run["status"] == "completed", run
    assert run["resumes"] == 0  # a decision is no crash
    assert run["messages"][-1]["content"] == "Paid."
    assert run["approvals"][0]["decidedBy"] == "acme-app/alice"
    assert ledger.started("send_payment") == 1
    assert ledger.completed("send_payment") == [PAYMENT]
    assert list(dict.fromkeys(kinds(stored)))[2:] == [
        "approval_required",
        "approval_decided",
        "tool_result",
        "text",
        "done",
    ]
    assert stored[-1][2]["finishReason"] == "stop"


async def test_a_run_whose_deciding_replica_dies_mid_call_is_taken_over_with_its_decisions_kept(
    upstreams: Upstreams, tmp_path: Path, own_postgres_url: str
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    refund = {"amount": 7}
    llm.push(tool_calls(("call_pay", "send_payment", PAYMENT), ("call_refund", "send_payment", refund)), text("Done."))
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE)
    headers = as_caller(ACME_KEY)

    async with (
        replica(upstreams, own_postgres_url, tmp_path / "a.log", callers_file=callers) as a,
        replica(upstreams, own_postgres_url, tmp_path / "b.log", callers_file=callers) as b,
    ):
        async with a.http.stream("POST", "/api/v1/agent/run", json=_body("Pay 42."), headers=headers) as response:
            seen = await EventStream(response).read(until=lambda events: kinds(events).count("approval_required") == 2)
        run_id = seen[0][2]["runId"]  # its client left: the run waits on
        decisions = [
            {"toolCallId": "call_pay", "approve": True},
            {"toolCallId": "call_refund", "approve": False, "message": "not this one"},
        ]
        decided = await b.http.post(
            f"/api/v1/agent/runs/{run_id}/approvals", json={"decisions": decisions}, headers=headers
        )
        assert decided.status_code == 200, decided.text
        with anyio.fail_after(TAKEOVER_SECONDS):
            await ledger.wait_for_state("send_payment", PAYMENT, 1, "started")
        await b.kill()  # mid-payment: whether it was paid is unknown
        a.http.headers.update(headers)
        run = await wait_for_run(a.http, run_id, ended, within=TAKEOVER_SECONDS)

    assert run["status"] == "completed", run
    assert run["resumes"] == 1
    results = {m["toolCallId"]: m["content"] for m in run["messages"] if m["role"] == "tool"}
    assert results == {"call_pay": UNKNOWN_OUTCOME, "call_refund": "Not approved: not this one"}
    # The model is told both, as the error results they are.
    assert tool_messages(llm.requests[-1]["messages"]) == {key: f"Error: {value}" for key, value in results.items()}
    assert ledger.started("send_payment") == 1  # never made twice, the denied one never


async def test_a_denied_call_is_never_made_and_the_model_is_told_why_on_the_stream_kept_open(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(
        tool_calls(("call_look", "get_status", {"key": "order-1"}), ("call_pay", "send_payment", PAYMENT)),
        text("I did not pay."),
    )
    ledger.open("get_status", {"key": "order-1"})
    async with _sqlite_replica(upstreams, tmp_path) as a:
        headers = as_caller(ACME_KEY)
        async with a.http.stream("POST", "/api/v1/agent/run", json=_body("Look, then pay."), headers=headers) as r:
            stream = EventStream(r)
            seen = await stream.read(until=_approvals_seen)
            run_id = seen[0][2]["runId"]
            # The call that needs no approval ran in the same round, before the run began to wait.
            assert "tool_result" in kinds(seen)
            decision = {"decisions": [{"toolCallId": "call_pay", "approve": False, "message": "too risky"}]}
            denied = await a.http.post(f"/api/v1/agent/runs/{run_id}/approvals", json=decision, headers=headers)
            assert denied.status_code == 200, denied.text
            with anyio.fail_after(TAKEOVER_SECONDS):
                rest = await stream.read()
        run = (await a.http.get(f"/api/v1/agent/runs/{run_id}", headers=headers)).json()

    assert list(dict.fromkeys(kinds(rest))) == ["approval_decided", "tool_result", "text", "done"]
    assert rest[0][2] == {
        "type": "approval_decided",
        "runId": run_id,
        "toolCallId": "call_pay",
        "approve": False,
        "message": "too risky",
        "decidedBy": "acme-app",
    }
    assert rest[1][2]["content"] == "Not approved: too risky"
    assert rest[1][2]["isError"] is True
    assert ledger.started("send_payment") == 0
    # As the OpenAI adapter sends an error result.
    assert tool_messages(llm.requests[1]["messages"])["call_pay"] == "Error: Not approved: too risky"
    assert run["status"] == "completed"
    assert run["approvals"][0]["status"] == "denied"


async def test_a_wait_that_runs_out_denies_the_call_and_the_wait_is_not_taken_from_the_runs_deadline(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    ledger, llm = upstreams.ledger, upstreams.llm
    llm.push(tool_calls(("call_pay", "send_payment", PAYMENT)), text("Nobody approved the payment."))
    # The run may take 1.5 s; it waits for 2 s, then still has what it had left when it began to wait.
    body = _body("Pay 42.", stream=False, deadlineSeconds=1.5)

    async with _sqlite_replica(upstreams, tmp_path) as a:
        with anyio.fail_after(TAKEOVER_SECONDS):
            response = await a.http.post("/api/v1/agent/run", json=body, headers=as_caller(HASTY_KEY))
        run_id = response.headers["X-Agent-Run-Id"]
        run = (await a.http.get(f"/api/v1/agent/runs/{run_id}", headers=as_caller(HASTY_KEY))).json()

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["finishReason"] == "stop"
    assert answer["message"]["content"] == "Nobody approved the payment."
    results = {m["toolCallId"]: m["content"] for m in answer["messages"] if m["role"] == "tool"}
    assert results == {"call_pay": "Not approved: no decision in time"}
    assert ledger.started("send_payment") == 0
    [approval] = run["approvals"]
    assert (approval["status"], approval["message"], approval.get("decidedBy")) == (
        "denied",
        "no decision in time",
        None,
    )
    assert run["resumes"] == 0


async def test_a_run_that_waited_answers_stream_false_with_its_output_and_warnings(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    llm = upstreams.llm
    llm.push(tool_calls(("call_pay", "send_payment", PAYMENT)), text(json.dumps(PARIS)))
    city = {"type": "json_schema", "json_schema": {"name": "city_facts", "schema": CITY_SCHEMA, "strict": True}}
    # gpt-4o cannot reason: the control is dropped and the answer warns of it.
    body = _body("Pay 42, then name a city.", stream=False, responseFormat=city, reasoning={"effort": "high"})

    async with _sqlite_replica(upstreams, tmp_path) as a:
        with anyio.fail_after(TAKEOVER_SECONDS):
            response = await a.http.post("/api/v1/agent/run", json=body, headers=as_caller(HASTY_KEY))

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["output"] == PARIS
    [warning] = answer["warnings"]
    assert "reasoning" in warning


async def test_cancelling_a_waiting_run_ends_it_at_once_with_its_held_call_answered(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    llm = upstreams.llm
    llm.push(tool_calls(("call_pay", "send_payment", PAYMENT)))
    async with _sqlite_replica(upstreams, tmp_path) as a:
        headers = as_caller(ACME_KEY)
        async with a.http.stream("POST", "/api/v1/agent/run", json=_body("Pay 42."), headers=headers) as r:
            stream = EventStream(r)
            seen = await stream.read(until=_approvals_seen)
            run_id = seen[0][2]["runId"]
            cancelled = await a.http.post(f"/api/v1/agent/runs/{run_id}/cancel", headers=headers)
            with anyio.fail_after(TAKEOVER_SECONDS):
                rest = await stream.read()
        run = (await a.http.get(f"/api/v1/agent/runs/{run_id}", headers=headers)).json()
        conversation_free = await a.http.post(
            f"/api/v1/agent/runs/{run_id}/approvals",
            json={"decisions": [{"toolCallId": "call_pay", "approve": True}]},
            headers=headers,
        )

    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert kinds(rest) == ["done"]
    assert rest[0][2]["finishReason"] == "cancelled"
    assert conversation_free.status_code == 409
    held = run["messages"][-1]
    assert (held["toolCallId"], held["content"], held["isError"]) == ("call_pay", CANCELLED_CALL, True)
    assert run["approvals"][0]["status"] == "denied"
    assert upstreams.ledger.started("send_payment") == 0


async def test_the_openai_front_never_offers_a_tool_that_would_wait_for_approval(
    upstreams: Upstreams, tmp_path: Path
) -> None:
    llm = upstreams.llm
    llm.push(text("Hello."))
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}

    forced = {**body, "tool_choice": {"type": "function", "function": {"name": "send_payment"}}}

    async with _sqlite_replica(upstreams, tmp_path) as a:
        response = await a.http.post("/v1/chat/completions", json=body, headers=as_caller(ACME_KEY))
        refused = await a.http.post("/v1/chat/completions", json=forced, headers=as_caller(ACME_KEY))

    # A choice of a tool left out is refused here, not sent on for the provider to refuse.
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid_request"
    assert "approval" in refused.json()["error"]["message"]
    assert response.status_code == 200, response.text
    offered = {entry["function"]["name"] for entry in llm.requests[-1]["tools"]}
    assert "send_payment" not in offered  # acme's approval rule: an OpenAI client could never approve it
    assert {"get_status", "set_status"} <= offered
