"""The web_search tool through an in-process MCP session: input checks, backend order, failures, site, cache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from mcp_web_search.backends.base import SearchBackend, SearchBackendError
from mcp_web_search.cache import TtlCache
from mcp_web_search.results import SearchResult
from mcp_web_search.search import WebSearcher
from mcp_web_search.server import build_server, fetch_url_tool, web_search_tool
from mcp_web_search.settings import WebSearchSettings

_PAGE = SearchResult(title="MCP", url="https://modelcontextprotocol.io", snippet="The protocol.")


class _ScriptedBackend:
    """A backend that answers, fails or hangs as told, and records what it was asked."""

    def __init__(
        self,
        name: str,
        results: list[SearchResult] | None = None,
        *,
        error: Exception | None = None,
        hang: bool = False,
    ) -> None:
        self.name = name
        self._results = results or []
        self._error = error
        self._hang = hang
        self.calls: list[tuple[str, int]] = []
        self.sites: list[str | None] = []

    async def search(self, query: str, max_results: int, site: str | None = None) -> list[SearchResult]:
        self.calls.append((query, max_results))
        self.sites.append(site)
        if self._hang:
            await anyio.sleep_forever()
        if self._error is not None:
            raise self._error
        return self._results


def _settings(**overrides: object) -> WebSearchSettings:
    return WebSearchSettings(**{"searxng_url": None, "backends": ["searxng"], **overrides})  # type: ignore[arg-type]


@asynccontextmanager
async def _client(backends: list[SearchBackend] | None, **settings: object) -> AsyncIterator[Client]:
    with anyio.fail_after(10):
        async with Client(build_server(_settings(**settings), backends)) as client:
            yield client


def _text(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


@pytest.mark.anyio
async def test_results_come_back_as_numbered_text_and_structured_content() -> None:
    backend = _ScriptedBackend("searxng", [_PAGE])
    async with _client([backend]) as client:
        result = await client.call_tool("web_search", {"query": "  what is mcp  ", "max_results": 3})

    assert not result.is_error
    assert backend.calls == [("what is mcp", 3)]
    assert _text(result).startswith(
        '1 web result for "what is mcp":\n\n1. MCP\n   URL: https://modelcontextprotocol.io'
    )
    assert result.structured_content == {
        "query": "what is mcp",
        "site": None,
        "backend": "searxng",
        "results": [
            {"title": "MCP", "url": "https://modelcontextprotocol.io", "snippet": "The protocol.", "published": None}
        ],
    }


@pytest.mark.anyio
async def test_tool_is_listed_with_input_bounds_and_an_output_schema() -> None:
    async with _client([], max_results_cap=7) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}

    tool = tools["web_search"]
    assert tool.input_schema["required"] == ["query"]
    assert tool.input_schema["properties"]["max_results"]["default"] == 5
    assert "from 1 to 7" in tool.input_schema["properties"]["max_results"]["description"]
    assert "docs.python.org" in tool.input_schema["properties"]["site"]["description"]
    assert tool.output_schema is not None
    assert set(tool.output_schema["properties"]) == {"query", "site", "backend", "results"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "advice"),
    [
        ({"query": ""}, "The query is empty: pass a few keywords"),
        ({"query": " \n\t "}, "The query is empty"),
        ({"query": "x" * 1001}, "1001 characters long; the limit is 1000"),
        ({"query": "mcp", "max_results": 0}, "max_results must be between 1 and 8, got 0"),
        ({"query": "mcp", "max_results": 9}, "max_results must be between 1 and 8, got 9"),
        ({"query": "mcp", "site": "not a domain"}, "site must be a domain name such as `docs.python.org`"),
        ({"query": "mcp", "site": "localhost"}, "site must be a domain name"),
    ],
)
async def test_bad_input_is_refused_with_what_to_change(arguments: dict[str, object], advice: str) -> None:
    backend = _ScriptedBackend("searxng", [_PAGE])
    async with _client([backend], max_results_cap=8) as client:
        result = await client.call_tool("web_search", arguments)

    assert result.is_error
    assert advice in _text(result)
    assert backend.calls == []


@pytest.mark.anyio
async def test_a_query_of_exactly_the_limit_is_accepted() -> None:
    async with _client([_ScriptedBackend("searxng", [_PAGE])]) as client:
        result = await client.call_tool("web_search", {"query": "x" * 1000, "max_results": 20})

    assert not result.is_error


@pytest.mark.anyio
async def test_without_backends_the_error_says_what_to_configure() -> None:
    async with _client([]) as client:
        result = await client.call_tool("web_search", {"query": "mcp"})

    assert result.is_error
    assert _text(result).endswith(
        "No web search backend is configured: set WEB_SEARCH_SEARXNG_URL (a SearXNG instance with the JSON format "
        'enabled), WEB_SEARCH_BRAVE_API_KEY or WEB_SEARCH_TAVILY_API_KEY, or add "ddgs" (keyless) to '
        "WEB_SEARCH_BACKENDS."
    )


@pytest.mark.anyio
async def test_a_failing_backend_hands_over_to_the_next() -> None:
    first = _ScriptedBackend("searxng", error=SearchBackendError("searxng", "failed with HTTP 502"))
    second = _ScriptedBackend("other", [_PAGE])
    async with _client([first, second]) as client:
        result = await client.call_tool("web_search", {"query": "mcp"})

    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["backend"] == "other"
    assert first.calls == second.calls == [("mcp", 5)]


@pytest.mark.anyio
async def test_when_every_backend_fails_the_error_lists_each_failure() -> None:
    backends: list[SearchBackend] = [
        _ScriptedBackend("searxng", error=SearchBackendError("searxng", "refused the JSON format (HTTP 403)")),
        _ScriptedBackend("buggy", error=KeyError("oops")),
        _ScriptedBackend("hung", hang=True),
    ]
    async with _client(backends, timeout_seconds=0.2) as client:
        result = await client.call_tool("web_search", {"query": "mcp"})
        # The server survived all of it and still answers.
        still_listed = (await client.list_tools()).tools

    assert result.is_error
    text = _text(result)
    assert "every configured backend failed" in text
    assert "- searxng: refused the JSON format (HTTP 403)" in text
    assert "- buggy: unexpected error" in text
    assert "oops" not in text
    assert "- hung: no answer within 0.2 s (WEB_SEARCH_TIMEOUT_SECONDS)" in text
    assert [tool.name for tool in still_listed] == ["web_search", "fetch_url"]


@pytest.mark.anyio
async def test_an_empty_answer_is_a_result_not_an_error() -> None:
    async with _client([_ScriptedBackend("searxng", [])]) as client:
        result = await client.call_tool("web_search", {"query": "qwzxv"})

    assert not result.is_error
    assert _text(result).startswith('No web results found for "qwzxv"')
    assert result.structured_content == {"query": "qwzxv", "site": None, "backend": "searxng", "results": []}


def _page(url: str, title: str = "Page") -> SearchResult:
    return SearchResult(title=title, url=url, snippet="")


@pytest.mark.anyio
async def test_duplicates_of_a_page_are_listed_once_in_rank_order() -> None:
    backend = _ScriptedBackend(
        "searxng",
        [
            _page("https://example.org/guide?utm_source=news&id=7", "First"),
            _page("http://EXAMPLE.org/guide/?id=7#intro", "Same page"),
            _page("https://example.org/guide?id=7&utm_medium=email&fbclid=abc", "Same page, more tracking"),
            _page("https://example.org/guide?id=8", "Another page"),
        ],
    )
    async with _client([backend]) as client:
        result = await client.call_tool("web_search", {"query": "guide"})

    assert result.structured_content is not None
    assert [(r["title"], r["url"]) for r in result.structured_content["results"]] == [
        ("First", "https://example.org/guide?utm_source=news&id=7"),
        ("Another page", "https://example.org/guide?id=8"),
    ]


@pytest.mark.anyio
async def test_site_is_passed_to_the_backend_and_results_off_the_domain_are_dropped() -> None:
    backend = _ScriptedBackend(
        "searxng",
        [
            _page("https://docs.python.org/3/library/asyncio.html", "asyncio"),
            _page("https://realpython.com/async-io-python/", "elsewhere"),
            _page("https://bugs.docs.python.org/issue1", "a subdomain"),
            _page("https://notdocs.python.org.evil.example/", "lookalike"),
        ],
    )
    async with _client([backend]) as client:
        result = await client.call_tool("web_search", {"query": "asyncio", "site": "https://Docs.Python.org/3/"})

    assert backend.sites == ["docs.python.org"]
    assert result.structured_content is not None
    assert result.structured_content["site"] == "docs.python.org"
    assert [r["title"] for r in result.structured_content["results"]] == ["asyncio", "a subdomain"]
    assert _text(result).startswith('2 web results for "asyncio" on docs.python.org:')


@pytest.mark.anyio
async def test_the_same_search_within_the_ttl_is_answered_from_the_cache() -> None:
    backend = _ScriptedBackend("searxng", [_PAGE])
    async with _client([backend], cache_seconds=60) as client:
        first = await client.call_tool("web_search", {"query": "what is mcp"})
        again = await client.call_tool("web_search", {"query": "  What   is MCP "})
        other = await client.call_tool("web_search", {"query": "what is mcp", "max_results": 2})

    assert first.structured_content is not None
    assert again.structured_content is not None
    assert again.structured_content["results"] == first.structured_content["results"]
    assert not other.is_error
    assert backend.calls == [("what is mcp", 5), ("what is mcp", 2)]


@pytest.mark.anyio
async def test_a_ttl_of_zero_turns_the_cache_off_and_failures_are_never_cached() -> None:
    flaky = _ScriptedBackend("searxng", error=SearchBackendError("searxng", "failed with HTTP 502"))
    async with _client([flaky], cache_seconds=0) as client:
        await client.call_tool("web_search", {"query": "mcp"})
        await client.call_tool("web_search", {"query": "mcp"})

    assert len(flaky.calls) == 2


@pytest.mark.anyio
async def test_when_every_backend_fails_the_error_names_the_unconfigured_ones_too() -> None:
    settings = _settings(backends=["searxng", "brave", "tavily"], searxng_url="http://127.0.0.1:9")
    with anyio.fail_after(10):
        async with Client(build_server(settings)) as client:
            result = await client.call_tool("web_search", {"query": "mcp"})

    assert result.is_error
    text = _text(result)
    assert "- searxng: could not reach SearXNG at http://127.0.0.1:9" in text
    assert "Not configured: brave (set WEB_SEARCH_BRAVE_API_KEY), tavily (set WEB_SEARCH_TAVILY_API_KEY)." in text
    assert "Do not retry this call right away" in text


@pytest.mark.anyio
async def test_the_tool_functions_answer_without_an_mcp_session() -> None:
    backend = _ScriptedBackend("searxng", [_PAGE])
    searcher = WebSearcher([backend], deadline_seconds=5, cache=TtlCache(60, 8))
    settings = _settings()

    first = await web_search_tool(searcher, settings, "  what is mcp ", 3, "modelcontextprotocol.io")
    again = await web_search_tool(searcher, settings, "what is mcp", 3, "modelcontextprotocol.io")

    assert backend.calls == [("what is mcp", 3)]  # the second answer came from the searcher's cache
    assert first.structured_content == again.structured_content
    assert first.structured_content is not None
    assert (first.structured_content["backend"], first.structured_content["site"]) == (
        "searxng",
        "modelcontextprotocol.io",
    )

    # fetch_url reads through whatever client it is given (the server gives it the guarded one).
    def page(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="Plain words.", headers={"content-type": "text/plain"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(page)) as client:
        fetched = await fetch_url_tool(client, settings, "https://example.org/notes.txt", 500)
        with pytest.raises(ToolError, match="max_chars must be between 100 and 100000, got 99"):
            await fetch_url_tool(client, settings, "https://example.org/notes.txt", 99)

    assert fetched.structured_content is not None
    assert fetched.structured_content["final_url"] == "https://example.org/notes.txt"
    assert "Plain words." in _text(fetched)
