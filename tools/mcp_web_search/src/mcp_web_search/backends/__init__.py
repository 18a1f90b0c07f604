"""Search backends: one module per search API, all behind ``SearchBackend``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from mcp_web_search.backends.base import SearchBackend, SearchBackendError
from mcp_web_search.backends.brave import BraveBackend
from mcp_web_search.backends.ddgs import DdgsBackend, DdgsClient, default_client_factory
from mcp_web_search.backends.searxng import SearxngBackend
from mcp_web_search.backends.tavily import TavilyBackend
from mcp_web_search.settings import WebSearchSettings

__all__ = [
    "BackendChoice",
    "BraveBackend",
    "DdgsBackend",
    "SearchBackend",
    "SearchBackendError",
    "SearxngBackend",
    "TavilyBackend",
    "configured_backends",
    "missing_configuration",
]

# What each backend needs before it can be used, as the operator sets it.
_REQUIRED_SETTING = {
    "searxng": "WEB_SEARCH_SEARXNG_URL",
    "brave": "WEB_SEARCH_BRAVE_API_KEY",
    "tavily": "WEB_SEARCH_TAVILY_API_KEY",
}


@dataclass(frozen=True)
class BackendChoice:
    """The backends to try, in order, and the listed ones skipped for want of a URL or a key."""

    backends: list[SearchBackend]
    unconfigured: list[str]


def missing_configuration(settings: WebSearchSettings) -> list[str]:
    """The backends of ``WEB_SEARCH_BACKENDS`` that lack their setting, as ``"brave (set WEB_SEARCH_...)"``."""
    configured = {
        "searxng": settings.searxng_url is not None,
        "brave": settings.brave_api_key is not None,
        "tavily": settings.tavily_api_key is not None,
        "ddgs": True,
    }
    return [f"{name} (set {_REQUIRED_SETTING[name]})" for name in settings.backends if not configured[name]]


def configured_backends(
    settings: WebSearchSettings,
    http: httpx.AsyncClient,
    ddgs_client_factory: Callable[[], DdgsClient] | None = None,
) -> BackendChoice:
    """The backends ``WEB_SEARCH_BACKENDS`` lists and the settings enable, in that order."""
    backends: list[SearchBackend] = []
    for name in settings.backends:
        if name == "searxng" and settings.searxng_url:
            backends.append(SearxngBackend(http, settings.searxng_url))
        elif name == "brave" and settings.brave_api_key is not None:
            backends.append(BraveBackend(http, settings.brave_api_key.get_secret_value(), settings.brave_url))
        elif name == "tavily" and settings.tavily_api_key is not None:
            backends.append(TavilyBackend(http, settings.tavily_api_key.get_secret_value(), settings.tavily_url))
        elif name == "ddgs":
            factory = ddgs_client_factory or default_client_factory(settings.timeout_seconds)
            backends.append(DdgsBackend(factory, settings.ddgs_engines))
    return BackendChoice(backends=backends, unconfigured=missing_configuration(settings))
