"""The console's Servers and Runtime sections (a tenant's own MCP servers and its runtime) in a real browser.

Chromium is Debian's (``/usr/bin/chromium``), driven headless by Playwright, as in test_console_browser.py. The page
talks to a real agent-service (its admin API, its run store on SQLite, the ``demo`` model of a real
completion-service); the gateway behind it is the scripted one of the admin API's own tests
(``support/scripted_tenant_gateway.py``), which speaks the gateway's tenant API and lists ``<server>_tool`` for each
enabled server of a tenant.

Tenant ``acme``: an admin key (at most 2 servers of its own, ``max_iterations = 8``) and a plain key.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, Locator, Page, expect
from pydantic import SecretStr

from agent_service.app import create_app
from agent_service.settings import AgentSettings
from completion_service.app import create_app as create_completion_app
from completion_service.settings import CompletionSettings
from support.caller_keys import key_entry
from support.console_browser import CHROMIUM, WAIT_MS, chromium, open_console
from support.scripted_tenant_gateway import ScriptedTenantGateway
from support.servers import serve_app

pytestmark = pytest.mark.anyio


SECRET = "gateway-secret-" + uuid.uuid4().hex
ADMIN_KEY = "acme-admin-" + uuid.uuid4().hex
APP_KEY = "acme-app-" + uuid.uuid4().hex
HEADER_VALUE = "Bearer tenant-secret-" + uuid.uuid4().hex

CALLERS_FILE = f"""
[tenants.acme]
max_iterations = 8
max_mcp_servers = 2

