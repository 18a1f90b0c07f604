"""The console's approvals and images in a real browser: Approve / Deny on a tool card whose call waits for a person,
a waiting run marked in the conversations list and re-attached after a reload, an image attached to a message, and a
tool result's image (told live by type and size, shown from the store after a reload).

Chromium is Debian's (``/usr/bin/chromium``), driven headless by Playwright, as in test_console_browser.py. The page
talks to a real agent-service (its run store on SQLite, a callers file whose tenant ``acme`` wants approval for the
echo server's ``add``), a real completion-service in front of the scripted OpenAI (model ``gpt-4o``, picked with
"Other…"), and the real gateway in front of the echo MCP server over streamable HTTP (and server-everything over stdio).

They need the approval and images backends of issue 28 (``POST /api/v1/agent/runs/{runId}/approvals``, images stored
by reference and served at ``/api/v1/agent/images/<sha256>``, image parts sent to the providers).
"""

from __future__ import annotations

import base64
import re
import struct
import uuid
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, FilePayload, Locator, Page, expect

from support import fake_openai
from support.caller_keys import key_entry
from support.console_browser import CHROMIUM, WAIT_MS, chromium, open_console, run_bodies, send
from support.everything_server import everything_stdio_server
from support.fake_openai import ScriptedOpenAI
from support.stacks import stack_of_callers

pytestmark = pytest.mark.anyio


KEY = "console-approvals-" + uuid.uuid4().hex

