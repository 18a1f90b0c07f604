"""Brave Search API's web search (``GET /res/v1/web/search``, key in ``X-Subscription-Token``).

Reference: https://api-dashboard.search.brave.com/app/documentation/web-search. The answer is
``{"type": "search", "query": {...}, "web": {"type": "search", "results": [{"title", "url",
"description", "page_age", "age", ...}]}, ...}``; ``description`` carries ``<strong>`` highlights.
Errors are ``{"type": "ErrorResponse", "error": {"code", "detail", "status", ...}}``: a bad key is a
422 ``SUBSCRIPTION_TOKEN_INVALID``, a rate limit a 429 ``RATE_LIMITED`` with ``X-RateLimit-*`` headers.
"""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

from mcp_web_search.backends._http import detail, json_body, send, wait_hint
from mcp_web_search.backends.base import SearchBackendError, with_site_operator
from mcp_web_search.results import SearchResult, result, results_of

__all__ = ["BRAVE", "BraveBackend", "parse_brave"]

BRAVE = "brave"
_MAX_COUNT = 20  # Brave's limit for `count`
_TAG = re.compile(r"<[^>]+>")
_KEY_CODES = frozenset({"SUBSCRIPTION_TOKEN_INVALID", "SUBSCRIPTION_TOKEN_MISSING", "SUBSCRIPTION_TOKEN_EXPIRED"})


class BraveBackend:
    """Searches Brave's index with one subscription token."""

    name = BRAVE

    def __init__(self, http: httpx.AsyncClient, api_key: str, url: str) -> None:
        self._http = http
        self._api_key = api_key
        self._url = url

    async def search(self, query: str, max_results: int, site: str | None = None) -> list[SearchResult]:
        request = self._http.build_request(
            "GET",
            self._url,
            params={"q": with_site_operator(query, site), "count": min(max_results, _MAX_COUNT)},
            headers={"Accept": "application/json", "X-Subscription-Token": self._api_key},
        )
        response = await send(self._http, request, backend=BRAVE, service="the Brave Search API")
        body = json_body(response)
        if response.status_code != 200:
            raise SearchBackendError(BRAVE, _status_problem(response, body))
        return parse_brave(body)[:max_results]


def parse_brave(body: Any) -> list[SearchResult]:
    """The web results of a Brave answer, in its order; ``SearchBackendError`` when it is not one."""
    if not isinstance(body, dict) or body.get("type") == "ErrorResponse":
        raise SearchBackendError(BRAVE, "the Brave Search API answered with something other than search results.")
    web = body.get("web")
    # No `web` section at all is how Brave says it found no web page.
    entries = web.get("results") if isinstance(web, dict) else []
    if not isinstance(entries, list):
        raise SearchBackendError(BRAVE, "the Brave Search API answered with a `web` section without `results`.")
    return results_of(
        entries,
        lambda entry: result(
            entry.get("url"), _plain(entry.get("title")), _plain(entry.get("description")), entry.get("page_age")
        ),
    )


def _plain(text: object) -> object:
    """Brave's highlighted text without its markup: ``<strong>MCP</strong> &amp; you`` -> ``MCP & you``."""
    return html.unescape(_TAG.sub("", text)) if isinstance(text, str) else text


def _error(body: Any) -> tuple[str, str]:
    """``(code, detail)`` of a Brave error body (``error``, or the older ``errors`` list)."""
    if not isinstance(body, dict):
        return "", ""
    error = body.get("error")
    if not isinstance(error, dict) and isinstance(body.get("errors"), list) and body["errors"]:
        error = body["errors"][0]
    if not isinstance(error, dict):
        return "", ""
    return detail(error.get("code")), detail(error.get("detail"))


def _status_problem(response: httpx.Response, body: Any) -> str:
    status = response.status_code
    code, text = _error(body)
    said = f" ({code}: {text})" if code and text else f" ({code or text})" if code or text else ""
    if code in _KEY_CODES or status in (401, 403):
        return f"the Brave Search API rejected the API key (HTTP {status}{said}); check WEB_SEARCH_BRAVE_API_KEY."
    if status == 429:
        return (
            f"the Brave Search API is rate limiting this key (HTTP 429{said}{wait_hint(response)}); "
            "wait, or raise the plan's limits."
        )
    if status >= 500:
        return f"the Brave Search API failed with HTTP {status}{said}; try again later."
    return f"the Brave Search API rejected the search with HTTP {status}{said}."
