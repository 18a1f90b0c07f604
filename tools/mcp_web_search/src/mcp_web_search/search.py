"""What ``web_search`` does between the MCP layer and the backends: check the request, try backends in order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import anyio
from mcp.server.mcpserver.exceptions import ToolError

from mcp_web_search.backends.base import SearchBackend, SearchBackendError
from mcp_web_search.cache import TtlCache
from mcp_web_search.results import SearchResult, dedupe
from mcp_web_search.urls import host_in_site, normalize_site
from suite_common.logging import get_logger

__all__ = [
    "MAX_QUERY_CHARS",
    "NO_BACKEND_MESSAGE",
    "SearchAnswer",
    "SearchRequest",
    "WebSearcher",
    "search_in_order",
    "validate_search_request",
]

MAX_QUERY_CHARS = 1000

NO_BACKEND_MESSAGE = (
    "No web search backend is configured: set WEB_SEARCH_SEARXNG_URL (a SearXNG instance with the JSON format "
    'enabled), WEB_SEARCH_BRAVE_API_KEY or WEB_SEARCH_TAVILY_API_KEY, or add "ddgs" (keyless) to WEB_SEARCH_BACKENDS.'
)

_logger = get_logger(__name__)


@dataclass(frozen=True)
class SearchRequest:
    """A checked search: trimmed query, result count, and the host name of ``site`` if any."""

    query: str
    max_results: int
    site: str | None


@dataclass(frozen=True)
class SearchAnswer:
    backend: str
    results: list[SearchResult]


def validate_search_request(
    query: str, max_results: int, max_results_cap: int, site: str | None = None
) -> SearchRequest:
    """The request to run, or a ``ToolError`` that tells the model what to change."""
    query = query.strip()
    if not query:
        raise ToolError("The query is empty: pass a few keywords describing what to search for.")
    if len(query) > MAX_QUERY_CHARS:
        raise ToolError(
            f"The query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}. "
            "Search with a few specific keywords instead of a long text."
        )
    if not 1 <= max_results <= max_results_cap:
        raise ToolError(
            f"max_results must be between 1 and {max_results_cap}, got {max_results}. "
            f"Ask for at most {max_results_cap} results."
        )
    domain: str | None = None
    if site is not None and site.strip():
        domain = normalize_site(site)
        if domain is None:
            raise ToolError(
                f"site must be a domain name such as `docs.python.org`, got {site!r}. "
                "Pass only the domain, or leave site out to search the whole web."
            )
    return SearchRequest(query=query, max_results=max_results, site=domain)


async def search_in_order(
    backends: Sequence[SearchBackend],
    request: SearchRequest,
    deadline_seconds: float,
    unconfigured: Sequence[str] = (),
) -> SearchAnswer:
    """The answer of the first backend that answers: its results deduplicated, on ``site``, at most ``max_results``.

    A backend that fails or misses its deadline hands over to the next one; when none answers,
    a ``ToolError`` lists what failed (and what is not configured) so the model can tell the user
    and an operator can fix it.
    """
    if not backends:
        raise ToolError(NO_BACKEND_MESSAGE)
    failures: list[str] = []
    for backend in backends:
        try:
            with anyio.fail_after(deadline_seconds):
                results = await backend.search(request.query, request.max_results, request.site)
        except SearchBackendError as exc:
            _logger.warning("search_backend_failed", backend=exc.backend, reason=exc.message)
            failures.append(f"- {exc.backend}: {exc.message}")
        except TimeoutError:
            _logger.warning("search_backend_timed_out", backend=backend.name, deadline_seconds=deadline_seconds)
            failures.append(f"- {backend.name}: no answer within {deadline_seconds:g} s (WEB_SEARCH_TIMEOUT_SECONDS).")
        except Exception:
            # A bug in one backend must not take web search down while another may still answer.
            _logger.exception("search_backend_crashed", backend=backend.name)
            failures.append(f"- {backend.name}: unexpected error (details in the web search server's log).")
        else:
            unique = dedupe(results)
            if request.site is not None:
                # Not every engine honours `site:`: keep only what is really on the domain.
                unique = [item for item in unique if host_in_site(item.url, request.site)]
            return SearchAnswer(backend=backend.name, results=unique[: request.max_results])
    not_configured = f"\nNot configured: {', '.join(unconfigured)}." if unconfigured else ""
    raise ToolError(
        "Web search is unavailable: every configured backend failed.\n"
        + "\n".join(failures)
        + not_configured
        + "\nDo not retry this call right away: answer without web results and say that web search failed. "
        "An operator can fix the settings named above."
    )


def _cache_key(request: SearchRequest) -> tuple[str, int, str | None]:
    return (" ".join(request.query.casefold().split()), request.max_results, request.site)


class WebSearcher:
    """Backends in order behind a short-lived cache of answers."""

    def __init__(
        self,
        backends: Sequence[SearchBackend],
        *,
        deadline_seconds: float,
        cache: TtlCache[tuple[str, int, str | None], SearchAnswer],
        unconfigured: Sequence[str] = (),
    ) -> None:
        self.backends = list(backends)
        self._deadline_seconds = deadline_seconds
        self._cache = cache
        self._unconfigured = list(unconfigured)

    async def search(self, request: SearchRequest) -> SearchAnswer:
        key = _cache_key(request)
        cached = self._cache.get(key)
        if cached is not None:
            _logger.info("web_search_cache_hit", backend=cached.backend, results=len(cached.results))
            return cached
        answer = await search_in_order(self.backends, request, self._deadline_seconds, self._unconfigured)
        self._cache.put(key, answer)
        _logger.info("web_search_answered", backend=answer.backend, results=len(answer.results), site=request.site)
        return answer
