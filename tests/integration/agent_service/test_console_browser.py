"""The agent console (``/console``) in a real browser, against the real services and the ``demo`` model.

Chromium is Debian's (``/usr/bin/chromium``, installed by ``make test`` when missing), driven headless by
Playwright, against the stack of ``support.console_stack``: the RAG tool's ``search_documents`` and the echo server's
tools behind a real mcp-client-service. The echo server's ``gate`` tool holds a call open until the test opens it: a
run stays in flight for as long as a test needs (Stop, reload). The demo model calls the tools that share the most
words with the message, with the message as their string arguments; so ``gate`` is called with the message as its
tag. The settings a conversation keeps are test_console_settings_browser.py's.

The README's screenshots come from ``docs/console_screenshots.py``, against ``make run``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from playwright.async_api import Page, Route, expect

from support import fake_openai
from support.console_browser import CHROMIUM, WAIT_MS, run_bodies, send
from support.console_stack import SEARCH, Stack, console_tab, only_tools, running_console_stack

pytestmark = pytest.mark.anyio


if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (make test installs Debian's package)", allow_module_level=True)


@pytest.fixture(scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with running_console_stack(tmp_path_factory.mktemp("console")) as running:
        yield running


@pytest.fixture
async def page(stack: Stack) -> AsyncIterator[Page]:
    """A fresh tab (its own sessionStorage: a new conversation) on the console, loaded."""
    async with console_tab(stack) as tab:
        yield tab


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
        module = await http.get("/console/markdown.js")
        style = await http.get("/console/console.css")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "/console/console.js" in page.text
    assert script.status_code == 200
    assert "import" in script.text  # the entry point of the console's modules, served beside it
    assert module.status_code == 200
    assert "export function renderMarkdown" in module.text
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
