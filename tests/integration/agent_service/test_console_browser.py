"""The agent console (``/console``) in a real browser, against the real services and the ``demo`` model.

Chromium is Debian's (``/usr/bin/chromium``, installed by ``make test`` when missing), driven headless by
Playwright. The tools are real MCP servers behind a real mcp-client-service: the RAG tool over stdio
(``search_documents`` over a folder of Markdown) and the echo server over streamable HTTP, whose ``gate`` tool
holds a call open until the test opens it: a run stays in flight for as long as a test needs (Stop, reload).
The demo model calls the tools that share the most words with the message, with the message as their string
arguments; so ``gate`` is called with the message as its tag.

The README's screenshots come from ``docs/console_screenshots.py``, against ``make run``.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, Page, Route, async_playwright, expect
from pydantic import SecretStr

from agent_service.api.suggestions import load_suggestions
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support import fake_openai
from support.caller_keys import key_entry
from support.console_browser import CHROMIUM, WAIT_MS, open_console, run_bodies, send
from support.fake_openai import ScriptedOpenAI
from support.mcp_gateway import Gateway, echo_http_server, running_gateway
from support.servers import serve_app
from support.stacks import running_agent

pytestmark = pytest.mark.anyio


DOCS = {
    "deadlines.md": "# Deadlines\n\nEvery run has a wall-clock deadline of 120 seconds. When it passes, "
    "the run stops with finishReason deadline and every in-flight call is cancelled.\n",
    "gardening.md": "# Tomatoes\n\nTomatoes need six hours of sun and deep watering twice a week.\n",
}

SEARCH = "Search the documents: what is the wall-clock deadline?"

CONSOLE_KEY = "console-" + uuid.uuid4().hex

CALLERS_FILE = f"""
[personas.brief]
description = "Short answers"
system_prompt = "Answer in one sentence."

[tenants.acme]
system_prompt = "You answer for ACME."

[tenants.acme.personas.support]
description = "Support desk"
system_prompt = "You are ACME's support desk."
model = "demo"

{key_entry("console", "acme", CONSOLE_KEY)}
"""

CARDS = """
[[suggestions]]
title = "Deadlines"
prompt = "Search the documents: what is the wall-clock deadline?"

