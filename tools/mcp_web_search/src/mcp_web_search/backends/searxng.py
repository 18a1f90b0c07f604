"""SearXNG's JSON search API (``GET /search?q=...&format=json``), one of the backends.

Reference: https://docs.searxng.org/dev/search_api.html. The JSON format is off on most
public instances; on your own, list ``json`` under ``search.formats`` in settings.yml.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from mcp_web_search.backends.base import SearchBackendError, with_site_operator
from mcp_web_search.results import SearchResult, dedupe, result, results_of

__all__ = ["SEARXNG", "SearxngBackend", "parse_searxng"]

SEARXNG = "searxng"


class SearxngBackend:
    """Searches one SearXNG instance through the shared HTTP client.

    The caller bounds the whole search (``search_in_order``); the client's own timeout is only a
    backstop, reported as "did not answer in time" should it ever fire first.
    """

    name = SEARXNG

    def __init__(self, http: httpx.AsyncClient, base_url: str) -> None:
        self._http = http
        base = httpx.URL(base_url)
        # Keep a query (an access token, say) and credentials of the base URL; httpx turns
        # user:password into basic auth.
        self._search_url = base.copy_with(path=base.path.rstrip("/") + "/search")
        self._shown_url = _without_credentials(base_url).rstrip("/")

    async def search(self, query: str, max_results: int, site: str | None = None) -> list[SearchResult]:
        try:
            response = await self._http.get(
                self._search_url,
                params={"q": with_site_operator(query, site), "format": "json"},
                headers={"Accept": "application/json"},
            )
        except httpx.TimeoutException as exc:
            raise SearchBackendError(
                SEARXNG,
                f"SearXNG at {self._shown_url} did not answer in time; "
                "raise WEB_SEARCH_TIMEOUT_SECONDS or check the instance.",
            ) from exc
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise SearchBackendError(
                SEARXNG,
                f"could not reach SearXNG at {self._shown_url} ({reason}); check WEB_SEARCH_SEARXNG_URL "
                "and that the instance is running.",
            ) from exc

        problem = _status_problem(response, self._shown_url)
        if problem is not None:
            raise SearchBackendError(SEARXNG, problem)
        try:
            body = response.json()
        except ValueError as exc:
            content_type = response.headers.get("content-type", "no content type")
            raise SearchBackendError(
                SEARXNG,
                f"SearXNG at {self._shown_url} answered with something other than JSON ({content_type}); "
                "is WEB_SEARCH_SEARXNG_URL the base URL of a SearXNG instance with the JSON format enabled?",
            ) from exc

        results = parse_searxng(body)
        if not results and (failed := _unresponsive_engines(body)):
            # SearXNG answers 200 with no results when its engines failed: say so, so that
            # the next backend gets a chance and the model does not conclude nothing exists.
            raise SearchBackendError(
                SEARXNG,
                f"every engine of SearXNG at {self._shown_url} failed and it found nothing: {', '.join(failed)}.",
            )
        return results[:max_results]


def parse_searxng(body: Any) -> list[SearchResult]:
    """Results of a SearXNG JSON answer, in its order, without duplicate URLs.

    Entries without an http(s) URL are skipped; a missing title falls back to the URL,
    a missing snippet to "". Raises ``SearchBackendError`` when the body is not a SearXNG answer.
    """
    if not isinstance(body, dict) or not isinstance(body.get("results"), list):
        raise SearchBackendError(SEARXNG, "SearXNG answered with JSON that has no `results` list.")
    found = results_of(
        body["results"],
        lambda entry: result(entry.get("url"), entry.get("title"), entry.get("content"), entry.get("publishedDate")),
    )
    return dedupe(found)


def _status_problem(response: httpx.Response, shown_url: str) -> str | None:
    """What a non-200 status means for the user, or None when the answer is usable."""
    status = response.status_code
    if status == 200:
        return None
    if status == 403:
        return (
            f"SearXNG at {shown_url} refused the JSON format (HTTP 403 Forbidden): the instance has it disabled. "
            "Add `json` to `search.formats` in its settings.yml, or set WEB_SEARCH_SEARXNG_URL to an instance "
            "that allows it."
        )
    if status == 429:
        retry_after = response.headers.get("retry-after")
        when = f", retry after {retry_after} s" if retry_after else ""
        return (
            f"SearXNG at {shown_url} is rate limiting this client (HTTP 429 Too Many Requests{when}); "
            "on your own instance, turn off `server.limiter` in settings.yml."
        )
    if status == 404:
        return (
            f"SearXNG at {shown_url} has no /search endpoint (HTTP 404); "
            "set WEB_SEARCH_SEARXNG_URL to the base URL of the instance."
        )
    if 300 <= status < 400:
        location = response.headers.get("location", "elsewhere")
        return (
            f"SearXNG at {shown_url} redirected to {_without_credentials(location)} (HTTP {status}); "
            "set WEB_SEARCH_SEARXNG_URL to the address it redirects to."
        )
    if status >= 500:
        return f"SearXNG at {shown_url} failed with HTTP {status}; check the instance or try again later."
    return f"SearXNG at {shown_url} rejected the search with HTTP {status}."


def _unresponsive_engines(body: dict[str, Any]) -> list[str]:
    """``unresponsive_engines`` is a list of ``[engine, reason]`` pairs; render them as "engine (reason)"."""
    entries = body.get("unresponsive_engines")
    if not isinstance(entries, list):
        return []
    described: list[str] = []
    for entry in entries:
        if isinstance(entry, list | tuple) and entry and isinstance(entry[0], str):
            reason = entry[1] if len(entry) > 1 and isinstance(entry[1], str) else "failed"
            described.append(f"{entry[0]} ({reason})")
    return described


def _without_credentials(url: str) -> str:
    """The URL as shown to a model or a log: no user:password, no query (it may carry a token)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
