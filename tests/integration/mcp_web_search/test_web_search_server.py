"""The web search MCP server for real: a subprocess over stdio, and streamable HTTP under uvicorn,
searching scripted SearXNG and Brave APIs (their real wire formats) and fetching pages from a scripted
site on loopback. ``WEB_SEARCH_BACKENDS`` always leaves out ``ddgs``: it would reach the internet."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, TextContent

from mcp_web_search.server import build_server
from mcp_web_search.settings import WebSearchSettings
from support.fake_brave import BRAVE_PATH, ScriptedBrave
from support.fake_searxng import DEFAULT_RESULTS, ScriptedSearxng
from support.fake_web_pages import ScriptedSite
from support.servers import free_port, serve_app

_BOUND = 20  # seconds: generous for a loaded CI machine; a healthy run takes about one


def _stdio_server(env: dict[str, str]) -> StdioServerParameters:
    # The SDK passes the child only a safe default environment (PATH, HOME...) plus `env`.
    return StdioServerParameters(command=sys.executable, args=["-m", "mcp_web_search"], env=env)


def _text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


@pytest.mark.anyio
async def test_stdio_session_searches_searxng_and_reports_its_failures_as_tool_errors() -> None:
    searxng = ScriptedSearxng()
    with anyio.fail_after(_BOUND):
        async with (
            serve_app(searxng.app) as searxng_url,
            Client(_stdio_server({"WEB_SEARCH_SEARXNG_URL": searxng_url, "WEB_SEARCH_BACKENDS": "searxng"})) as client,
        ):
            tools = (await client.list_tools()).tools
            found = await client.call_tool("web_search", {"query": "model context protocol", "max_results": 2})
            searxng.fail_with(500)  # a new query: the cache does not answer for it
            server_error = await client.call_tool("web_search", {"query": "mcp"})
            searxng.recover()
            searxng.json_enabled = False
            json_disabled = await client.call_tool("web_search", {"query": "mcp"})

    assert [tool.name for tool in tools] == ["web_search", "fetch_url"]
    assert searxng.requests[0] == {"q": "model context protocol", "format": "json"}

    assert not found.is_error
    text = _text(found)
    assert text.startswith('2 web results for "model context protocol":')
    assert f"1. {DEFAULT_RESULTS[0]['title']}\n   URL: {DEFAULT_RESULTS[0]['url']}" in text
    assert f"2. {DEFAULT_RESULTS[1]['title']}" in text
    assert DEFAULT_RESULTS[2]["url"] not in text
    assert found.structured_content is not None
    assert found.structured_content["backend"] == "searxng"
    assert [r["url"] for r in found.structured_content["results"]] == [e["url"] for e in DEFAULT_RESULTS[:2]]
    assert found.structured_content["results"][1]["published"] == "2025-11-25T00:00:00"

    # The same session keeps serving after each failure.
    assert server_error.is_error
    assert f"- searxng: SearXNG at {searxng_url} failed with HTTP 500" in _text(server_error)
    assert json_disabled.is_error
    assert "refused the JSON format (HTTP 403 Forbidden)" in _text(json_disabled)
    assert "search.formats" in _text(json_disabled)


@pytest.mark.anyio
async def test_stdio_session_without_a_backend_tells_what_to_configure() -> None:
    with anyio.fail_after(_BOUND):
        async with Client(_stdio_server({"WEB_SEARCH_BACKENDS": '["searxng", "brave"]'})) as client:
            result = await client.call_tool("web_search", {"query": "mcp"})

    assert result.is_error
    assert "No web search backend is configured: set WEB_SEARCH_SEARXNG_URL" in _text(result)


@pytest.mark.anyio
async def test_stdio_session_searches_brave_then_fetches_a_result_through_the_ssrf_guard() -> None:
    site = ScriptedSite()
    brave = ScriptedBrave()
    with anyio.fail_after(_BOUND):
        async with serve_app(site.app) as site_url, serve_app(brave.app) as brave_url:
            brave.results[0]["url"] = f"{site_url}/article?utm_source=brave"
            env = {
                "WEB_SEARCH_BACKENDS": "brave",
                "WEB_SEARCH_BRAVE_API_KEY": brave.api_key,
                "WEB_SEARCH_BRAVE_URL": brave_url + BRAVE_PATH,
                "WEB_SEARCH_SSRF_ALLOWED_NETWORKS": '["127.0.0.1/32"]',
            }
            async with Client(_stdio_server(env)) as client:
                found = await client.call_tool("web_search", {"query": "pinning addresses", "max_results": 3})
                assert found.structured_content is not None
                first_url = found.structured_content["results"][0]["url"]
                page = await client.call_tool("fetch_url", {"url": first_url})
                metadata = await client.call_tool("fetch_url", {"url": "http://169.254.169.254/latest/meta-data/"})
                redirected = await client.call_tool(
                    "fetch_url", {"url": f"{site_url}/redirect?to=http://127.0.0.2:{httpx.URL(site_url).port}/"}
                )

    assert first_url == f"{site_url}/article"
    assert brave.requests[0][1]["x-subscription-token"] == brave.api_key
    assert not page.is_error, _text(page)
    assert _text(page).startswith(f"# Pinning resolved addresses\nURL: {site_url}/article\n")
    assert metadata.is_error
    assert "169.254.169.254 is a cloud metadata endpoint" in _text(metadata)
    assert redirected.is_error
    assert "127.0.0.2 is a loopback address" in _text(redirected)
    assert [path for path, _ in site.requests] == ["/article", "/redirect"]


@pytest.mark.anyio
async def test_streamable_http_serves_web_search_at_mcp_and_health_at_healthz() -> None:
    searxng = ScriptedSearxng()
    with anyio.fail_after(_BOUND):
        async with serve_app(searxng.app) as searxng_url:
            settings = WebSearchSettings(
                searxng_url=searxng_url, backends=["searxng"], ssrf_allowed_networks=["127.0.0.1/32"]
            )
            server = build_server(settings)
            async with serve_app(server.streamable_http_app(streamable_http_path="/mcp")) as base_url:
                async with Client(f"{base_url}/mcp") as client:
                    result = await client.call_tool("web_search", {"query": "mcp python sdk"})
                    page = await client.call_tool("fetch_url", {"url": f"{base_url}/healthz"})
                async with httpx.AsyncClient(base_url=base_url, timeout=5) as http:
                    health = await http.get("/healthz")
                    ready = await http.get("/readyz")

    assert not result.is_error
    assert result.structured_content is not None
    assert len(result.structured_content["results"]) == len(DEFAULT_RESULTS)
    assert searxng.requests == [{"q": "mcp python sdk", "format": "json"}]
    assert not page.is_error, _text(page)
    assert page.structured_content is not None
    assert page.structured_content["content"] == '```json\n{\n  "status": "ok"\n}\n```'
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert ready.status_code == 200


@pytest.mark.anyio
async def test_streamable_http_reports_a_slow_searxng_once_the_timeout_passes() -> None:
    searxng = ScriptedSearxng()
    searxng.slow(1.5)
    with anyio.fail_after(_BOUND):
        async with serve_app(searxng.app) as searxng_url:
            server = build_server(WebSearchSettings(searxng_url=searxng_url, backends=["searxng"], timeout_seconds=0.3))
            async with (
                serve_app(server.streamable_http_app(streamable_http_path="/mcp")) as base_url,
                Client(f"{base_url}/mcp") as client,
            ):
                result = await client.call_tool("web_search", {"query": "mcp"})
                searxng.recover()  # let the held request go, so that shutdown need not wait for it

    assert result.is_error
    # The search deadline fires, never the HTTP client's timeout (a backstop set a little longer).
    assert "- searxng: no answer within 0.3 s (WEB_SEARCH_TIMEOUT_SECONDS)." in _text(result)
    assert "did not answer in time" not in _text(result)


@asynccontextmanager
async def _http_process(port: int, env: dict[str, str]) -> AsyncIterator[Process]:
    """``mcp-web-search --transport streamable-http``, yielded once uvicorn says it listens."""
    process = await anyio.open_process(
        [sys.executable, "-m", "mcp_web_search", "--transport", "streamable-http", "--port", str(port)],
        env=env,
    )
    try:
        assert process.stderr is not None
        async for chunk in TextReceiveStream(process.stderr):
            if "Uvicorn running on" in chunk:
                break
        yield process
    finally:
        process.terminate()
        await process.wait()


@pytest.mark.anyio
async def test_command_line_serves_streamable_http_on_the_given_port() -> None:
    port = free_port()
    with anyio.fail_after(_BOUND):
        async with _http_process(port, {"PATH": "", "WEB_SEARCH_LOG_FORMAT": "json", "WEB_SEARCH_BACKENDS": "searxng"}):
            async with httpx.AsyncClient(timeout=5) as http:
                health = await http.get(f"http://127.0.0.1:{port}/healthz")
                ready = await http.get(f"http://127.0.0.1:{port}/readyz")
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                result = await client.call_tool("web_search", {"query": "mcp"})

    assert health.status_code == 200
    assert ready.status_code == 503
    assert "WEB_SEARCH_SEARXNG_URL" in json.dumps(ready.json())
    assert result.is_error
    assert "No web search backend is configured" in _text(result)


@pytest.mark.anyio
async def test_command_line_with_invalid_settings_exits_with_the_reason_and_no_traceback() -> None:
    with anyio.fail_after(_BOUND):
        completed = await anyio.run_process(
            [sys.executable, "-m", "mcp_web_search", "--transport", "streamable-http"],
            env={"PATH": "", "WEB_SEARCH_SEARXNG_URL": "searx.example"},
            check=False,
        )

    stderr = completed.stderr.decode()
    assert completed.returncode == 1
    assert stderr.splitlines() == [
        "mcp-web-search: invalid WEB_SEARCH_* settings: "
        "WEB_SEARCH_SEARXNG_URL: must be an http:// or https:// URL, got 'searx.example'"
    ]
