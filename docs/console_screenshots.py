"""Writes docs/console-wide.png and docs/console-narrow.png: the console after a finished run of the demo model.

Against a running suite (``make run``), with Debian's Chromium (``/usr/bin/chromium``) driven by Playwright::

    make run                                       # in another terminal
    .venv/bin/python docs/console_screenshots.py   # --url http://127.0.0.1:8000 --out docs --key-file .data/caller-key

The caller key ``make run`` made (``.data/caller-key``) is put where the console keeps it, so the page never asks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from playwright.async_api import async_playwright, expect

__all__ = ["QUESTION", "take_screenshots"]

QUESTION = "Search the documents: what happens when a run reaches its deadline?"
WAIT_MS = 60_000
ROOT = Path(__file__).resolve().parents[1]


async def take_screenshots(url: str, out: Path, chromium: str, key: str | None = None) -> None:
    """Asks ``QUESTION`` with the search tool only, then photographs the finished run wide and narrow; ``key``: the
    caller key, stored in the page's sessionStorage as the console's own dialog would."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": 1280, "height": 1000})
        if key:
            await page.add_init_script(f"sessionStorage.setItem('console.apiKey', {json.dumps(key)})")
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
    parser.add_argument(
        "--key-file", type=Path, default=ROOT / ".data" / "caller-key", help="the caller key (make run's by default)"
    )
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium to drive")
    arguments = parser.parse_args()
    key = arguments.key_file.read_text().strip() if arguments.key_file.is_file() else None
    asyncio.run(take_screenshots(arguments.url.rstrip("/"), arguments.out, arguments.chromium, key))


if __name__ == "__main__":
    main()
