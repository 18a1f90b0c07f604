"""The console's settings in a real browser: a conversation keeps its persona, reasoning effort, verbosity, max
tokens, tool switches and system prompt after a reload and in another browser; a suggestion card starts a run.

The stack is test_console_browser.py's (``support.console_stack``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import BrowserContext, Page, expect

from agent_service.api.suggestions import load_suggestions
from support.console_browser import CHROMIUM, WAIT_MS, open_console, run_bodies, send
from support.console_stack import CONSOLE_KEY, Stack, console_tab, only_tools, running_console_stack

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