[[suggestions]]
title = "Tomatoes"
prompt = "Search the documents: how much sun do tomatoes need?"
"""

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (make test installs Debian's package)", allow_module_level=True)


@dataclass
class Stack:
    agent_url: str
    gateway: Gateway
    browser: Browser
    llm: ScriptedOpenAI
    unstored_agent_url: str
    """An agent-service that keeps no runs (``AGENT_DATABASE_URL`` empty), over the same services."""
    persona_agent_url: str
    """An agent-service with a callers file (personas, a tenant's system prompt; ``CONSOLE_KEY``) and suggestion
    cards of its own (``CARDS``), over the same services."""


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("console")
    docs = root / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    (root / "callers.toml").write_text(CALLERS_FILE)
    (root / "cards.toml").write_text(CARDS)
    rag = {
        "command": sys.executable,
        "args": ["-m", "mcp_rag_tool", "--transport", "stdio"],
        "env": {"RAG_DOCS_PATHS": json.dumps([str(docs)]), "HOME": os.environ.get("HOME", "/")},
    }
    llm = ScriptedOpenAI()  # a model completion-service routes but does not list: picked with "Other…"
    async with serve_app(llm.app) as llm_url:
        completion_settings = CompletionSettings(
            openai_base_url=f"{llm_url}/v1", openai_api_key=SecretStr("test-key"), max_retries=0
        )
        async with _services(root, rag, completion_settings, llm) as stack:
            yield stack


@asynccontextmanager
async def _services(
    root: Path, rag: dict[str, Any], completion_settings: CompletionSettings, llm: ScriptedOpenAI
) -> AsyncIterator[Stack]:
    async with (
        echo_http_server("tools") as tools_url,
        running_gateway({"rag": rag, "tools": {"url": tools_url}}) as gateway,
        serve_app(create_completion_app(completion_settings)) as completion_url,
        running_agent(completion_url, gateway, database_url=f"sqlite:///{root}/runs.db") as agent_url,
        running_agent(completion_url, gateway, database_url="") as unstored_agent_url,
        running_agent(
            completion_url,
            gateway,
            database_url=f"sqlite:///{root}/persona-runs.db",
            callers_file=root / "callers.toml",
            console_suggestions_file=root / "cards.toml",
        ) as persona_agent_url,
        async_playwright() as playwright,
    ):
        with anyio.fail_after(60):
            await gateway.wait_until_ready("rag", "tools")
        # One search before any test, as make run does before its banner: the RAG tool loads its embedding model on
        # the first search, which on a busy machine takes longer than a page's wait for a tool card's result.
        with anyio.fail_after(120):
            warm = await gateway.http.post(
                "/mcp/v1/tools/call-tool",
                json={"name": "search_documents", "arguments": {"query": "deadline"}},
                timeout=120,
            )
            assert warm.status_code == 200, warm.text
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield Stack(agent_url, gateway, browser, llm, unstored_agent_url, persona_agent_url)
        finally:
            await browser.close()


@pytest.fixture
async def page(stack: Stack) -> AsyncIterator[Page]:
    """A fresh tab (its own sessionStorage: a new conversation) on the console, loaded."""
    # The page runs under agent-service's Content-Security-Policy: anything inline would be refused, and said so.
    errors: list[str] = []
    page = await open_console(stack.browser, stack.agent_url, errors)
    await expect(page.locator("#model")).to_have_value("demo")
    yield page
    await page.context.close()
    assert not errors, f"the page threw or broke its policy: {errors}"


async def only_tools(page: Page, *names: str) -> None:
    """Switches every tool off with its server's switch, then the named ones on."""
    for server in await page.locator("#tools .server-switch").all():
        await server.check()  # from mixed to all on, then all off
        await server.uncheck()
    for name in names:
        await page.locator(f"#tools input[name=tool][value='{name}']").check()


async def open_gate(stack: Stack, tag: str) -> None:
    reply = await stack.gateway.http.post(
        "/mcp/v1/tools/call-tool", json={"name": "open_gate", "arguments": {"tag": tag}}
    )
    assert reply.status_code == 200, reply.text


async def gate_started(stack: Stack, tag: str) -> None:
    """Returns once the ``gate`` (or ``hold``) call of ``tag`` has started on the echo server."""
    with anyio.fail_after(WAIT_MS / 1000):
        reply = await stack.gateway.http.post(
            "/mcp/v1/tools/call-tool", json={"name": "await_hold", "arguments": {"tag": tag, "event": "started"}}
        )
    assert reply.status_code == 200, reply.text


async def test_console_is_served_with_its_files_and_a_strict_policy(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.agent_url) as http:
        page = await http.get("/console")
        script = await http.get("/console/console.js")
        style = await http.get("/console/console.css")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "/console/console.js" in page.text
    assert script.status_code == 200
    assert "renderMarkdown" in script.text
    assert style.status_code == 200
    assert "script-src 'self'" in page.headers.get("content-security-policy", "")


async def test_a_search_shows_the_tool_card_its_result_and_the_answer(stack: Stack, page: Page) -> None:
    bodies = run_bodies(page)
    await send(page, SEARCH)

    card = page.locator(".tool-card", has=page.locator(".tool-name", has_text="search_documents"))
    await expect(card).to_have_count(1, timeout=WAIT_MS)
    # Every tool is on at first, and the demo calls the one that fits best only: list_sources, which shares words
    # with the question too, is left alone.
    await expect(page.locator(".tool-card")).to_have_count(1)
    await expect(card.locator(".tool-arguments")).to_contain_text(SEARCH)
    await expect(card.locator(".tool-result")).to_contain_text("wall-clock deadline of 120 seconds", timeout=WAIT_MS)
    await expect(card).to_have_class("tool-card succeeded")
    await expect(card.locator(".tool-status")).to_contain_text("done ·")
    answer = page.locator(".answer")
    await expect(answer).to_contain_text("This is the demo model", timeout=WAIT_MS)
    await expect(answer).to_contain_text("search_documents")
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop")
    await expect(page.locator(".run-footer")).to_contain_text("out tokens")
    await expect(page.locator("#stop")).to_be_hidden()

    assert len(bodies) == 1
    assert bodies[0]["model"] == "demo"
    assert bodies[0]["onDisconnect"] == "continue"
    assert "tools" not in bodies[0]
    assert bodies[0]["conversationId"].startswith("console-")


async def test_a_tool_switched_off_is_not_called(stack: Stack, page: Page) -> None:
    bodies = run_bodies(page)
    await page.locator("#tools input[name=tool][value=search_documents]").uncheck()
    await send(page, SEARCH)

    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    await expect(page.locator(".tool-name", has_text="search_documents")).to_have_count(0)
    assert "search_documents" not in bodies[0]["tools"]
    assert "list_sources" in bodies[0]["tools"]


async def test_no_tool_switched_on_means_no_tool_call(stack: Stack, page: Page) -> None:
    bodies = run_bodies(page)
    await only_tools(page)
    await send(page, SEARCH)

    await expect(page.locator(".answer")).to_contain_text("You asked", timeout=WAIT_MS)
    await expect(page.locator(".tool-card")).to_have_count(0)
    assert bodies[0]["tools"] == []


async def test_stop_cancels_the_run_in_flight(stack: Stack, page: Page) -> None:
    tag = f"wait at the gate {uuid.uuid4().hex}"
    await only_tools(page, "gate")
    await send(page, tag)
    await gate_started(stack, tag)
    card = page.locator(".tool-card", has=page.locator(".tool-name", has_text="gate"))
    await expect(card).to_have_class("tool-card running", timeout=WAIT_MS)

    await page.locator("#stop").click()

    await expect(page.locator(".run-footer")).to_contain_text("finish: cancelled", timeout=WAIT_MS)
    await expect(card).to_have_class("tool-card failed")
    await expect(card.locator(".tool-status")).to_have_text("cancelled")
    await expect(page.locator("#stop")).to_be_hidden()
    await expect(page.locator("#send")).to_be_enabled()


async def test_a_reload_mid_run_re_attaches_and_shows_every_step_once(stack: Stack, page: Page) -> None:
    # An earlier run in the same conversation: it comes back from the store, the run in flight from its events.
    await only_tools(page)
    await send(page, "hello before the gate")
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    tag = f"wait at the gate {uuid.uuid4().hex}"
    await only_tools(page, "gate")
    await send(page, tag)
    await gate_started(stack, tag)
    await expect(page.locator(".tool-name", has_text="gate")).to_have_count(1, timeout=WAIT_MS)

    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator(".tool-card.running")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator("#stop")).to_be_visible()
    await open_gate(stack, tag)

    await expect(page.locator(".run-footer")).to_have_count(2, timeout=WAIT_MS)
    await expect(page.locator(".run-footer").last).to_contain_text("finish: stop")
    await expect(page.locator(".message.user")).to_have_text(["You" + "hello before the gate", "You" + tag])
    await expect(page.locator(".tool-card")).to_have_count(1)
    await expect(page.locator(".tool-result")).to_have_text(f"{tag} passed")
    await expect(page.locator(".answer")).to_have_count(2)
    await expect(page.locator(".answer").last).to_contain_text(f"gate: {tag} passed")


