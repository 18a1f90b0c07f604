"""Tavily's search API (``POST /search`` with ``Authorization: Bearer tvly-...``).

Reference: https://docs.tavily.com/api-reference/endpoint/search. The answer is ``{"query",
"answer", "images", "results": [{"title", "url", "content", "score", "raw_content",
"published_date"?}], "response_time", "request_id"}``. Errors carry ``{"detail": {"error": "..."}}``:
401 bad key, 429 rate limit, 432 plan limit, 433 pay-as-you-go limit.
"""

from __future__ import annotations

from typing import Any

import httpx

from mcp_web_search.backends._http import detail, json_body, send, wait_hint
from mcp_web_search.backends.base import SearchBackendError
from mcp_web_search.results import SearchResult, result, results_of

__all__ = ["TAVILY", "TavilyBackend", "parse_tavily", "tavily_request_body"]

TAVILY = "tavily"
_MAX_RESULTS = 20  # Tavily's limit for `max_results`


class TavilyBackend:
    """Searches with Tavily under one API key."""

    name = TAVILY

    def __init__(self, http: httpx.AsyncClient, api_key: str, url: str) -> None:
        self._http = http
        self._api_key = api_key
        self._url = url

    async def search(self, query: str, max_results: int, site: str | None = None) -> list[SearchResult]:
        request = self._http.build_request(
            "POST",
            self._url,
            json=tavily_request_body(query, max_results, site),
            headers={"Accept": "application/json", "Authorization": f"Bearer {self._api_key}"},
        )
        response = await send(self._http, request, backend=TAVILY, service="the Tavily API")
        body = json_body(response)
        if response.status_code != 200:
            raise SearchBackendError(TAVILY, _status_problem(response, body))
        return parse_tavily(body)[:max_results]


def tavily_request_body(query: str, max_results: int, site: str | None) -> dict[str, Any]:
    """The search request: basic depth (one credit), no generated answer, no raw pages, no images."""
    body: dict[str, Any] = {
        "query": query,
        "topic": "general",
        "search_depth": "basic",
        "max_results": min(max_results, _MAX_RESULTS),
        "include_answer": False,
        "include_raw_content": False,
        "include_images": False,
    }
    if site:
        body["include_domains"] = [site]
    return body


def parse_tavily(body: Any) -> list[SearchResult]:
    """The results of a Tavily answer, in its order; ``SearchBackendError`` when it is not one."""
    if not isinstance(body, dict) or not isinstance(body.get("results"), list):
        raise SearchBackendError(TAVILY, "the Tavily API answered with JSON that has no `results` list.")
    return results_of(
        body["results"],
        lambda entry: result(entry.get("url"), entry.get("title"), entry.get("content"), entry.get("published_date")),
    )


def _error(body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    said = body.get("detail")
    if isinstance(said, dict):
        said = said.get("error")
    return detail(said)


def _status_problem(response: httpx.Response, body: Any) -> str:
    status = response.status_code
    text = _error(body)
    said = f": {text}" if text else ""
    if status in (401, 403):
        return f"the Tavily API rejected the API key (HTTP {status}{said}); check WEB_SEARCH_TAVILY_API_KEY."
    if status == 429:
        return f"the Tavily API is rate limiting this key (HTTP 429{said}{wait_hint(response)}); wait and retry later."
    if status in (432, 433):
        return f"the Tavily API key is out of credits (HTTP {status}{said}); raise the limit on the Tavily dashboard."
    if status >= 500:
        return f"the Tavily API failed with HTTP {status}{said}; try again later."
    return f"the Tavily API rejected the search with HTTP {status}{said}."
