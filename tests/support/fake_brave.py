"""A scripted Brave Search API: ``GET /res/v1/web/search`` answering in Brave's real JSON format.

Shape of a web search answer (https://api-dashboard.search.brave.com/app/documentation/web-search)::

    {"query": {"original": "...", ...}, "mixed": {...}, "type": "search",
     "web": {"type": "search", "results": [{"title", "url", "description", "page_age", "age",
             "profile", "meta_url", "language", "family_friendly", "type": "search_result", ...}],
             "family_friendly": true}}

Errors are ``{"type": "ErrorResponse", "error": {"id", "status", "code", "detail", "meta"}, "time"}``:
a wrong ``X-Subscription-Token`` is a 422 ``SUBSCRIPTION_TOKEN_INVALID``, a missing one a 422
``VALIDATION``, too many requests a 429 ``RATE_LIMITED`` with ``X-RateLimit-*`` headers.
Serve ``.app`` with ``support.servers.serve_app``; the endpoint is ``<base>/res/v1/web/search``.
"""

from __future__ import annotations

import copy
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

__all__ = ["BRAVE_PATH", "DEFAULT_BRAVE_RESULTS", "ScriptedBrave"]

BRAVE_PATH = "/res/v1/web/search"


def _result(url: str, title: str, description: str, page_age: str | None = None) -> dict[str, Any]:
    host = url.split("/")[2]
    entry: dict[str, Any] = {
        "title": title,
        "url": url,
        "is_source_local": False,
        "is_source_both": False,
        "description": description,
        "profile": {
            "name": host.split(".")[-2].capitalize(),
            "url": url,
            "long_name": host,
            "img": "https://imgs.search.brave.com/abc/rs:fit:32:32:1/g:ce/aHR0cDovL2Zh/dmljb24.png",
        },
        "language": "en",
        "family_friendly": True,
        "type": "search_result",
        "subtype": "generic",
        "is_live": False,
        "meta_url": {
            "scheme": "https",
            "netloc": host,
            "hostname": host,
            "favicon": "https://imgs.search.brave.com/abc/rs:fit:32:32:1/g:ce/ZmF2aWNvbg.png",
            "path": "\u203a " + " \u203a ".join(part for part in url.split("/")[3:] if part),
        },
    }
    if page_age is not None:
        entry["page_age"] = page_age
        entry["age"] = "June 18, 2025"
    return entry


DEFAULT_BRAVE_RESULTS: list[dict[str, Any]] = [
    _result(
        "https://modelcontextprotocol.io/introduction?utm_source=brave&utm_medium=search",
        "Introduction - Model Context Protocol",
        "The <strong>Model Context Protocol</strong> (MCP) is an open protocol that standardizes how "
        "applications provide context to LLMs &amp; agents.",
        "2025-06-18T00:00:00",
    ),
    _result(
        "https://github.com/modelcontextprotocol/python-sdk",
        "GitHub - modelcontextprotocol/python-sdk: The official Python SDK for MCP",
        "The official <strong>Python SDK</strong> for <strong>Model Context Protocol</strong> servers and clients.",
    ),
    _result(
        "https://modelcontextprotocol.io/introduction/",
        "Introduction (duplicate with a trailing slash)",
        "The same page, listed twice.",
    ),
]


class ScriptedBrave:
    """A Brave Search API whose answers a test sets.

    ``api_key``: the token it accepts. ``results``: the web results of every search (Brave's shape).
    ``requests``: ``(query params, headers)`` of every request received. ``rate_limit()`` and
    ``fail_with(status)`` make later requests fail; ``recover()`` undoes them.
    """

    def __init__(self, api_key: str = "BSA-test-key", results: list[dict[str, Any]] | None = None) -> None:
        self.api_key = api_key
        self.results: list[dict[str, Any]] = copy.deepcopy(DEFAULT_BRAVE_RESULTS) if results is None else results
        self.requests: list[tuple[dict[str, str], dict[str, str]]] = []
        self._failure: Response | None = None
        self.app = Starlette(routes=[Route(BRAVE_PATH, self._search, methods=["GET"])])

    def rate_limit(self) -> None:
        """Answer later requests like a plan over its per-second limit."""
        self._failure = _error(
            429,
            "RATE_LIMITED",
            "Request rate limit exceeded for plan.",
            {"plan": "Free", "rate_limit": 1, "rate_current": 2, "quota_limit": 2000, "quota_current": 15},
            headers={
                "X-RateLimit-Limit": "1, 2000",
                "X-RateLimit-Policy": "1;w=1, 2000;w=2592000",
                "X-RateLimit-Remaining": "0, 1985",
                "X-RateLimit-Reset": "1, 1419704",
            },
        )

    def fail_with(self, status: int) -> None:
        self._failure = PlainTextResponse("upstream connect error", status_code=status)

    def recover(self) -> None:
        self._failure = None

    async def _search(self, request: Request) -> Response:
        self.requests.append((dict(request.query_params), dict(request.headers)))
        token = request.headers.get("x-subscription-token")
        if token is None:
            return _error(422, "VALIDATION", "Unable to validate request parameter(s)", {"errors": []})
        if token != self.api_key:
            return _error(
                422,
                "SUBSCRIPTION_TOKEN_INVALID",
                "The provided subscription token is invalid.",
                {"component": "authentication"},
            )
        if self._failure is not None:
            return self._failure
        count = int(request.query_params.get("count", "20"))
        return JSONResponse(
            {
                "query": {
                    "original": request.query_params["q"],
                    "show_strict_warning": False,
                    "is_navigational": False,
                    "is_news_breaking": False,
                    "spellcheck_off": True,
                    "country": "us",
                    "bad_results": False,
                    "should_fallback": False,
                    "postal_code": "",
                    "city": "",
                    "header_country": "",
                    "more_results_available": True,
                    "state": "",
                },
                "mixed": {
                    "type": "mixed",
                    "main": [{"type": "web", "index": n, "all": False} for n in range(len(self.results[:count]))],
                    "top": [],
                    "side": [],
                },
                "type": "search",
                "web": {"type": "search", "results": self.results[:count], "family_friendly": True},
            },
            headers={
                "X-RateLimit-Limit": "1, 2000",
                "X-RateLimit-Policy": "1;w=1, 2000;w=2592000",
                "X-RateLimit-Remaining": "0, 1999",
                "X-RateLimit-Reset": "1, 1419704",
            },
        )


def _error(
    status: int, code: str, detail: str, meta: dict[str, Any], headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {
            "type": "ErrorResponse",
            "error": {
                "id": "5d832250-9396-4f6e-b84a-2a1fe524cd7d",
                "status": status,
                "code": code,
                "detail": detail,
                "meta": meta,
            },
            "time": 1663072993,
        },
        status_code=status,
        headers=headers,
    )