async def test_html_in_a_tool_result_is_shown_as_text_and_markdown_is_rendered(stack: Stack, page: Page) -> None:
    injected = "echo <img src=x onerror=\"document.body.dataset.pwned='yes'\"> and <b>bold</b>, **strong** `code`"
    await only_tools(page, "echo")
    await send(page, injected)

    await expect(page.locator(".tool-result")).to_have_text(injected, timeout=WAIT_MS)
    await expect(page.locator(".answer")).to_contain_text("<img src=x onerror=", timeout=WAIT_MS)
    await expect(page.locator("#transcript img")).to_have_count(0)
    await expect(page.locator("#transcript b")).to_have_count(0)
    # The answer quotes the result, and its Markdown is rendered after the escaping.
    await expect(page.locator(".answer strong")).to_have_text("strong")
    await expect(page.locator(".answer code")).to_have_text("code")
    assert await page.evaluate("document.body.dataset.pwned") is None


async def test_a_stored_conversation_is_listed_and_continued(stack: Stack, page: Page) -> None:
    bodies = run_bodies(page)
    await only_tools(page)
    await send(page, "first message of a listed conversation")
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    current = page.locator("#conversations button.current")
    await expect(current).to_have_count(1, timeout=WAIT_MS)
    conversation_id = await current.get_attribute("data-conversation-id")
    assert conversation_id == bodies[0]["conversationId"]

    await page.locator("#new-conversation").click()
    await expect(page.locator(".message")).to_have_count(0)
    await expect(current).to_have_count(0)
    await page.locator(f"#conversations button[data-conversation-id='{conversation_id}']").click()
    await expect(page.locator(".message.user")).to_have_text(["You" + "first message of a listed conversation"])
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop")

    await send(page, "second message")
    await expect(page.locator(".run-footer")).to_have_count(2, timeout=WAIT_MS)
    await expect(page.locator(".message.user")).to_have_count(2)
    assert bodies[1]["conversationId"] == conversation_id


