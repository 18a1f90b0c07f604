"""Writes docs/console-wide.png and docs/console-narrow.png: the console after a finished run of the demo model.

Against a running suite (``make run``), with Debian's Chromium (``/usr/bin/chromium``) driven by Playwright::

    make run                                       # in another terminal
    .venv/bin/python docs/console_screenshots.py   # --url http://127.0.0.1:8000 --out docs
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from playwright.async_api import async_playwright, expect

__all__ = ["QUESTION", "take_screenshots"]

QUESTION = "Search the documents: what happens when a run reaches its deadline?"
WAIT_MS = 60_000


async def take_screenshots(url: str, out: Path, chromium: str) -> None:
    """Asks ``QUESTION`` with the search tool only, then photographs the finished run wide and narrow."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 1000})
        await page.goto(f"{url}/console")
        await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
        await page.locator("#model").select_option("demo")
        for server in await page.locator("#tools .server-switch").all():
            await server.check()
            await server.uncheck()
        await page.locator("#tools input[name=tool][value=search_documents]").check()
        await page.locator("#message").fill(QUESTION)
        await page.locator("#message").press("Enter")
        await expect(page.locator(".run-footer")).to_have_count(1, timeout=WAIT_MS)
        await expect(page.locator("#conversations button.current")).to_have_count(1, timeout=WAIT_MS)
        first_message = "message => message.scrollIntoView({block: 'start'})"
        await page.locator(".message.user").last.evaluate(first_message)
        await page.screenshot(path=out / "console-wide.png")
        await page.set_viewport_size({"width": 390, "height": 844})
        await page.locator(".message.user").last.evaluate(first_message)
        await page.screenshot(path=out / "console-narrow.png")
        await browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="agent-service's base URL")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent, help="folder for the two PNG files")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium to drive")
    arguments = parser.parse_args()
    asyncio.run(take_screenshots(arguments.url.rstrip("/"), arguments.out, arguments.chromium))


if __name__ == "__main__":
    main()
