"""A tool call whose OAuth server holds no token for whom the run acts (the gateway's ``authorization_required``):
the run tells the person where to consent (``authorization_required``), the model reads why nothing was called, the
call is audited ``refused`` and never cached, and the run goes on."""

from __future__ import annotations

import httpx
import pytest

from agent_service.engine.tool_cache import MemoryStore, ToolCache, ToolCachePolicy
from agent_service.infra.telemetry import RunTelemetry
from suite_common.wire import RunAuthorizationRequired, RunError, RunToolResult
from support.scripted import Scripted, answer, call_tools
from unit.agent_service.test_loop import Recorder, echo
from unit.agent_service.test_tool_call_audit import Steps, plan

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("stream_text", [True, False], ids=["streamed", "json"])
async def test_a_call_needing_consent_asks_the_person_and_tells_the_model_and_the_run_goes_on(
    stream_text: bool,
) -> None:
    turn = call_tools(("c-crm", "crm_find", {"q": "x"}), ("c-echo", "echo", {"q": "y"}))
    scripted = Scripted([turn, answer("please connect the CRM")], {"echo": echo}, consent={"crm_find": "crm"})
    events, steps = Recorder(), Steps()
    outcome = await scripted.loop().run(plan("crm_find", "echo"), events, stream_text=stream_text, recorder=steps)
    assert outcome.error is None
    assert outcome.finish_reason == "stop"
    assert not events.of(RunError)
    [asked] = events.of(RunAuthorizationRequired)
    assert (asked.run_id, asked.iteration, asked.tool_call_id, asked.name, asked.server) == (
        "run_audit",
        1,
        "c-crm",
        "crm_find",
        "crm",
    )
    # The per-user consent is asked by the person's own browser (bound to it): no state-bearing URL in the event.
    assert (asked.tokens, asked.authorization_url) == ("perUser", None)
    assert "state=" not in asked.model_dump_json()
    results = {result.tool_call_id: result for result in events.of(RunToolResult)}
    assert results["c-crm"].is_error
    assert "needs the user's authorization" in results["c-crm"].content
    assert "state=" not in results["c-crm"].content  # the URL is the person's, not the model's
    assert (results["c-echo"].is_error, results["c-echo"].content) == (False, "echo y")
    # The event comes before the call's result, so a console can show "Connect" as the result arrives.
    kinds = [type(event) for event in events.events]
    assert kinds.index(RunAuthorizationRequired) < kinds.index(RunToolResult)
    assert sorted(steps.rows()) == [
        ("c-crm", 1, 0, "s", "crm_find", "refused"),
        ("c-echo", 1, 1, "s", "echo", "ok"),
    ]
    # The model's next turn reads the refusal as the call's tool result.
    sent = scripted.completion_requests[1]["messages"]
    [tool_message] = [message for message in sent if message.get("toolCallId") == "c-crm"]
    assert "needs the user's authorization" in str(tool_message["content"])


async def test_a_machine_server_needing_consent_is_an_admins_to_connect_and_no_url_reaches_the_run() -> None:
    """A machine server's token serves everyone of the tenant: the gateway's consent URL must never reach an end
    user, whose click would make their own account the token every run uses."""
    turn = call_tools(("c-crm", "crm_find", {"q": "x"}))
    scripted = Scripted([turn, answer("ask an admin")], {}, consent={"crm_find": "crm"}, machine={"crm"})
    events = Recorder()
    outcome = await scripted.loop().run(plan("crm_find"), events, stream_text=True)
    assert outcome.error is None
    [asked] = events.of(RunAuthorizationRequired)
    assert (asked.server, asked.tokens, asked.authorization_url) == ("crm", "machine", None)
    assert all("state=" not in event.model_dump_json() for event in events.events)
    [result] = events.of(RunToolResult)
    assert result.is_error
    assert "only an administrator can connect it" in result.content


async def test_a_refusal_for_consent_is_never_cached() -> None:
    scripted = Scripted(
        [call_tools(("c1", "crm_find", {"q": "x"})), call_tools(("c2", "crm_find", {"q": "x"})), answer("done")],
        {},
        consent={"crm_find": "crm"},
    )
    loop = scripted.loop()
    loop.dispatch.tool_cache = ToolCache(
        ToolCachePolicy(60, {}), MemoryStore(10), b"p" * 32, key_prefix="p:", telemetry=RunTelemetry.disabled()
    )
    events, steps = Recorder(), Steps()
    await loop.run(plan("crm_find"), events, stream_text=False, recorder=steps)
    assert [(row.tool_call_id, row.status) for row in steps.answered] == [("c1", "refused"), ("c2", "refused")]
    assert len(scripted.call_tool_requests) == 2  # asked the gateway again: the person may have consented since
    assert len(events.of(RunAuthorizationRequired)) == 2


async def test_a_401_without_the_consent_body_is_still_the_shared_secrets_failure() -> None:
    """Only the gateway's ``authorization_required`` body means consent: a bare 401 is the shared secret."""
    scripted = Scripted([call_tools(("c1", "crm_find", {})), answer("never")], {})

    async def bare_401(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/mcp/v1/tools/call-tool":
            return httpx.Response(401, json={"error": {"code": "unauthorized", "message": "wrong secret"}})
        return await Scripted.handle(scripted, request)

    scripted.handle = bare_401  # type: ignore[method-assign]
    outcome = await scripted.loop().run(plan("crm_find"), Recorder(), stream_text=False)
    assert outcome.error is not None
    assert outcome.error.code == "tools_unauthorized"