CALLERS_FILE = f"""
[tenants.acme]
approval = ["add"]

{key_entry("console", "acme", KEY)}
"""

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (make test installs Debian's package)", allow_module_level=True)


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A real PNG of one colour (the browser decodes it: its natural size tells that it was shown)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@dataclass
class Console:
    agent_url: str
    llm: ScriptedOpenAI
    browser: Browser
    errors: list[str]
    """What the pages threw, or refused under the Content-Security-Policy."""

    async def open(self) -> Page:
        """A new browser (its own storage) on the console with ``KEY``, model ``gpt-4o`` (the scripted OpenAI)."""
        return await open_console(self.browser, self.agent_url, self.errors, key=KEY, model="gpt-4o")


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


@asynccontextmanager
async def running_console(folder: Path, browser: Browser, **stack: Any) -> AsyncIterator[Console]:
    """The stack (``stack``: ``running_stack``'s options) with ``CALLERS_FILE``; the pages must neither throw nor
    break their policy."""
    async with stack_of_callers(folder, CALLERS_FILE, **stack) as running:
        console = Console(running.agent_url, running.llm, browser, errors=[])
        yield console
    assert not console.errors, f"the page threw or broke its policy: {console.errors}"


@pytest.fixture
async def console(tmp_path: Path, browser: Browser) -> AsyncIterator[Console]:
    async with running_console(tmp_path, browser) as console:
        yield console


@pytest.fixture
async def console_with_images(tmp_path: Path, browser: Browser) -> AsyncIterator[Console]:
    """The MCP reference server (server-everything over stdio) beside the echo server: its ``get-tiny-image``
    answers text, a 20x20 PNG, and text."""
    async with running_console(tmp_path, browser, servers={"everything": everything_stdio_server()}) as console:
        yield console


def tool_card(page: Page, call_id: str) -> Locator:
    return page.locator(f".tool-card[data-tool-call-id='{call_id}']")


def tool_message(request: dict[str, Any], call_id: str) -> str:
    """The content of the tool message of ``call_id`` in a chat completions request the model received."""
    for message in request["messages"]:
        if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
            return str(message["content"])
    raise AssertionError(f"no tool message for {call_id} in {request['messages']}")


async def test_approve_on_a_waiting_tool_card_runs_the_call_and_the_answer_follows(console: Console) -> None:
    console.llm.push(
        fake_openai.tool_calls(("call_add", "add", {"a": 2, "b": 3})),
        fake_openai.text("Two and three make 5."),
    )
    page = await console.open()
    await send(page, "add two and three")

    card = tool_card(page, "call_add")
    await expect(card).to_have_class(re.compile(r"\bwaiting\b"), timeout=WAIT_MS)
    await expect(card.locator(".tool-status")).to_have_text("waiting for approval")
    await expect(card.locator(".approval")).to_contain_text("needs your approval")
    # The conversation is marked as waiting in the list, and the run is still followed (Stop is offered).
    listed = page.locator("#conversations button.current")
    await expect(listed).to_have_attribute("data-status", "waiting", timeout=WAIT_MS)
    await expect(listed.locator(".waiting-badge")).to_have_text("waiting")
    await expect(page.locator("#stop")).to_be_visible()
    assert len(console.llm.requests) == 1  # nothing went on while the call waited

    await card.get_by_role("button", name="Approve").click()

    await expect(card.locator(".approval-decision.approved")).to_have_text("Approved by console.", timeout=WAIT_MS)
    await expect(card.locator(".tool-result")).to_have_text("5", timeout=WAIT_MS)
    await expect(card).to_have_class("tool-card succeeded")
    await expect(page.locator(".answer")).to_have_text("Two and three make 5.", timeout=WAIT_MS)
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop")
    await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    await expect(listed).to_have_attribute("data-status", "completed", timeout=WAIT_MS)
    await expect(listed.locator(".waiting-badge")).to_have_count(0)
    assert tool_message(console.llm.requests[1], "call_add") == "5"


async def test_a_waiting_run_is_re_attached_after_a_reload_and_a_denial_with_a_message_reaches_the_model(
    console: Console,
) -> None:
    console.llm.push(
        fake_openai.tool_calls(("call_deny", "add", {"a": 1, "b": 1})),
        fake_openai.text("I did not add them."),
    )
    page = await console.open()
    await send(page, "add one and one")
    await expect(tool_card(page, "call_deny")).to_have_class(re.compile(r"\bwaiting\b"), timeout=WAIT_MS)

    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    card = tool_card(page, "call_deny")
    await expect(card.locator(".approval")).to_contain_text("needs your approval", timeout=WAIT_MS)
    await expect(page.locator(".message.user")).to_have_text(["You" + "add one and one"])

    # The run waits in the store, not in the page: the page may leave it for a new conversation (which cancels
    # nothing) and come back to it from the list, where it is marked.
    await page.locator("#new-conversation").click()
    await expect(page.locator(".message")).to_have_count(0)
    await expect(page.locator("#stop")).to_be_hidden()
    listed = page.locator("#conversations button[data-status=waiting]")
    await expect(listed).to_have_count(1, timeout=WAIT_MS)
    await listed.click()
    await expect(card.locator(".approval")).to_contain_text("needs your approval", timeout=WAIT_MS)
    assert len(console.llm.requests) == 1

    await card.get_by_label("Message with the decision on add").fill("not today")
    await card.get_by_role("button", name="Deny").click()

    decision = card.locator(".approval-decision.denied")
    await expect(decision).to_have_text("Denied by console: not today", timeout=WAIT_MS)
    await expect(card.locator(".tool-result.error")).to_have_text("Not approved: not today", timeout=WAIT_MS)
    await expect(page.locator(".answer")).to_have_text("I did not add them.", timeout=WAIT_MS)
    await expect(page.locator(".run-footer")).to_contain_text("finish: stop")
    # An error result reaches OpenAI's wire format with completion-service's "Error: " before it.
    assert tool_message(console.llm.requests[1], "call_deny") == "Error: Not approved: not today"


async def test_an_attached_image_is_sent_as_a_data_url_part_and_shown_in_the_message(console: Console) -> None:
    image = png(3, 2, (200, 30, 30))
    console.llm.push(fake_openai.text("A small red rectangle."))
    page = await console.open()
    bodies = run_bodies(page)

    # Only images are taken: a text file is refused, and said so.
    await page.locator("#attach-file").set_input_files(
        files=[
            FilePayload(name="notes.txt", mimeType="text/plain", buffer=b"hello"),
            FilePayload(name="red.png", mimeType="image/png", buffer=image),
        ]
    )
    await expect(page.locator("#attach-error")).to_contain_text("notes.txt: not a PNG, JPEG, GIF or WebP image")
    await expect(page.locator("#attachments .attachment")).to_have_count(1)
    await expect(page.locator("#attachments .attachment")).to_contain_text("red.png")
    await send(page, "What is in this picture?")

    await expect(page.locator(".answer")).to_have_text("A small red rectangle.", timeout=WAIT_MS)
    data_url = "data:image/png;base64," + base64.b64encode(image).decode()
    assert bodies[0]["messages"][-1]["content"] == [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": data_url}},
    ]
    await expect(page.locator("#attachments .attachment")).to_have_count(0)  # sent: the next message has none
    await expect(page.locator(".message.user .user-text")).to_have_text("What is in this picture?")
    shown = page.locator(".message.user img.message-image")
    await expect(shown).to_have_count(1)
    assert await shown.evaluate("image => [image.naturalWidth, image.naturalHeight]") == [3, 2]

    # Read back from the store (by reference, fetched with the key), the message shows the same picture.
    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    shown = page.locator(".message.user img.message-image")
    await expect(shown).to_have_count(1, timeout=WAIT_MS)
    await expect(shown).to_have_attribute("data-stored", re.compile(r"^/api/v1/agent/images/[0-9a-f]{64}$"))
    await expect(shown).to_have_attribute("src", re.compile(r"^blob:"))
    await expect(shown).to_have_js_property("complete", True)
    assert await shown.evaluate("image => [image.naturalWidth, image.naturalHeight]") == [3, 2]


async def test_a_tool_results_image_is_told_live_and_shown_from_the_store_after_a_reload(
    console_with_images: Console,
) -> None:
    console = console_with_images
    console.llm.push(
        fake_openai.tool_calls(("call_image", "get-tiny-image", {})),
        fake_openai.text("That is the MCP logo."),
    )
    page = await console.open()
    await send(page, "show me the tiny image")

    card = tool_card(page, "call_image")
    # The stream tells of the image (its type and size), never its bytes.
    await expect(card.locator(".tool-images")).to_have_text(
        re.compile(r"^1 image: image/png · [0-9.]+ (B|KB)$"), timeout=WAIT_MS
    )
    await expect(card.locator(".tool-result")).to_contain_text("Here's the image you requested:")
    await expect(page.locator(".answer")).to_have_text("That is the MCP logo.", timeout=WAIT_MS)

    # The stored tool message keeps the image by reference: the card shows it, fetched with the key.
    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    shown = tool_card(page, "call_image").locator("img.message-image")
    await expect(shown).to_have_count(1, timeout=WAIT_MS)
    await expect(shown).to_have_attribute("data-stored", re.compile(r"^/api/v1/agent/images/[0-9a-f]{64}$"))
    await expect(shown).to_have_attribute("alt", "An image returned by get-tiny-image")
    await expect(shown).to_have_js_property("complete", True)
    assert await shown.evaluate("image => [image.naturalWidth, image.naturalHeight]") == [20, 20]