async def test_a_failing_tool_is_shown_in_red(stack: Stack, page: Page) -> None:
    await only_tools(page, "fail")
    await send(page, "always fail please")

    card = page.locator(".tool-card", has=page.locator(".tool-name", has_text="fail"))
    await expect(card).to_have_class("tool-card failed", timeout=WAIT_MS)
    await expect(card.locator(".tool-result.error")).to_contain_text("always fail please")
    await expect(card.locator(".tool-result.error")).to_have_css("color", "rgb(179, 38, 30)")
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)


async def test_a_refused_run_shows_its_error(stack: Stack, page: Page) -> None:
    await page.locator("#model").select_option(label="Other…")
    await page.locator("#model-other").fill("m" * 300)  # longer than any model name may be: a 400
    await send(page, "hello")

    await expect(page.locator("#transcript [role=alert]")).to_contain_text("Error (invalid_request)", timeout=WAIT_MS)
    await expect(page.locator(".message.assistant")).to_have_count(0)
    await expect(page.locator("#send")).to_be_enabled()
    await expect(page.locator("#stop")).to_be_hidden()


async def test_an_error_event_ends_the_run_with_its_message(stack: Stack, page: Page) -> None:
    stack.llm.push(fake_openai.error(401))
    await page.locator("#model").select_option(label="Other…")
    await page.locator("#model-other").fill("gpt-4o")
    await only_tools(page)
    await send(page, "hello")

    alert = page.locator(".message.assistant [role=alert]")
    await expect(alert).to_contain_text("Error (auth_failed)", timeout=WAIT_MS)
    await expect(page.locator(".run-footer")).to_have_count(0)
    await expect(page.locator("#send")).to_be_enabled()


async def test_the_key_is_asked_once_on_a_401_and_kept_in_the_tab_only(stack: Stack) -> None:
    # agent-service has no caller keys yet: the browser plays an API that wants one (every call but the page's own
    # files answers 401 without ``Authorization: Bearer <key>``), in front of the real one.
    context = await stack.browser.new_context()
    page = await context.new_page()
    refused: list[str] = []

    async def guard(route: Route) -> None:
        if route.request.headers.get("authorization") == "Bearer caller-key-1":
            await route.continue_()
        else:
            refused.append(route.request.url)
            await route.fulfill(
                status=401, json={"error": {"code": "unauthorized", "message": "A caller key is required."}}
            )

    await page.route("**/api/**", guard)
    await page.route("**/v1/models", guard)
    await page.goto(f"{stack.agent_url}/console")
    await expect(page.locator("#key-dialog")).to_be_visible(timeout=WAIT_MS)
    await page.locator("#key-input").fill("caller-key-1")
    await page.locator("#key-input").press("Enter")
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator("#model")).to_have_value("demo")
    await only_tools(page)
    await send(page, "hello with a key")
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)

    await expect(page.locator("#key-dialog")).to_be_hidden()
    assert refused  # the first calls were refused, the dialog came up once for all of them
    assert await page.evaluate("sessionStorage.getItem('console.apiKey')") == "caller-key-1"
    assert "caller-key-1" not in await page.evaluate("JSON.stringify(localStorage)")
    await context.close()