{key_entry("acme-admin", "acme", ADMIN_KEY, role="admin")}
{key_entry("acme-app", "acme", APP_KEY)}
"""

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (make test installs Debian's package)", allow_module_level=True)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
async def completion_url() -> AsyncIterator[str]:
    async with serve_app(create_completion_app(CompletionSettings())) as url:
        yield url


@dataclass
class Console:
    agent_url: str
    gateway: ScriptedTenantGateway
    browser: Browser
    errors: list[str]
    """What the pages threw, or refused under the Content-Security-Policy."""

    async def open(self, key: str, *, width: int = 1280, height: int = 860) -> Page:
        """A new browser (its own storage) on the console with ``key`` as its caller key, loaded; the page must
        neither throw nor break its Content-Security-Policy (checked when the test ends)."""
        return await open_console(self.browser, self.agent_url, self.errors, key=key, width=width, height=height)


@pytest.fixture
async def console(tmp_path: Path, browser: Browser, completion_url: str) -> AsyncIterator[Console]:
    """agent-service over the scripted gateway (nothing registered yet) and a run store of its own."""
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS_FILE)
    gateway = ScriptedTenantGateway(SECRET)
    async with serve_app(gateway.app) as gateway_url:
        settings = AgentSettings(
            completion_url=completion_url,
            mcp_client_url=gateway_url,
            mcp_service_secret=SecretStr(SECRET),
            callers_file=callers,
            database_url=f"sqlite:///{tmp_path / 'runs.db'}",
            catalog_cache_seconds=60,  # a change made through the admin API drops the tenant's list at once
        )
        async with serve_app(create_app(settings)) as agent_url:
            running = Console(agent_url, gateway, browser, errors=[])
            yield running
    assert not running.errors, f"the page threw or broke its policy: {running.errors}"


def card(page: Page, name: str) -> Locator:
    return page.locator(f"#servers .server-card[data-server='{name}']")


async def add_server(page: Page, name: str, url: str, header: tuple[str, str] | None = None) -> None:
    """Fills the add form (opening it if closed) and submits it."""
    if not await page.locator("#server-add").evaluate("details => details.open"):
        await page.locator("#server-add summary").click()
    await page.locator("#server-name").fill(name)
    await page.locator("#server-url").fill(url)
    await page.locator("#server-header-name").fill(header[0] if header else "")
    await page.locator("#server-header-value").fill(header[1] if header else "")
    await page.locator("#server-save").click()


async def everything_the_page_holds(page: Page) -> str:
    """The page's HTML, every form field's value and its storage: wherever a value typed in could still be."""
    return str(
        await page.evaluate(
            """() => [
                document.documentElement.outerHTML,
                ...[...document.querySelectorAll("input, textarea, select")].map((field) => field.value),
                JSON.stringify({...sessionStorage}),
                JSON.stringify({...localStorage}),
            ].join("\\n")"""
        )
    )


async def test_an_admin_adds_a_server_whose_header_value_never_comes_back_to_the_page(console: Console) -> None:
    page = await console.open(ADMIN_KEY)
    await expect(page.locator("#servers-panel")).to_be_visible()
    await expect(page.locator("#servers-note")).to_have_text("No server of your own yet (at most 2).")

    await add_server(page, "crm", "https://mcp.example.com/mcp", ("Authorization", HEADER_VALUE))

    crm = card(page, "crm")
    await expect(crm.locator(".server-state")).to_have_text("connecting…", timeout=WAIT_MS)
    await expect(crm).to_contain_text("https://mcp.example.com/mcp · streamable-http")
    await expect(crm).to_contain_text("Headers: Authorization (values not shown)")
    await expect(crm.locator(".server-tools summary")).to_have_text("1 tool")
    await expect(crm.locator(".server-enabled")).to_be_checked()
    await expect(crm.locator(".server-enabled")).to_be_focused()
    await expect(page.locator("#server-form-error")).to_be_hidden()
    # Its tool joins the tenant's runs, and so the Tools section.
    await expect(page.locator("#tools input[name=tool][value=crm_tool]")).to_be_checked()
    # The gateway got the value; the page kept none of it, neither after the save nor after a reload.
    assert console.gateway.servers["acme"]["crm"]["headers"] == {"Authorization": HEADER_VALUE}
    assert HEADER_VALUE not in await everything_the_page_holds(page)
    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    await expect(card(page, "crm")).to_contain_text("Headers: Authorization (values not shown)")
    assert HEADER_VALUE not in await everything_the_page_holds(page)


async def test_an_admin_switches_a_server_off_and_its_tools_leave_the_tools_section(console: Console) -> None:
    page = await console.open(ADMIN_KEY)
    await add_server(page, "crm", "https://mcp.example.com/mcp")
    crm = card(page, "crm")
    await expect(page.locator("#tools input[name=tool][value=crm_tool]")).to_have_count(1, timeout=WAIT_MS)

    async with page.expect_request(lambda request: request.method == "PATCH") as patch:
        await crm.locator(".server-enabled").uncheck()

    assert (await patch.value).post_data_json == {"enabled": False}
    await expect(crm.locator(".server-state")).to_have_text("off", timeout=WAIT_MS)
    await expect(crm.locator(".server-enabled")).not_to_be_checked()
    await expect(crm.locator(".server-enabled")).to_be_focused()  # a keyboard user goes on from where they were
    await expect(page.locator("#tools input[name=tool][value=crm_tool]")).to_have_count(0, timeout=WAIT_MS)
    assert console.gateway.servers["acme"]["crm"]["enabled"] is False

    await crm.locator(".server-enabled").press("Space")  # on again, from the keyboard
    await expect(crm.locator(".server-state")).to_have_text("connecting…", timeout=WAIT_MS)
    await expect(crm.locator(".server-enabled")).to_be_checked()
    await expect(page.locator("#tools input[name=tool][value=crm_tool]")).to_have_count(1, timeout=WAIT_MS)

    # A switch the gateway refuses (the server deleted meanwhile, elsewhere) goes back and says why.
    del console.gateway.servers["acme"]["crm"]
    await crm.locator(".server-enabled").click()
    await expect(crm.locator(".form-error")).to_contain_text("Could not switch crm off: The tenant has no server")
    await expect(crm.locator(".server-enabled")).to_be_checked()
    await expect(crm.locator(".server-enabled")).to_be_enabled()


async def test_the_gateways_refusals_are_said_in_words_on_the_form(console: Console) -> None:
    page = await console.open(ADMIN_KEY)
    error = page.locator("#server-form-error")

    await add_server(page, "metadata", "http://169.254.169.254/latest", ("X-Token", HEADER_VALUE))
    await expect(error).to_contain_text("This URL is not allowed: The URL resolves to a link-local address")
    await expect(page.locator("#server-name")).to_have_value("metadata")  # kept, to be corrected
    await expect(page.locator("#servers .server-card")).to_have_count(0)

    await add_server(page, "crm", "https://mcp.example.com/mcp")
    await expect(card(page, "crm")).to_have_count(1, timeout=WAIT_MS)
    await expect(error).to_be_hidden()
    await add_server(page, "crm", "https://other.example.com/mcp")
    await expect(error).to_contain_text("A server of this name exists already")

    await add_server(page, "docs", "https://docs.example.com/mcp")
    await expect(card(page, "docs")).to_have_count(1, timeout=WAIT_MS)
    await add_server(page, "third", "https://third.example.com/mcp")
    await expect(error).to_contain_text("Your tenant has as many servers as it may")

    # A header needs both its name and its value: checked before anything is sent.
    await page.locator("#server-name").fill("half")
    await page.locator("#server-header-name").fill("Authorization")
    await page.locator("#server-header-value").fill("")
    await page.locator("#server-save").click()
    await expect(error).to_have_text("A header needs both a name and a value (or neither).")
    await expect(page.locator("#server-header-value")).to_be_focused()
    assert HEADER_VALUE not in await everything_the_page_holds(page)


async def test_a_server_is_deleted_only_once_confirmed(console: Console) -> None:
    page = await console.open(ADMIN_KEY)
    await add_server(page, "crm", "https://mcp.example.com/mcp")
    crm = card(page, "crm")
    dialog = page.locator("#delete-dialog")

    await crm.get_by_role("button", name="Delete crm").click()
    await expect(dialog).to_be_visible()
    await expect(page.locator("#delete-title")).to_have_text("Delete crm?")
    await expect(page.locator("#delete-text")).to_contain_text("crm and its tools leave your runs")
    await dialog.get_by_role("button", name="Cancel").click()
    await expect(dialog).to_be_hidden()
    await expect(crm).to_have_count(1)
    assert "crm" in console.gateway.servers["acme"]

    await crm.get_by_role("button", name="Delete crm").click()
    await dialog.get_by_role("button", name="Delete").click()
    await expect(crm).to_have_count(0, timeout=WAIT_MS)
    await expect(page.locator("#tools input[name=tool][value=crm_tool]")).to_have_count(0, timeout=WAIT_MS)
    assert "crm" not in console.gateway.servers["acme"]


async def test_a_servers_last_error_and_state_are_shown(console: Console) -> None:
    page = await console.open(ADMIN_KEY)
    await add_server(page, "crm", "https://mcp.example.com/mcp")
    await expect(card(page, "crm")).to_have_count(1, timeout=WAIT_MS)
    console.gateway.servers["acme"]["crm"] |= {"state": "failed", "lastError": "connection refused by <b>peer</b>"}

    await page.locator("#servers-refresh").click()

    crm = card(page, "crm")
    await expect(crm.locator(".server-state")).to_have_text("failed", timeout=WAIT_MS)
    await expect(crm.locator(".server-error")).to_have_text("Last error: connection refused by <b>peer</b>")
    await expect(crm.locator("b")).to_have_count(0)  # text, never HTML


async def test_an_admin_reads_and_changes_the_tenants_runtime_within_its_caps(console: Console) -> None:
    page = await console.open(ADMIN_KEY)
    await expect(page.locator("#runtime-heading")).to_have_text("Runtime of acme")
    await expect(page.locator("#runtime-max-iterations")).to_have_value("8")
    await expect(page.locator("#runtime-max-iterations-note")).to_contain_text("at most 8")
    await expect(page.locator("#runtime-max-iterations-note")).to_contain_text("the operator's default")
    await expect(page.locator("#runtime-stream-mode")).to_have_value("live")
    await expect(page.locator("#runtime-agent-enabled")).to_be_checked()
    await expect(page.locator("#runtime-defaults")).to_be_disabled()
    await expect(page.locator("#runtime-tool-cache")).to_be_disabled()  # the service keeps no tool results
    await expect(page.locator("#runtime-tool-cache-note")).to_have_text(
        "The operator keeps no tool results: the cache is off."
    )

    await page.locator("#runtime-max-iterations").fill("9")
    await page.locator("#runtime-save").click()
    await expect(page.locator("#runtime-error")).to_contain_text("Not saved:")
    await expect(page.locator("#runtime-error")).to_contain_text("at most 8")

    await page.locator("#runtime-max-iterations").fill("5")
    await page.locator("#runtime-stream-mode").select_option("final_only")
    await page.locator("#runtime-save").click()
    await expect(page.locator("#runtime-note")).to_have_text("Saved: your tenant's next runs use it.")
    await expect(page.locator("#runtime-error")).to_be_hidden()
    await expect(page.locator("#runtime-max-iterations-note")).to_contain_text("set for your tenant")

    await page.reload()
    await expect(page.locator("body[data-ready=true]")).to_have_count(1, timeout=WAIT_MS)
    await expect(page.locator("#runtime-max-iterations")).to_have_value("5")
    await expect(page.locator("#runtime-stream-mode")).to_have_value("final_only")
    await page.locator("#runtime-defaults").click()
    await expect(page.locator("#runtime-max-iterations")).to_have_value("8")
    await expect(page.locator("#runtime-stream-mode")).to_have_value("live")
    await expect(page.locator("#runtime-defaults")).to_be_disabled()


async def test_a_key_that_may_not_use_the_admin_api_sees_neither_section(console: Console) -> None:
    page = await console.open(APP_KEY)

    await expect(page.locator("#servers-panel")).to_be_hidden()
    await expect(page.locator("#runtime-panel")).to_be_hidden()
    await expect(page.locator("#model")).to_have_value("demo")  # the rest of the console works as ever
    admin_calls = [r for r in console.gateway.requests if "/tenants/" in r.path]
    assert admin_calls == []  # refused by agent-service (403 admin_only) before the gateway


async def test_on_a_phone_the_sections_fit_the_side_panel(console: Console) -> None:
    page = await console.open(ADMIN_KEY, width=390, height=844)
    await expect(page.locator("#servers-panel")).to_be_hidden()  # the side panel is closed
    await page.locator("#toggle-side").click()
    await add_server(page, "a-server-with-a-long-name", "https://" + "long-host-" * 12 + ".example.com/mcp")

    await expect(card(page, "a-server-with-a-long-name")).to_be_visible(timeout=WAIT_MS)
    await expect(page.locator("#runtime-panel")).to_be_visible()
    overflow = await page.locator("#side").evaluate("side => side.scrollWidth - side.clientWidth")
    assert overflow <= 0
