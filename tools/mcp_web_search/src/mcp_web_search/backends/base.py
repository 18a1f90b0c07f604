"""The interface every search backend implements, and the one error they all raise."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from mcp_web_search.results import SearchResult

__all__ = ["SearchBackend", "SearchBackendError", "with_site_operator"]


@runtime_checkable
class SearchBackend(Protocol):
    """A web search API. The server tries its backends in order until one answers."""

    @property
    def name(self) -> str:
        """Short identifier shown to the model and in logs, e.g. ``"searxng"``."""
        ...

    async def search(self, query: str, max_results: int, site: str | None = None) -> list[SearchResult]:
        """At most ``max_results`` results, best first; ``site`` (a host name) restricts them to that domain.

        Each backend restricts to ``site`` its own way (a ``site:`` operator, a domain filter); the
        caller filters again and removes duplicates. Raises ``SearchBackendError`` for any failure the
        caller could recover from by trying another backend (HTTP errors, timeouts, unreadable answers).
        """
        ...


class SearchBackendError(Exception):
    """A backend could not answer; ``message`` says why and, when it can, what to change."""

    def __init__(self, backend: str, message: str) -> None:
        super().__init__(f"{backend}: {message}")
        self.backend = backend
        self.message = message


def with_site_operator(query: str, site: str | None) -> str:
    """The query with a ``site:`` operator, the way search engines restrict results to a domain."""
    return f"{query} site:{site}" if site else query