def _reasoning_then_text(reasoning: list[str], text: list[str]) -> fake_openai.Reply:
    """A streamed Chat Completions answer whose deltas carry ``reasoning_content`` (vLLM, DeepSeek), then text."""
    frames = [{"role": "assistant", "content": ""}]
    frames += [{"reasoning_content": piece} for piece in reasoning]
    frames += [{"content": piece} for piece in text]
    chunks = [
        {
            "id": "chatcmpl-r",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        for delta in frames
    ]
    chunks.append(
        {
            "id": "chatcmpl-r",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
    )
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    return fake_openai.raw(body.encode(), content_type="text/event-stream")


async def test_a_typed_model_streams_its_reasoning_folded_and_its_answer(stack: Stack, page: Page) -> None:
    stack.llm.push(
        _reasoning_then_text(["The user wants ", "a list."], ["Two things:\n\n", "- **one**\n", "- `two`\n"])
    )
    bodies = run_bodies(page)
    await page.locator("#model").select_option(label="Other…")
    await page.locator("#model-other").fill("gpt-4o")
    await only_tools(page)
    await send(page, "list two things")

    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    reasoning = page.locator("details.reasoning")
    await expect(reasoning).to_have_count(1)
    await expect(reasoning).not_to_have_attribute("open", "")
    await expect(reasoning.locator(".reasoning-text")).to_be_hidden()
    await reasoning.locator("summary").click()
    await expect(reasoning.locator(".reasoning-text")).to_have_text("The user wants a list.")
    await expect(page.locator(".answer li")).to_have_count(2)
    await expect(page.locator(".answer li strong")).to_have_text("one")
    await expect(page.locator(".answer li code")).to_have_text("two")
    assert bodies[0]["model"] == "gpt-4o"


async def test_a_finished_run_comes_back_from_the_store_after_a_reload(stack: Stack, page: Page) -> None:
    await send(page, SEARCH)
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    shown = await page.locator("#transcript").inner_text()

    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)

    card = page.locator(".tool-card", has=page.locator(".tool-name", has_text="search_documents"))
    await expect(card.locator(".tool-result")).to_contain_text("wall-clock deadline of 120 seconds")
    await expect(page.locator(".message.user")).to_have_count(1)
    await expect(page.locator(".answer")).to_have_count(1)
    await expect(page.locator(".run-footer")).to_have_text("finish: stop · 2 iterations · " + shown.split(" · ")[-1])


async def test_a_long_result_is_folded_and_the_tool_description_is_on_hover(stack: Stack, page: Page) -> None:
    label = page.locator("label.tool-switch", has=page.locator("input[value=echo]"))
    await expect(label).to_have_attribute("title", "Return the text unchanged.")
    await only_tools(page, "echo")
    long_text = "echo " + " ".join(f"word{number}" for number in range(300))
    await send(page, long_text)

    folded = page.locator(".tool-card details.long-result")
    await expect(folded).to_have_count(1, timeout=WAIT_MS)
    await expect(folded.locator("summary")).to_contain_text(f"Result ({len(long_text):,} characters)")
    await expect(folded.locator(".tool-result")).to_be_hidden()
    await folded.locator("summary").click()
    await expect(folded.locator(".tool-result")).to_have_text(long_text)


async def test_enter_sends_and_shift_enter_starts_a_new_line(stack: Stack, page: Page) -> None:
    await only_tools(page)
    box = page.locator("#message")
    await box.press_sequentially("first line")
    await box.press("Shift+Enter")
    await box.press_sequentially("second line")
    await expect(page.locator(".message.user")).to_have_count(0)
    await box.press("Enter")

    await expect(page.locator(".message.user .user-text")).to_have_text("first line\nsecond line")
    await expect(box).to_have_value("")
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)


async def test_a_phone_width_screen_folds_the_side_and_fits_the_width(stack: Stack, page: Page) -> None:
    await page.set_viewport_size({"width": 390, "height": 844})
    await expect(page.locator("#side")).to_be_hidden()
    await page.locator("#toggle-side").click()
    await expect(page.locator("#side")).to_be_visible()
    await only_tools(page)
    await page.locator("#toggle-side").click()
    await expect(page.locator("#side")).to_be_hidden()
    await send(page, SEARCH + " " + "x" * 200)  # a long word must wrap, not widen the page

    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    assert await page.evaluate("document.documentElement.scrollWidth") <= 390


async def test_a_conversation_opened_from_the_list_mid_run_follows_its_run(stack: Stack, page: Page) -> None:
    # The run was started elsewhere (another tab, a script): the page finds it in progress in the store.
    tag = f"wait at the gate {uuid.uuid4().hex}"
    conversation_id = f"elsewhere-{uuid.uuid4().hex}"
    body = {
        "model": "demo",
        "stream": True,
        "onDisconnect": "continue",
        "conversationId": conversation_id,
        "tools": ["gate"],
        "messages": [{"role": "user", "content": tag}],
    }
    async with (
        httpx.AsyncClient(base_url=stack.agent_url, timeout=30) as http,
        http.stream("POST", "/api/v1/agent/run", json=body) as response,
    ):
        assert response.status_code == 200
    await gate_started(stack, tag)

    await page.reload()
    await page.locator(f"#conversations button[data-conversation-id='{conversation_id}']").click()
    await expect(page.locator(".tool-card.running")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator(".message.user")).to_have_text(["You" + tag])
    await expect(page.locator("#stop")).to_be_visible()
    await open_gate(stack, tag)

    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    await expect(page.locator(".tool-card")).to_have_count(1)
    await expect(page.locator(".answer")).to_have_count(1)


