"""The keyless ddgs backend: faked at the ddgs boundary (this machine has no internet, CI must not use it)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from ddgs import DDGS
from ddgs.exceptions import DDGSException, RatelimitException
from mcp import Client
from mcp.types import TextContent

from mcp_web_search.backends.base import SearchBackendError
from mcp_web_search.backends.ddgs import DdgsBackend
from mcp_web_search.server import build_server
from mcp_web_search.settings import WebSearchSettings
from support.fake_searxng import ScriptedSearxng
from support.servers import serve_app

# What DDGS().text returns: one dict per result.
_DDGS_RESULTS: list[dict[str, Any]] = [
    {
        "title": "Model Context Protocol",
        "href": "https://modelcontextprotocol.io/",
        "body": "An open protocol that enables seamless integration between LLM applications and data sources.",
    },
    {"title": "MCP on Wikipedia", "href": "https://en.wikipedia.org/wiki/Model_Context_Protocol", "body": "MCP is..."},
]


class _FakeDdgs:
    """Stands in for ``ddgs.DDGS``: answers, raises or blocks, and records its calls."""

    def __init__(self, *, error: Exception | None = None, block: threading.Event | None = None) -> None:
        self.error = error
        self.block = block
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append((query, kwargs))
        if self.block is not None:
            self.block.wait(timeout=10)
        if self.error is not None:
            raise self.error
        return _DDGS_RESULTS


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """An event a blocked fake waits on; set at the end so that no thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()


@pytest.mark.anyio
async def test_results_come_from_ddgs_text_with_the_configured_engines_and_site() -> None:
    fake = _FakeDdgs()

    results = await DdgsBackend(lambda: fake, "duckduckgo").search("mcp", 2, "modelcontextprotocol.io")

    assert fake.calls == [("mcp site:modelcontextprotocol.io", {"max_results": 2, "backend": "duckduckgo"})]
    assert [(r.title, r.url) for r in results] == [
        ("Model Context Protocol", "https://modelcontextprotocol.io/"),
        ("MCP on Wikipedia", "https://en.wikipedia.org/wiki/Model_Context_Protocol"),
    ]


@pytest.mark.anyio
async def test_no_results_from_ddgs_is_an_empty_answer() -> None:
    fake = _FakeDdgs(error=DDGSException("No results found."))

    assert await DdgsBackend(lambda: fake, "duckduckgo").search("qwzxv", 5) == []


@pytest.mark.anyio
async def test_a_rate_limit_is_a_backend_error_that_says_so() -> None:
    fake = _FakeDdgs(error=RatelimitException("https://html.duckduckgo.com/html 202 Ratelimit"))

    with pytest.raises(SearchBackendError, match="duckduckgo \\(through ddgs\\) is rate limiting this server"):
        await DdgsBackend(lambda: fake, "duckduckgo").search("mcp", 5)


@pytest.mark.anyio
async def test_without_network_the_real_ddgs_class_fails_into_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # What DDGS.text raises on a machine without internet access (measured: a DNS error, at once).
    def offline(self: DDGS, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        raise DDGSException(
            "DNSError: DNSError('error sending request for url (https://html.duckduckgo.com/html/) > "
            "error resolving DNS > no connections available')"
        )

    monkeypatch.setattr(DDGS, "text", offline)
    settings = WebSearchSettings(backends=["ddgs"], timeout_seconds=5)

    with anyio.fail_after(10):
        async with Client(build_server(settings)) as client:
            result = await client.call_tool("web_search", {"query": "mcp"})

    assert result.is_error
    (block,) = result.content
    assert isinstance(block, TextContent)
    assert "- ddgs: duckduckgo search through ddgs failed (DNSError" in block.text
    assert "It needs outbound internet access" in block.text
    assert "configure WEB_SEARCH_SEARXNG_URL, WEB_SEARCH_BRAVE_API_KEY or WEB_SEARCH_TAVILY_API_KEY" in block.text


@pytest.mark.anyio
async def test_a_failing_ddgs_falls_through_to_the_next_backend() -> None:
    fake = _FakeDdgs(error=DDGSException("ConnectError: error sending request"))
    searxng = ScriptedSearxng()
    with anyio.fail_after(10):
        async with serve_app(searxng.app) as searxng_url:
            settings = WebSearchSettings(backends=["ddgs", "searxng"], searxng_url=searxng_url)
            async with Client(build_server(settings, ddgs_client_factory=lambda: fake)) as client:
                result = await client.call_tool("web_search", {"query": "mcp"})

    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["backend"] == "searxng"
    assert len(fake.calls) == 1
    assert searxng.requests == [{"q": "mcp", "format": "json"}]


@pytest.mark.anyio
async def test_a_hung_ddgs_is_abandoned_at_the_deadline_and_the_next_backend_answers(
    released: threading.Event,
) -> None:
    fake = _FakeDdgs(block=released)
    searxng = ScriptedSearxng()
    with anyio.fail_after(10):
        async with serve_app(searxng.app) as searxng_url:
            settings = WebSearchSettings(backends=["ddgs", "searxng"], searxng_url=searxng_url, timeout_seconds=0.3)
            async with Client(build_server(settings, ddgs_client_factory=lambda: fake)) as client:
                result = await client.call_tool("web_search", {"query": "mcp"})

    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["backend"] == "searxng"
    assert not released.is_set()  # the ddgs thread was still blocked: the deadline, not ddgs, ended the wait
