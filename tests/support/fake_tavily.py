"""A scripted Tavily API: ``POST /search`` answering in Tavily's real JSON format.

Request (https://docs.tavily.com/api-reference/endpoint/search): ``Authorization: Bearer tvly-...``
and a JSON body ``{"query", "topic", "search_depth", "max_results", "include_domains", ...}``.
Answer::

    {"query": "...", "follow_up_questions": null, "answer": null, "images": [],
     "results": [{"url", "title", "content", "score", "raw_content": null}],
     "response_time": 1.09, "request_id": "..."}

Errors are ``{"detail": {"error": "..."}}``: 401 for a missing or wrong key, 429 for too many
requests, 432 when the plan's credits are used up. Serve ``.app`` with ``support.servers.serve_app``;
the endpoint is ``<base>/search``.
"""

from __future__ import annotations

import copy
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["DEFAULT_TAVILY_RESULTS", "ScriptedTavily"]

DEFAULT_TAVILY_RESULTS: list[dict[str, Any]] = [
    {
        "url": "https://docs.python.org/3/library/asyncio.html",
        "title": "asyncio — Asynchronous I/O — Python 3 documentation",
        "content": "asyncio is a library to write concurrent code using the async/await syntax.",
        "score": 0.91,
        "raw_content": None,
    },
    {
        "url": "https://realpython.com/async-io-python/#the-asyncio-package",
        "title": "Async IO in Python: A Complete Walkthrough",
        "content": "This tutorial will give you a firm grasp of Python's approach to async IO.",
        "score": 0.78,
        "raw_content": None,
    },
    {
        "url": "https://docs.python.org/3/library/asyncio-task.html",
        "title": "Coroutines and Tasks — Python 3 documentation",
        "content": "This section outlines high-level asyncio APIs to work with coroutines and Tasks.",
        "score": 0.65,
        "raw_content": None,
        "published_date": "Mon, 02 Jun 2025 09:00:00 GMT",
    },
]

_RATE_LIMITED = "Your request has been blocked due to excessive requests. Please reduce rate of requests."
_PLAN_LIMIT = "This request exceeds your plan's set usage limit. Please upgrade your plan or contact support@tavily.com"


class ScriptedTavily:
    """A Tavily API whose answers a test sets.

    ``api_key``: the key it accepts. ``results``: every search's results (filtered by
    ``include_domains`` as Tavily does). ``requests``: ``(JSON body, headers)`` of each request.
    ``fail_with(status)`` answers later requests with Tavily's error for that status; ``recover()`` undoes it.
    """

    def __init__(self, api_key: str = "tvly-test-key", results: list[dict[str, Any]] | None = None) -> None:
        self.api_key = api_key
        self.results: list[dict[str, Any]] = copy.deepcopy(DEFAULT_TAVILY_RESULTS) if results is None else results
        self.requests: list[tuple[dict[str, Any], dict[str, str]]] = []
        self._failure: int | None = None
        self.app = Starlette(routes=[Route("/search", self._search, methods=["POST"])])

    def fail_with(self, status: int) -> None:
        self._failure = status

    def recover(self) -> None:
        self._failure = None

    async def _search(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append((body, dict(request.headers)))
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return JSONResponse({"detail": {"error": "Unauthorized: missing or invalid API key."}}, status_code=401)
        if self._failure == 429:
            return JSONResponse({"detail": {"error": _RATE_LIMITED}}, status_code=429)
        if self._failure == 432:
            return JSONResponse({"detail": {"error": _PLAN_LIMIT}}, status_code=432)
        if self._failure is not None:
            return JSONResponse({"detail": {"error": "Internal Server Error"}}, status_code=self._failure)
        domains = body.get("include_domains") or []
        results = [
            entry
            for entry in self.results
            if not domains or any(entry["url"].split("/")[2].endswith(domain) for domain in domains)
        ]
        return JSONResponse(
            {
                "query": body["query"],
                "follow_up_questions": None,
                "answer": None,
                "images": [],
                "results": results[: body.get("max_results", 5)],
                "response_time": 1.09,
                "request_id": "123e4567-e89b-12d3-a456-426614174111",
            }
        )