async def test_a_conversation_longer_than_a_page_shows_its_newest_page_each_run_with_its_footer(
    stack: Stack, page: Page
) -> None:
    # Three runs of 400 KB questions and short answers: the newest page (1 MiB at most) starts inside the first
    # run, after its question.
    conversation_id = f"long-{uuid.uuid4().hex}"
    async with httpx.AsyncClient(base_url=stack.agent_url, timeout=30) as http:
        for index in range(3):
            stack.llm.push(fake_openai.text(f"answer {index}"))
            question = f"question {index} " + "x" * 400_000
            body = {
                # A model whose context window is unknown: its conversation is sent whole, never folded into a
                # summary (which would take a scripted reply); what is checked here is the console's paging.
                "model": "llama3.1:8b",
                "conversationId": conversation_id,
                "tools": [],
                "messages": [{"role": "user", "content": question}],
            }
            response = await http.post("/api/v1/agent/run", json=body)
            assert response.status_code == 200, response.text
        paged = (await http.get(f"/api/v1/agent/conversations/{conversation_id}")).json()
    assert "earlier" in paged
    assert [m["content"][:10] for m in paged["messages"]] == [
        "answer 0",
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
    ]

    await page.reload()
    await page.locator(f"#conversations button[data-conversation-id='{conversation_id}']").click()
    await expect(page.locator("#transcript .note")).to_have_text("Earlier messages of this conversation are not shown.")
    await expect(page.locator(".message.user")).to_have_count(2, timeout=WAIT_MS)
    await expect(page.locator(".answer")).to_have_text(["answer 0", "answer 1", "answer 2"])
    await expect(page.locator(".run-footer")).to_have_count(3)


