"""DuckDuckGo (and other engines) without a key, through the ``ddgs`` package: the keyless fallback.

``DDGS().text(query, max_results=..., backend=...)`` is blocking: it runs in a worker thread,
bounded by ddgs's own timeout and by the caller's deadline (the thread is abandoned when the
deadline passes, and finishes on its own within ddgs's timeout). Its results are
``[{"title", "href", "body"}]``. It needs outbound internet access; without it, it fails fast
(DNS error) and the next backend is tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import anyio
from ddgs import DDGS
from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

from mcp_web_search.backends._http import detail
from mcp_web_search.backends.base import SearchBackendError, with_site_operator
from mcp_web_search.results import SearchResult, result, results_of

__all__ = ["DDGS_NAME", "DdgsBackend", "DdgsClient", "parse_ddgs"]

DDGS_NAME = "ddgs"
# What ddgs raises when its engines answered and found nothing (an answer, not a failure).
_NO_RESULTS = "No results found."
# Threads that may run ddgs searches at once: an abandoned search keeps its thread until ddgs times out.
_MAX_THREADS = 4


class DdgsClient(Protocol):
    """The part of ``ddgs.DDGS`` the backend uses (a test passes its own)."""

    def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]: ...


def default_client_factory(timeout_seconds: float) -> Callable[[], DdgsClient]:
    """A new ``DDGS`` per search (it is cheap, and one is not meant to be shared across threads)."""
    return partial(DDGS, timeout=max(1, math.ceil(timeout_seconds)))


class DdgsBackend:
    """Searches through ``ddgs`` with the configured engines (``duckduckgo`` by default)."""

    name = DDGS_NAME

    def __init__(self, client_factory: Callable[[], DdgsClient], engines: str) -> None:
        self._client_factory = client_factory
        self._engines = engines
        self._threads = anyio.CapacityLimiter(_MAX_THREADS)

    async def search(self, query: str, max_results: int, site: str | None = None) -> list[SearchResult]:
        call = partial(self._search_blocking, with_site_operator(query, site), max_results)
        try:
            entries = await anyio.to_thread.run_sync(call, abandon_on_cancel=True, limiter=self._threads)
        except RatelimitException as exc:
            raise SearchBackendError(
                DDGS_NAME,
                f"{self._engines} (through ddgs) is rate limiting this server ({_reason(exc)}); "
                "try again later, or configure a backend with a key.",
            ) from exc
        except TimeoutException as exc:
            raise SearchBackendError(
                DDGS_NAME, f"{self._engines} (through ddgs) did not answer in time ({_reason(exc)})."
            ) from exc
        except DDGSException as exc:
            if str(exc) == _NO_RESULTS:
                return []
            raise SearchBackendError(DDGS_NAME, _unreachable(self._engines, _reason(exc))) from exc
        except Exception as exc:  # ddgs's HTTP layer (primp) raises its own error types
            raise SearchBackendError(DDGS_NAME, _unreachable(self._engines, _reason(exc))) from exc
        return parse_ddgs(entries)[:max_results]

    def _search_blocking(self, query: str, max_results: int) -> list[dict[str, Any]]:
        return self._client_factory().text(query, max_results=max_results, backend=self._engines)


def parse_ddgs(entries: Any) -> list[SearchResult]:
    """ddgs's ``[{"title", "href", "body", "date"?}]`` as results, in its order."""
    if not isinstance(entries, list):
        raise SearchBackendError(DDGS_NAME, "ddgs answered with something other than a list of results.")
    return results_of(
        entries,
        lambda entry: result(
            entry.get("href") or entry.get("url"), entry.get("title"), entry.get("body"), entry.get("date")
        ),
    )


def _reason(exc: BaseException) -> str:
    return detail(str(exc)) or type(exc).__name__


def _unreachable(engines: str, reason: str) -> str:
    return (
        f"{engines} search through ddgs failed ({reason}). It needs outbound internet access; where the server "
        "has none, configure WEB_SEARCH_SEARXNG_URL, WEB_SEARCH_BRAVE_API_KEY or WEB_SEARCH_TAVILY_API_KEY."
    )
