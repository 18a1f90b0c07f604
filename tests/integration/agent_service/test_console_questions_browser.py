"""The console's faces of issue 33 in a real browser: a tool's question (``input_required``) as a form built from its
requested schema, answered with Accept / Decline / Cancel; "Connect <server>" on a tool card whose server needs a
consent (``authorization_required``); servers' OAuth state in the Servers section (admins), and a person's own
connections in the Connections section.

Chromium is Debian's (``/usr/bin/chromium``), driven headless by Playwright, as in test_console_browser.py. The page
is the real console; the agent API behind it is scripted (``support/scripted_agent.py``): each test queues a run's
events as the wire models say them and answers what the page posts, and reads what the page sent.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from suite_common.errors import ApiError
from suite_common.wire import (
    InputsRequest,
    RunAuthorizationRequired,
    RunDone,
    RunEvent,
    RunInputDecided,
    RunInputRequired,
    RunText,
    RunToolCall,
    RunToolResult,
    Usage,
)
from support.console_browser import CHROMIUM, WAIT_MS, chromium, open_console, send
from support.scripted_agent import RecordedRequest, ScriptedAgent, ScriptedRun
from support.servers import serve_app

pytestmark = pytest.mark.anyio

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (make test installs Debian's package)", allow_module_level=True)

RUN = "run-scripted-1"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "minLength": 1},
        "age": {"type": "integer", "minimum": 0, "default": 30},
        "ratio": {"type": "number", "title": "Ratio"},
        "subscribe": {"type": "boolean", "default": True, "description": "Send me the <b>news</b>"},
        "color": {"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"], "default": "green"},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
    },
    "required": ["name", "color"],
}


@dataclass
class Console:
    agent: ScriptedAgent
    browser: Browser
    errors: list[str]

    async def open(self) -> Page:
        return await open_console(self.browser, self.agent.base_url, self.errors)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


@pytest.fixture
async def console(browser: Browser) -> AsyncIterator[Console]:
    agent = ScriptedAgent()
    async with serve_app(agent.app) as url:
        agent.base_url = url
        running = Console(agent, browser, errors=[])
        yield running
    assert not running.errors, f"the page threw or broke its policy: {running.errors}"


def question(input_id: str, schema: dict[str, Any], message: str = "Who are you?") -> RunInputRequired:
    return RunInputRequired(
        run_id=RUN,
        iteration=1,
        input_id=input_id,
        tool_call_id="call_1",
        name="register",
        server="signup",
        message=message,
        requested_schema=schema,
        expires_at="2030-01-01T00:00:00Z",
    )


def decided(input_id: str, action: str, by: str | None = "console") -> RunInputDecided:
    return RunInputDecided(run_id=RUN, input_id=input_id, tool_call_id="call_1", action=action, decided_by=by)  # type: ignore[arg-type]


def the_end(result: str, answer: str) -> list[RunEvent]:
    return [
        RunToolResult(
            run_id=RUN,
            iteration=1,
            tool_call_id="call_1",
            name="register",
            content=result,
            is_error=False,
            duration_ms=12.0,
        ),
        RunText(run_id=RUN, iteration=2, delta=answer),
        RunDone(run_id=RUN, finish_reason="stop", iterations=2, usage=Usage(input_tokens=1, output_tokens=1)),
    ]


CALL = RunToolCall(run_id=RUN, iteration=1, id="call_1", name="register", arguments={})


def posted_inputs(agent: ScriptedAgent) -> list[Any]:
    return [r.body for r in agent.requests if r.path == f"/api/v1/agent/runs/{RUN}/inputs"]


def tool_card(page: Page) -> Locator:
    return page.locator(".tool-card[data-tool-call-id='call_1']")


async def test_a_question_is_a_form_of_its_schema_with_defaults_filled_and_accept_posts_the_answer(
    console: Console,
) -> None:
    console.agent.first_events = [CALL, question("in-1", SCHEMA)]
    console.agent.after_inputs = lambda run, request: [decided("in-1", "accept"), *the_end("registered", "Done.")]
    page = await console.open()
    await send(page, "sign me up")

    card = tool_card(page)
    form = card.locator("form.question")
    await expect(card).to_have_class(re.compile(r"\bwaiting\b"), timeout=WAIT_MS)
    await expect(card.locator(".tool-status")).to_have_text("waiting for your answer")
    await expect(form.locator(".question-lead")).to_contain_text("signup (tool register) asks:")
    await expect(form.locator(".question-message")).to_have_text("Who are you?")
    # Every property a field, titled (else named), the required ones marked, the defaults filled.
    labels = form.locator(".question-label")
    await expect(labels).to_have_text(["Your name (required)", "age", "Ratio", "subscribe", "color (required)", "size"])
    await expect(form.get_by_label("Your name")).to_have_value("")
    await expect(form.get_by_label("age")).to_have_value("30")
    await expect(form.get_by_label("subscribe")).to_be_checked()
    await expect(form.get_by_label("subscribe")).to_have_accessible_description("Send me the <b>news</b>")
    await expect(form.get_by_label("color")).to_have_value("green")
    await expect(form.get_by_label("size")).to_have_value("")  # not required, no default: nothing chosen
    await expect(form.locator("b")).to_have_count(0)  # text, never HTML

    # The browser refuses an Accept without the required name: nothing is posted.
    await form.get_by_role("button", name="Accept").click()
    assert await form.get_by_label("Your name").evaluate("input => input.validity.valueMissing")
    await form.get_by_label("Your name").fill("Ada")
    await form.get_by_label("age").fill("41")
    await form.get_by_label("subscribe").uncheck()
    await form.get_by_label("color").select_option("Red")
    await form.get_by_role("button", name="Accept").click()

    await expect(card.locator(".question-decision")).to_have_text("Answered by console.", timeout=WAIT_MS)
    await expect(form).to_have_count(0)  # input_decided took the form away
    await expect(card.locator(".tool-result")).to_have_text("registered")
    await expect(page.locator(".answer")).to_have_text("Done.")
    await expect(card).not_to_have_class(re.compile(r"\bwaiting\b"))
    assert posted_inputs(console.agent) == [
        {
            "inputs": [
                {
                    "inputId": "in-1",
                    "action": "accept",
                    "content": {"name": "Ada", "age": 41, "subscribe": False, "color": "red"},
                }
            ]
        }
    ]


async def test_a_refused_answer_is_said_on_the_form_then_decline_and_cancel_send_no_content(console: Console) -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    console.agent.first_events = [CALL, question("in-1", schema, "The code from your phone?")]

    def answer(run: ScriptedRun, request: InputsRequest) -> list[RunEvent]:
        given = request.inputs[0]
        if given.action == "accept":
            raise ApiError(400, "invalid_input", "code: 'abc' does not match '^[0-9]+$'")
        if given.input_id == "in-1":  # declined: the server asks again, another question of the same call
            return [decided("in-1", "decline"), question("in-2", schema, "Then a backup code?")]
        return [decided("in-2", "cancel"), *the_end("cancelled by the user", "Nothing done.")]

    console.agent.after_inputs = answer
    page = await console.open()
    await send(page, "log me in")
    card = tool_card(page)
    form = card.locator("form.question")
    await form.get_by_label("code").fill("abc")
    await form.get_by_role("button", name="Accept").click()

    await expect(form.locator(".form-error")).to_have_text(
        "The answer does not fit the question: code: 'abc' does not match '^[0-9]+$'", timeout=WAIT_MS
    )
    await expect(form.get_by_role("button", name="Decline")).to_be_enabled()  # still to be answered
    await form.get_by_role("button", name="Decline").click()
    await expect(card.locator(".question-decision")).to_have_text(["Declined by console."], timeout=WAIT_MS)
    await expect(form.locator(".question-message")).to_have_text("Then a backup code?", timeout=WAIT_MS)
    await form.get_by_role("button", name="Cancel").click()

    await expect(card.locator(".question-decision")).to_have_text(
        ["Declined by console.", "Cancelled by console."], timeout=WAIT_MS
    )
    await expect(page.locator(".answer")).to_have_text("Nothing done.", timeout=WAIT_MS)
    assert [body["inputs"] for body in posted_inputs(console.agent)] == [
        [{"inputId": "in-1", "action": "accept", "content": {"code": "abc"}}],
        [{"inputId": "in-1", "action": "decline"}],
        [{"inputId": "in-2", "action": "cancel"}],
    ]


async def test_connect_on_a_tool_card_asks_the_persons_own_consent_and_opens_it_in_a_window_of_its_own(
    console: Console,
) -> None:
    """A per-user server's Connect asks ``POST /api/v1/agent/connections/{server}/authorize`` itself (the consent is
    bound to this browser), never opening a URL an event carried; a machine server's card says an administrator
    must connect it, with no button."""
    agent = console.agent
    agent.connections = []
    agent.authorize_answers = {
        "crm": {"authorizationUrl": agent.consent_url("crm")},
        "evil": {"authorizationUrl": "javascript:alert(1)"},
    }
    agent.first_events = [
        CALL,
        RunAuthorizationRequired(
            run_id=RUN, iteration=1, tool_call_id="call_1", name="register", server="crm", tokens="perUser"
        ),
        RunToolCall(run_id=RUN, iteration=1, id="call_2", name="lookup", arguments={}),
        RunAuthorizationRequired(
            run_id=RUN, iteration=1, tool_call_id="call_2", name="lookup", server="evil", tokens="perUser"
        ),
        RunToolResult(
            run_id=RUN,
            iteration=1,
            tool_call_id="call_2",
            name="lookup",
            content="evil needs authorization",
            is_error=True,
            duration_ms=1.0,
        ),
        RunToolCall(run_id=RUN, iteration=1, id="call_3", name="invoice", arguments={}),
        # A machine server (an older event may still carry the gateway's URL): never a button, never the URL.
        RunAuthorizationRequired(
            run_id=RUN,
            iteration=1,
            tool_call_id="call_3",
            name="invoice",
            server="billing",
            tokens="machine",
            authorization_url=agent.consent_url("billing"),
        ),
        RunToolResult(
            run_id=RUN,
            iteration=1,
            tool_call_id="call_3",
            name="invoice",
            content="billing is not connected",
            is_error=True,
            duration_ms=1.0,
        ),
        *the_end("crm needs the user's authorization", "Connect crm first."),
    ]
    page = await console.open()
    await expect(page.locator("#connections-note")).to_have_text("No server acts as you yet.")
    await send(page, "find my deals")

    card = tool_card(page)
    await expect(card.locator(".authorization-text")).to_contain_text("crm needs your authorization", timeout=WAIT_MS)
    async with page.context.expect_page() as opened:
        await card.get_by_role("button", name="Connect crm").click()
    consent = await opened.value
    await expect(consent.locator("p")).to_have_text("Consent for crm", timeout=WAIT_MS)
    assert consent.url == agent.consent_url("crm")
    assert await consent.evaluate("() => window.opener") is None  # it cannot reach the console's page
    await expect(card.locator(".consent-link")).to_have_attribute("href", agent.consent_url("crm"))
    await consent.close()
    assert RecordedRequest("POST", "/api/v1/agent/connections/crm/authorize", {}, None) in agent.requests

    # A URL that is not a web address is never opened.
    other = page.locator(".tool-card[data-tool-call-id='call_2']")
    await other.get_by_role("button", name="Connect evil").click()
    await expect(other.locator(".consent-note")).to_have_text(
        "The authorization URL is not a web address; it was not opened."
    )
    assert len(page.context.pages) == 1

    # A machine server: an administrator connects it; the person is given nothing to click.
    machine = page.locator(".tool-card[data-tool-call-id='call_3']")
    await expect(machine.locator(".authorization-text")).to_have_text(
        "billing is not connected: this call was not made. An administrator must connect billing.", timeout=WAIT_MS
    )
    await expect(machine.locator(".authorization button")).to_have_count(0)
    await expect(machine.locator(".authorization a")).to_have_count(0)

    # The Connections section offers the servers this page was refused for, through the person's own consent
    # (never the machine server's).
    wanted = page.locator("#connections .connection-card[data-server='crm']")
    await expect(wanted.locator(".auth-state")).to_have_text("not connected")
    await expect(page.locator("#connections .connection-card[data-server='billing']")).to_have_count(0)
    agent.requests.clear()
    async with page.context.expect_page() as opened_again:
        await wanted.get_by_role("button", name="Connect crm").click()
    assert (await opened_again.value).url == agent.consent_url("crm")
    assert RecordedRequest("POST", "/api/v1/agent/connections/crm/authorize", {}, None) in agent.requests
    assert not [r for r in agent.requests if "billing" in r.path]


async def test_a_person_sees_and_disconnects_their_own_connections(console: Console) -> None:
    console.agent.connections = [
        {"server": "crm", "user": "alice", "scopes": ["deals.read"], "updatedAt": "2026-01-02T03:04:05Z"},
        {"server": "docs", "user": "alice", "scopes": []},
    ]
    page = await console.open()
    panel = page.locator("#connections-panel")
    await expect(panel).to_be_visible()
    await expect(page.locator("#connections-note")).to_have_text("Connected to 2 servers as you.")
    crm = panel.locator(".connection-card[data-server='crm']")
    await expect(crm).to_contain_text("Scopes: deals.read")

    await crm.get_by_role("button", name="Disconnect crm").click()

    await expect(panel.locator(".connection-card")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator("#connections-note")).to_have_text("Connected to 1 server as you.")
    assert RecordedRequest("DELETE", "/api/v1/agent/connections/crm", {}, None) in console.agent.requests


async def test_a_person_is_offered_the_per_user_servers_they_have_not_connected(console: Console) -> None:
    console.agent.connections = []
    console.agent.available = ["docs"]
    console.agent.authorize_answers = {"docs": {"authorizationUrl": console.agent.consent_url("docs")}}
    page = await console.open()
    panel = page.locator("#connections-panel")
    await expect(page.locator("#connections-note")).to_have_text("No server acts as you yet.")

    async with page.context.expect_page() as popup:
        await panel.get_by_role("button", name="Connect docs").click()
    await expect(await popup.value).to_have_title("Consent")
    assert RecordedRequest("POST", "/api/v1/agent/connections/docs/authorize", {}, None) in console.agent.requests


async def test_an_admin_connects_a_machine_server_and_disconnects_one_person_of_a_per_user_server(
    console: Console,
) -> None:
    agent = console.agent
    base = {"url": "https://mcp.example.com/mcp", "transport": "streamable-http", "enabled": True, "toolCount": 0}
    agent.servers = [
        {**base, "name": "crm", "state": "ready", "authorization": {"tokens": "machine", "state": "required"}},
        {**base, "name": "docs", "state": "ready", "authorization": {"tokens": "perUser", "state": "required"}},
        {**base, "name": "plain", "state": "ready"},
    ]
    agent.admin_connections = [{"server": "docs", "user": "alice"}, {"server": "docs", "user": "bob"}]
    agent.authorize_answers = {"crm": {"authorizationUrl": agent.consent_url("crm")}}
    page = await console.open()
    crm = page.locator("#servers .server-card[data-server='crm']")
    docs = page.locator("#servers .server-card[data-server='docs']")
    await expect(crm.locator(".auth-state")).to_have_text("authorization required")
    await expect(docs.locator(".auth-state")).to_have_text("each person connects")
    await expect(docs).to_contain_text("2 people connected")
    await expect(page.locator("#servers .server-card[data-server='plain'] .server-authorization")).to_have_count(0)

    async with page.context.expect_page() as opened:
        await crm.get_by_role("button", name="Connect crm").click()
    assert (await opened.value).url == agent.consent_url("crm")
    assert RecordedRequest("POST", "/api/v1/admin/mcp-servers/crm/authorize", {}, None) in agent.requests

    # The consent came back (the gateway holds the tenant's token now): the card says so, and offers Disconnect.
    agent.servers[0]["authorization"] = {"tokens": "machine", "state": "authorized"}
    agent.admin_connections.append({"server": "crm", "user": ""})
    await page.locator("#servers-refresh").click()
    await expect(crm.locator(".auth-state")).to_have_text("authorized", timeout=WAIT_MS)
    await expect(crm.get_by_role("button", name="Connect crm", exact=True)).to_have_count(0)
    await crm.get_by_role("button", name="Disconnect crm").click()
    await expect(crm.locator(".auth-state")).to_have_text("authorization required", timeout=WAIT_MS)
    await expect(crm.get_by_role("button", name="Disconnect crm")).to_have_count(0)

    await docs.get_by_role("button", name="Disconnect bob from docs").click()
    await expect(docs).to_contain_text("1 person connected", timeout=WAIT_MS)
    deletes = [r.query for r in agent.requests if r.method == "DELETE"]
    assert deletes == [{"server": "crm"}, {"server": "docs", "user": "bob"}]


async def test_without_the_endpoints_the_sections_stay_hidden_and_the_console_works(console: Console) -> None:
    # agent.servers, .connections and .admin_connections unset: 403 and 404 answers, as from an older agent-service.
    console.agent.first_events = [RunText(run_id=RUN, iteration=1, delta="Hello."), *the_end("", "")[2:]]
    page = await console.open()
    await expect(page.locator("#servers-panel")).to_be_hidden()
    await expect(page.locator("#connections-panel")).to_be_hidden()
    await send(page, "hello")
    await expect(page.locator(".answer")).to_have_text("Hello.", timeout=WAIT_MS)
