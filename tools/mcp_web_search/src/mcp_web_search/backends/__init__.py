"""Search backends: one module per search API, all behind ``SearchBackend``."""

from __future__ import annotations

import httpx

from mcp_web_search.backends.base import SearchBackend, SearchBackendError
from mcp_web_search.backends.searxng import SearxngBackend
from mcp_web_search.settings import WebSearchSettings

__all__ = ["SearchBackend", "SearchBackendError", "SearxngBackend", "configured_backends"]


def configured_backends(settings: WebSearchSettings, http: httpx.AsyncClient) -> list[SearchBackend]:
    """The backends the settings enable, in the order the server tries them."""
    backends: list[SearchBackend] = []
    if settings.searxng_url:
        backends.append(SearxngBackend(http, settings.searxng_url))
    return backends
