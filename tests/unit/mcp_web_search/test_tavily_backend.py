"""TavilyBackend against a scripted Tavily API on loopback: the exact request, parsing, every failure."""

from __future__ import annotations

import anyio
import httpx
import pytest

from mcp_web_search.backends.base import SearchBackendError
from mcp_web_search.backends.tavily import TavilyBackend, parse_tavily
from mcp_web_search.results import SearchResult
from support.fake_tavily import ScriptedTavily
from support.servers import serve_app


async def _outcome(
    tavily: ScriptedTavily, *, key: str = "tvly-test-key", site: str | None = None, max_results: int = 5
) -> list[SearchResult] | SearchBackendError:
    with anyio.fail_after(10):
        async with serve_app(tavily.app) as base_url, httpx.AsyncClient(timeout=5) as http:
            backend = TavilyBackend(http, key, base_url + "/search")
            try:
                return await backend.search("python asyncio", max_results, site)
            except SearchBackendError as exc:  # raised out here, not through the server's task group
                return exc


async def _search(tavily: ScriptedTavily, *, site: str | None = None, max_results: int = 5) -> list[SearchResult]:
    outcome = await _outcome(tavily, site=site, max_results=max_results)
    assert isinstance(outcome, list), outcome
    return outcome


async def _failure(tavily: ScriptedTavily, *, key: str = "tvly-test-key") -> str:
    outcome = await _outcome(tavily, key=key)
    assert isinstance(outcome, SearchBackendError), outcome
    assert outcome.backend == "tavily"
    return outcome.message


@pytest.mark.anyio
async def test_posts_the_search_with_a_bearer_key_and_parses_results() -> None:
    tavily = ScriptedTavily()

    results = await _search(tavily, max_results=4)

    ((body, headers),) = tavily.requests
    assert body == {
        "query": "python asyncio",
        "topic": "general",
        "search_depth": "basic",
        "max_results": 4,
        "include_answer": False,
        "include_raw_content": False,
        "include_images": False,
    }
    assert headers["authorization"] == "Bearer tvly-test-key"
    assert headers["content-type"] == "application/json"
    assert [r.url for r in results] == [
        "https://docs.python.org/3/library/asyncio.html",
        "https://realpython.com/async-io-python/#the-asyncio-package",
        "https://docs.python.org/3/library/asyncio-task.html",
    ]
    assert results[0].snippet == "asyncio is a library to write concurrent code using the async/await syntax."
    assert results[2].published == "Mon, 02 Jun 2025 09:00:00 GMT"


@pytest.mark.anyio
async def test_site_becomes_include_domains() -> None:
    tavily = ScriptedTavily()

    results = await _search(tavily, site="docs.python.org")

    assert tavily.requests[0][0]["include_domains"] == ["docs.python.org"]
    assert "site:" not in tavily.requests[0][0]["query"]
    assert {r.url.split("/")[2] for r in results} == {"docs.python.org"}


@pytest.mark.anyio
async def test_a_wrong_key_is_reported_with_the_setting_to_fix() -> None:
    message = await _failure(ScriptedTavily(), key="tvly-wrong")

    assert message == (
        "the Tavily API rejected the API key (HTTP 401: Unauthorized: missing or invalid API key.); "
        "check WEB_SEARCH_TAVILY_API_KEY."
    )


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (429, "the Tavily API is rate limiting this key (HTTP 429: Your request has been blocked due to excessive"),
        (432, "the Tavily API key is out of credits (HTTP 432: This request exceeds your plan's set usage limit."),
        (500, "the Tavily API failed with HTTP 500: Internal Server Error; try again later."),
    ],
)
async def test_limits_and_server_errors_say_what_happened(status: int, expected: str) -> None:
    tavily = ScriptedTavily()
    tavily.fail_with(status)

    assert (await _failure(tavily)).startswith(expected)


def test_an_answer_without_results_is_refused() -> None:
    with pytest.raises(SearchBackendError, match="no `results` list"):
        parse_tavily({"query": "q", "answer": None})
