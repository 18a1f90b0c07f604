"""The web console in a test's Chromium (Playwright): open it with a caller key, type a message, see what it sends.

Shared by tests/integration/agent_service/test_console_*browser.py. A page opened here records what it threw and
what its Content-Security-Policy refused in the test's ``errors`` list, which the test checks when it ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from playwright.async_api import Browser, Page, Request, async_playwright, expect

__all__ = ["CHROMIUM", "WAIT_MS", "chromium", "open_console", "run_bodies", "send"]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
"""Debian's Chromium (``make test`` installs it when missing; Playwright's own browser download is not used)."""

WAIT_MS = 20_000
"""Bound of every wait for the page."""


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """``CHROMIUM``, headless, driven by Playwright."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            await browser.close()


async def open_console(
    browser: Browser,
    agent_url: str,
    errors: list[str],
    *,
    key: str | None = None,
    model: str | None = None,
    width: int = 1280,
    height: int = 860,
) -> Page:
    """A new browser context (its own storage) on the console, loaded; ``key``: the caller key, kept where the
    console's own dialog keeps it; ``model``: the model remembered for a new conversation (one completion-service
    routes but does not list is picked with "Other…")."""
    context = await browser.new_context(viewport={"width": width, "height": height})
    if key is not None:
        await context.add_init_script(f"sessionStorage.setItem('console.apiKey', {json.dumps(key)})")
    if model is not None:
        await context.add_init_script(f"localStorage.setItem('console.model', {json.dumps(model)})")
    page = await context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console",
        lambda message: errors.append(message.text) if "Content Security Policy" in message.text else None,
    )
    await page.goto(f"{agent_url}/console")
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    return page


async def send(page: Page, text: str) -> None:
    await page.locator("#message").fill(text)
    await page.locator("#message").press("Enter")


def run_bodies(page: Page) -> list[dict[str, Any]]:
    """The bodies of the runs the page starts, as it sends them."""
    bodies: list[dict[str, Any]] = []

    def record(request: Request) -> None:
        if request.method == "POST" and request.url.endswith("/api/v1/agent/run"):
            bodies.append(json.loads(request.post_data or "{}"))

    page.on("request", record)
    return bodies
