"""The stack the console's browser tests run against (test_console_browser.py, test_console_settings_browser.py):
real services and the ``demo`` model, a scripted OpenAI model, and Debian's Chromium.

The tools are real MCP servers behind a real mcp-client-service: the RAG tool over stdio (``search_documents`` over
a folder of Markdown, ``DOCS``) and the echo server over streamable HTTP, whose ``gate`` tool holds a call open until
the test opens it. Three agent-services share them: one that stores runs, one that keeps none, and one with a
callers file (personas, a tenant's system prompt; ``CONSOLE_KEY``) and suggestion cards of its own (``CARDS``).
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
from playwright.async_api import Browser, Page, async_playwright, expect
from pydantic import SecretStr

from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.caller_keys import key_entry
from support.console_browser import CHROMIUM, open_console
from support.fake_openai import ScriptedOpenAI
from support.mcp_gateway import Gateway, echo_http_server, running_gateway
from support.servers import serve_app
from support.stacks import running_agent

__all__ = [
    "CALLERS_FILE",
    "CARDS",
    "CONSOLE_KEY",
    "DOCS",
    "SEARCH",
    "Stack",
    "console_tab",
    "only_tools",
    "running_console_stack",
]

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


@asynccontextmanager
async def running_console_stack(root: Path) -> AsyncIterator[Stack]:
    """The stack, its files (documents, callers file, cards, run stores) in ``root``."""
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


@asynccontextmanager
async def console_tab(stack: Stack) -> AsyncIterator[Page]:
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
