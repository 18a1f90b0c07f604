"""WEB_SEARCH_BACKENDS in action: scripted SearXNG, Brave and Tavily on loopback, tried in the configured order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from mcp_web_search.server import build_server
from mcp_web_search.settings import WebSearchSettings
from support.fake_brave import BRAVE_PATH, ScriptedBrave
from support.fake_searxng import ScriptedSearxng
from support.fake_tavily import ScriptedTavily
from support.servers import serve_app


@dataclass
class _Upstreams:
    searxng: ScriptedSearxng
    brave: ScriptedBrave
    tavily: ScriptedTavily
    settings: dict[str, Any]


@asynccontextmanager
async def _upstreams() -> AsyncIterator[_Upstreams]:
    searxng, brave, tavily = ScriptedSearxng(), ScriptedBrave(), ScriptedTavily()
    async with (
        serve_app(searxng.app) as searxng_url,
        serve_app(brave.app) as brave_url,
        serve_app(tavily.app) as tavily_url,
    ):
        yield _Upstreams(
            searxng,
            brave,
            tavily,
            {
                "searxng_url": searxng_url,
                "brave_api_key": brave.api_key,
                "brave_url": brave_url + BRAVE_PATH,
                "tavily_api_key": tavily.api_key,
                "tavily_url": tavily_url + "/search",
            },
        )


async def _call(settings: WebSearchSettings, arguments: dict[str, Any]) -> CallToolResult:
    async with Client(build_server(settings)) as client:
        return await client.call_tool("web_search", arguments)


def _text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


@pytest.mark.anyio
async def test_the_first_backend_of_the_configured_order_answers_alone() -> None:
    with anyio.fail_after(15):
        async with _upstreams() as up:
            settings = WebSearchSettings(backends=["brave", "searxng", "tavily"], **up.settings)
            result = await _call(settings, {"query": "model context protocol"})

    assert result.structured_content is not None
    assert result.structured_content["backend"] == "brave"
    # Brave listed the introduction twice (with tracking parameters, then with a slash): once here.
    assert [r["url"] for r in result.structured_content["results"]] == [
        "https://modelcontextprotocol.io/introduction",
        "https://github.com/modelcontextprotocol/python-sdk",
    ]
    assert len(up.brave.requests) == 1
    assert up.searxng.requests == []
    assert up.tavily.requests == []


@pytest.mark.anyio
async def test_a_server_error_then_a_rate_limit_hand_over_down_the_order() -> None:
    with anyio.fail_after(15):
        async with _upstreams() as up:
            up.searxng.fail_with(500)
            up.brave.rate_limit()
            settings = WebSearchSettings(backends=["searxng", "brave", "tavily", "ddgs"], **up.settings)
            result = await _call(settings, {"query": "python asyncio", "max_results": 2})

    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["backend"] == "tavily"
    assert len(result.structured_content["results"]) == 2
    assert (len(up.searxng.requests), len(up.brave.requests), len(up.tavily.requests)) == (1, 1, 1)


@pytest.mark.anyio
async def test_when_every_backend_fails_the_error_says_what_failed_and_what_to_configure() -> None:
    with anyio.fail_after(15):
        async with _upstreams() as up:
            up.searxng.fail_with(503)
            up.brave.rate_limit()
            settings = WebSearchSettings(
                backends=["searxng", "brave", "tavily"], **{**up.settings, "tavily_api_key": "tvly-revoked"}
            )
            result = await _call(settings, {"query": "mcp"})

    assert result.is_error
    lines = _text(result).split("\n")
    assert lines[0].endswith("Web search is unavailable: every configured backend failed.")
    assert lines[1].startswith("- searxng: SearXNG at http://127.0.0.1:")
    assert lines[1].endswith("failed with HTTP 503; check the instance or try again later.")
    assert lines[2].startswith("- brave: the Brave Search API is rate limiting this key (HTTP 429")
    assert lines[3] == (
        "- tavily: the Tavily API rejected the API key (HTTP 401: Unauthorized: missing or invalid API key.); "
        "check WEB_SEARCH_TAVILY_API_KEY."
    )
    assert "tvly-revoked" not in _text(result)


@pytest.mark.anyio
async def test_a_site_restricted_search_uses_each_backends_own_way() -> None:
    with anyio.fail_after(15):
        async with _upstreams() as up:
            up.searxng.fail_with(502)
            up.brave.fail_with(500)
            settings = WebSearchSettings(backends=["searxng", "brave", "tavily"], **up.settings)
            result = await _call(settings, {"query": "asyncio", "site": "docs.python.org"})

    assert up.searxng.requests[0]["q"] == "asyncio site:docs.python.org"
    assert up.brave.requests[0][0]["q"] == "asyncio site:docs.python.org"
    assert up.tavily.requests[0][0]["query"] == "asyncio"
    assert up.tavily.requests[0][0]["include_domains"] == ["docs.python.org"]
    assert result.structured_content is not None
    assert {r["url"].split("/")[2] for r in result.structured_content["results"]} == {"docs.python.org"}


@pytest.mark.anyio
async def test_a_repeated_search_is_served_from_the_cache_without_reaching_the_backend() -> None:
    with anyio.fail_after(15):
        async with _upstreams() as up:
            settings = WebSearchSettings(backends=["brave"], cache_seconds=60, **up.settings)
            async with Client(build_server(settings)) as client:
                first = await client.call_tool("web_search", {"query": "model context protocol"})
                second = await client.call_tool("web_search", {"query": "model context protocol"})

    assert len(up.brave.requests) == 1
    assert second.structured_content == first.structured_content
    assert _text(second) == _text(first)