async def test_without_a_run_store_a_message_runs_on_its_own(stack: Stack, page: Page) -> None:
    bodies = run_bodies(page)
    await page.goto(f"{stack.unstored_agent_url}/console")
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator("#conversations-note")).to_contain_text("Conversations unavailable")
    await send(page, SEARCH)

    await expect(page.locator(".tool-name", has_text="search_documents")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    await expect(page.locator(".note.standalone")).to_contain_text("Runs are not stored")
    await send(page, "hello again")
    await expect(page.locator(".run-footer")).to_have_count(2, timeout=WAIT_MS)
    assert [("conversationId" in body) for body in bodies] == [True, False, False]

    # Stop closes the run's stream, which cancels a run that is not stored, and its tool call with it.
    tag = f"hold on {uuid.uuid4().hex}"  # the echo server's ``hold`` never returns, and records its cancellation
    await only_tools(page, "hold")
    await send(page, tag)
    await gate_started(stack, tag)
    await page.locator("#stop").click()
    await expect(page.locator(".run-footer").last).to_have_text("finish: cancelled", timeout=WAIT_MS)
    with anyio.fail_after(WAIT_MS / 1000):
        reply = await stack.gateway.http.post(
            "/mcp/v1/tools/call-tool", json={"name": "await_hold", "arguments": {"tag": tag, "event": "cancelled"}}
        )
    assert reply.status_code == 200, reply.text


async def test_the_page_names_its_own_icon_so_no_request_for_favicon_ico_fails(stack: Stack) -> None:
    # Without an icon of its own a browser asks for /favicon.ico, which agent-service does not have (a 404).
    context = await stack.browser.new_context()
    page = await context.new_page()
    failed: list[str] = []
    # The admin API and the person's connections are left out: their answers are how the page learns whether to
    # show the Servers and Connections sections (a 4xx hides them: a key that is no admin's, or names no user), and
    # here they depend on what the gateway of this test speaks.
    optional = ("/api/v1/admin/", "/api/v1/agent/connections")
    page.on(
        "response",
        lambda response: (
            failed.append(response.url)
            if response.status >= 400 and not any(path in response.url for path in optional)
            else None
        ),
    )
    async with page.expect_response(lambda response: "favicon" in response.url, timeout=WAIT_MS) as icon:
        await page.goto(f"{stack.agent_url}/console")
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    response = await icon.value
    assert response.url == f"{stack.agent_url}/console/favicon.svg"
    assert response.status == 200
    assert (await response.header_value("content-type") or "").startswith("image/svg+xml")
    assert failed == []
    await context.close()


LONG_TASKS = """() => {
    window.longTasks = [];
    new PerformanceObserver((list) => {
        for (const entry of list.getEntries()) window.longTasks.push(entry.duration);
    }).observe({ type: "longtask" });
}"""
"""Records every task of the page's main thread that takes over 50 ms (the browser's "long task"), in ms."""


async def test_an_answer_of_16000_brackets_streamed_in_400_deltas_renders_without_blocking_the_page(
    stack: Stack, page: Page
) -> None:
    # Rendered again in full on every delta, by a parser quadratic in the "[" of a line, this took minutes of the
    # page's main thread: 418 ms a render at the end, 400 renders.
    pieces = ["[" * 40] * 400
    stack.llm.push(_reasoning_then_text([], pieces))
    await page.evaluate(LONG_TASKS)
    await page.locator("#model").select_option(label="Other…")
    await page.locator("#model-other").fill("gpt-4o")
    await only_tools(page)
    await send(page, "brackets, please")

    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    assert await page.locator(".answer").inner_text() == "[" * 16_000
    long_tasks: list[float] = await page.evaluate("window.longTasks")
    assert sum(long_tasks) < 1_000, long_tasks


async def test_inline_markdown_on_a_long_line_is_still_rendered(stack: Stack, page: Page) -> None:
    line = "[" * 5_000 + "] **strong** `code` *em* [a link](https://example.org/x) " + "*" * 4_000
    stack.llm.push(_reasoning_then_text([], [line[:4_000], line[4_000:]]))
    await page.locator("#model").select_option(label="Other…")
    await page.locator("#model-other").fill("gpt-4o")
    await only_tools(page)
    await send(page, "markdown, please")

    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    answer = page.locator(".answer")
    await expect(answer.locator("strong")).to_have_text("strong")
    await expect(answer.locator("code")).to_have_text("code")
    await expect(answer.locator("em")).to_have_text("em")
    await expect(answer.locator("a")).to_have_attribute("href", "https://example.org/x")
    await expect(answer.locator("a")).to_have_text("a link")
    assert await answer.inner_text() == line.replace("**strong**", "strong").replace("`code`", "code").replace(
        "*em*", "em"
    ).replace("[a link](https://example.org/x)", "a link")


async def _console(stack: Stack, url: str, key: str | None = None) -> tuple[BrowserContext, Page]:
    """A new browser (its own storage) on the console at ``url``, with ``key`` as its caller key, loaded."""
    page = await open_console(stack.browser, url, [], key=key)
    return page.context, page


async def expect_controls(page: Page, persona: str, effort: str, verbosity: str, max_tokens: str) -> None:
    await expect(page.locator("#persona")).to_have_value(persona)
    await expect(page.locator("#effort")).to_have_value(effort)
    await expect(page.locator("#verbosity")).to_have_value(verbosity)
    await expect(page.locator("#max-tokens")).to_have_value(max_tokens)


async def test_a_persona_effort_verbosity_and_max_tokens_stay_with_the_conversation_after_a_reload_and_elsewhere(
    stack: Stack,
) -> None:
    context, page = await _console(stack, stack.persona_agent_url, CONSOLE_KEY)
    bodies = run_bodies(page)
    personas = ["None", "brief: Short answers", "support: Support desk"]
    await expect(page.locator("#persona option")).to_have_text(personas)
    await expect(page.locator("#suggestions .suggestion")).to_have_text(["Deadlines", "Tomatoes"])  # the operator's
    await page.locator("#system-prompt-box summary").click()
    await expect(page.locator("#system-prompt")).to_have_value("You answer for ACME.")  # the tenant's, no persona

    await page.locator("#persona").select_option("support")
    await expect(page.locator("#system-prompt")).to_have_value("You are ACME's support desk.")
    await page.locator("#effort").select_option("high")
    await page.locator("#verbosity").select_option("low")
    await page.locator("#max-tokens").fill("500")
    await only_tools(page, "echo")
    await send(page, "echo hello from support")
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)

    first = bodies[0]
    assert first["persona"] == "support"
    assert first["reasoning"] == {"effort": "high", "summary": "auto"}
    assert (first["verbosity"], first["maxTokens"], first["tools"]) == ("low", 500, ["echo"])
    assert first["messages"] == [
        {"role": "system", "content": "You are ACME's support desk."},
        {"role": "user", "content": "echo hello from support"},
    ]

    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    await expect_controls(page, "support", "high", "low", "500")
    await expect(page.locator("#tools input[name=tool][value=echo]")).to_be_checked()
    await expect(page.locator("#tools input[name=tool][value=search_documents]")).not_to_be_checked()
    await expect(page.locator(".system-prompt-text")).to_have_text("You are ACME's support desk.")
    await expect(page.locator("#new-chat")).to_be_hidden()
    await send(page, "echo once more")
    await expect(page.locator(".run-footer")).to_have_count(2, timeout=WAIT_MS)
    await expect(page.locator(".run-footer").last).to_contain_text("finish: stop", timeout=WAIT_MS)

    second = bodies[1]
    assert second["conversationId"] == first["conversationId"]
    assert (second["persona"], second["reasoning"], second["verbosity"], second["maxTokens"], second["tools"]) == (
        "support",
        {"effort": "high", "summary": "auto"},
        "low",
        500,
        ["echo"],
    )
    assert second["messages"] == [{"role": "user", "content": "echo once more"}]  # the prompt is stored already

    # Another browser (nothing of the first one's storage) opening the conversation continues with its settings.
    elsewhere, other = await _console(stack, stack.persona_agent_url, CONSOLE_KEY)
    await expect_controls(other, "", "", "", "")
    await other.locator(f"#conversations button[data-conversation-id='{first['conversationId']}']").click()
    await expect(other.locator(".message.user")).to_have_count(2, timeout=WAIT_MS)
    await expect_controls(other, "support", "high", "low", "500")
    await expect(other.locator("#tools input[name=tool][value=search_documents]")).not_to_be_checked()
    await elsewhere.close()
    await context.close()


