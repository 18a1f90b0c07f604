"""BraveBackend against a scripted Brave Search API on loopback: the exact request, parsing, every failure."""

from __future__ import annotations

import anyio
import httpx
import pytest

from mcp_web_search.backends.base import SearchBackendError
from mcp_web_search.backends.brave import BraveBackend, parse_brave
from mcp_web_search.results import SearchResult
from support.fake_brave import BRAVE_PATH, ScriptedBrave
from support.servers import serve_app


async def _outcome(
    brave: ScriptedBrave, *, key: str = "BSA-test-key", site: str | None = None
) -> list[SearchResult] | SearchBackendError:
    with anyio.fail_after(10):
        async with serve_app(brave.app) as base_url, httpx.AsyncClient(timeout=5) as http:
            backend = BraveBackend(http, key, base_url + BRAVE_PATH)
            try:
                return await backend.search("model context protocol", 3, site)
            except SearchBackendError as exc:  # raised out here, not through the server's task group
                return exc


async def _search(brave: ScriptedBrave, *, site: str | None = None) -> list[SearchResult]:
    outcome = await _outcome(brave, site=site)
    assert isinstance(outcome, list), outcome
    return outcome


async def _failure(brave: ScriptedBrave, *, key: str = "BSA-test-key") -> str:
    outcome = await _outcome(brave, key=key)
    assert isinstance(outcome, SearchBackendError), outcome
    assert outcome.backend == "brave"
    return outcome.message


@pytest.mark.anyio
async def test_sends_the_query_count_and_subscription_token_and_parses_web_results() -> None:
    brave = ScriptedBrave()

    results = await _search(brave)

    ((params, headers),) = brave.requests
    assert params == {"q": "model context protocol", "count": "3"}
    assert headers["x-subscription-token"] == "BSA-test-key"
    assert headers["accept"] == "application/json"
    assert "authorization" not in headers
    assert results[0] == SearchResult(
        title="Introduction - Model Context Protocol",
        url="https://modelcontextprotocol.io/introduction",  # tracking parameters removed
        snippet="The Model Context Protocol (MCP) is an open protocol that standardizes how applications provide "
        "context to LLMs & agents.",  # highlights and entities decoded
        published="2025-06-18T00:00:00",
    )
    assert results[1].published is None
    assert len(results) == 3  # the backend keeps duplicates; web_search removes them


@pytest.mark.anyio
async def test_site_becomes_a_site_operator_in_the_query() -> None:
    brave = ScriptedBrave()

    await _search(brave, site="modelcontextprotocol.io")

    assert brave.requests[0][0]["q"] == "model context protocol site:modelcontextprotocol.io"


@pytest.mark.anyio
async def test_a_wrong_key_is_reported_with_the_setting_to_fix() -> None:
    message = await _failure(ScriptedBrave(), key="BSA-wrong")

    assert message == (
        "the Brave Search API rejected the API key (HTTP 422 (SUBSCRIPTION_TOKEN_INVALID: The provided "
        "subscription token is invalid.)); check WEB_SEARCH_BRAVE_API_KEY."
    )
    assert "BSA-wrong" not in message


@pytest.mark.anyio
async def test_a_rate_limit_says_so_and_when_it_resets() -> None:
    brave = ScriptedBrave()
    brave.rate_limit()

    message = await _failure(brave)

    assert message.startswith(
        "the Brave Search API is rate limiting this key (HTTP 429 (RATE_LIMITED: Request rate limit exceeded for "
        "plan.), the limit resets in 1 s)"
    )


@pytest.mark.anyio
@pytest.mark.parametrize("status", [500, 503])
async def test_a_server_error_names_the_status(status: int) -> None:
    brave = ScriptedBrave()
    brave.fail_with(status)

    assert await _failure(brave) == f"the Brave Search API failed with HTTP {status}; try again later."


@pytest.mark.anyio
async def test_an_unreachable_api_is_a_backend_error() -> None:
    async with httpx.AsyncClient(timeout=5) as http:
        with anyio.fail_after(10), pytest.raises(SearchBackendError, match="could not reach the Brave Search API"):
            await BraveBackend(http, "k", "http://127.0.0.1:9" + BRAVE_PATH).search("mcp", 3)


def test_an_answer_without_web_results_is_empty_and_an_error_body_is_refused() -> None:
    assert parse_brave({"type": "search", "query": {"original": "qwzxv"}}) == []
    with pytest.raises(SearchBackendError, match="something other than search results"):
        parse_brave({"type": "ErrorResponse", "error": {"code": "X"}})
    with pytest.raises(SearchBackendError, match="without `results`"):
        parse_brave({"type": "search", "web": {"type": "search", "results": None}})
