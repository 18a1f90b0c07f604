"""The interface every search backend implements, and the one error they all raise."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from mcp_web_search.results import SearchResult

__all__ = ["SearchBackend", "SearchBackendError"]


@runtime_checkable
class SearchBackend(Protocol):
    """A web search API. The server tries its backends in order until one answers."""

    @property
    def name(self) -> str:
        """Short identifier shown to the model and in logs, e.g. ``"searxng"``."""
        ...

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        """At most ``max_results`` results, best first, without duplicate URLs.

        Raises ``SearchBackendError`` for any failure the caller could recover from by
        trying another backend (HTTP errors, timeouts, unreadable answers).
        """
        ...


class SearchBackendError(Exception):
    """A backend could not answer; ``message`` says why and, when it can, what to change."""

    def __init__(self, backend: str, message: str) -> None:
        super().__init__(f"{backend}: {message}")
        self.backend = backend
        self.message = message