async def test_a_tool_switched_off_stays_off_after_a_reload_and_in_another_tab(stack: Stack, page: Page) -> None:
    switch = "#tools input[name=tool][value=search_documents]"
    await page.locator(switch).uncheck()
    await send(page, "hello with one tool off")
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    conversation_id = await page.locator("#conversations button.current").get_attribute("data-conversation-id")

    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator(switch)).not_to_be_checked()
    await expect(page.locator("#tools input[name=tool][value=list_sources]")).to_be_checked()

    # Another tab (its own sessionStorage): a new conversation there has every tool on; this one has it off.
    other = await page.context.new_page()
    bodies = run_bodies(other)
    await other.goto(f"{stack.agent_url}/console")
    await expect(other.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    await expect(other.locator(switch)).to_be_checked()
    await other.locator(f"#conversations button[data-conversation-id='{conversation_id}']").click()
    await expect(other.locator(".message.user")).to_have_count(1, timeout=WAIT_MS)
    await expect(other.locator(switch)).not_to_be_checked()
    await send(other, "echo from the other tab")
    await expect(other.locator(".run-footer")).to_have_count(2, timeout=WAIT_MS)
    await expect(other.locator(".run-footer").last).to_contain_text("finish: stop", timeout=WAIT_MS)
    assert "search_documents" not in bodies[0]["tools"]
    assert bodies[0]["conversationId"] == conversation_id
    await other.close()


async def test_a_suggestion_card_starts_a_run_of_its_prompt(stack: Stack, page: Page) -> None:
    bodies = run_bodies(page)
    default = load_suggestions(None).suggestions
    cards = page.locator("#suggestions .suggestion")
    await expect(cards).to_have_text([card.title for card in default])  # no file: the demo corpus's set

    await cards.first.click()

    await expect(page.locator("#new-chat")).to_be_hidden()
    await expect(page.locator(".message.user")).to_have_text(["You" + default[0].prompt])
    # The demo model searches the documents for it (the RAG tool's first search may load its model for long: the
    # run is stopped once it has called the tool, its answer is another test's).
    card = page.locator(".tool-card", has=page.locator(".tool-name", has_text="search_documents"))
    await expect(card).to_have_count(1, timeout=WAIT_MS)
    assert bodies[0]["messages"] == [{"role": "user", "content": default[0].prompt}]
    await page.locator("#stop").click()
    await expect(page.locator(".run-footer")).to_contain_text("finish:", timeout=WAIT_MS)
    await page.locator("#new-conversation").click()
    await expect(page.locator("#new-chat")).to_be_visible()
    await expect(cards).to_have_count(len(default))


async def test_an_edited_system_prompt_goes_with_the_first_message_and_is_shown_after_a_reload(
    stack: Stack, page: Page
) -> None:
    bodies = run_bodies(page)
    await page.locator("#system-prompt-box summary").click()
    await expect(page.locator("#system-prompt")).to_have_value("")  # no persona, no tenant prompt: none
    await page.locator("#system-prompt").fill("Talk like a pirate.")
    await only_tools(page)
    await send(page, "hello, pirate")
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop", timeout=WAIT_MS)
    assert bodies[0]["messages"] == [
        {"role": "system", "content": "Talk like a pirate."},
        {"role": "user", "content": "hello, pirate"},
    ]

    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator(".system-prompt-text")).to_have_text("Talk like a pirate.")
    await expect(page.locator(".message.user")).to_have_text(["You" + "hello, pirate"])
    await send(page, "and again")
    await expect(page.locator(".run-footer")).to_have_count(2, timeout=WAIT_MS)
    assert bodies[1]["messages"] == [{"role": "user", "content": "and again"}]
