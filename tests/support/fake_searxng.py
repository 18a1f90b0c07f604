"""A scripted SearXNG instance: ``GET /search`` answering in SearXNG's real JSON format.

Shape of the answer (``format=json``), as SearXNG's ``webutils.get_json_response`` builds it::

    {"query": "...", "number_of_results": 0, "results": [{"url", "title", "content", "engine",
     "publishedDate", "score", ...}], "answers": [], "corrections": [], "infoboxes": [],
     "suggestions": [], "unresponsive_engines": [["engine", "reason"], ...]}

Like a real instance, it answers 403 to ``format=json`` when the JSON format is disabled and an
HTML page when no format is given. Serve ``.app`` with ``support.servers.serve_app``.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

__all__ = ["DEFAULT_RESULTS", "ScriptedSearxng"]


def _result(
    url: str,
    title: str,
    content: str,
    engines: list[str],
    score: float,
    published: str | None = None,
) -> dict[str, Any]:
    scheme, _, rest = url.partition("://")
    host, _, path = rest.partition("/")
    return {
        "url": url,
        "title": title,
        "content": content,
        "publishedDate": published,
        "thumbnail": "",
        "engine": engines[0],
        "template": "default.html",
        "parsed_url": [scheme, host, "/" + path, "", "", ""],
        "img_src": "",
        "priority": "",
        "engines": engines,
        "positions": list(range(1, len(engines) + 1)),
        "score": score,
        "category": "general",
    }


DEFAULT_RESULTS: list[dict[str, Any]] = [
    _result(
        "https://modelcontextprotocol.io/specification/2025-06-18",
        "Specification - Model Context Protocol",
        "Model Context Protocol (MCP) is an open protocol that enables seamless integration between LLM "
        "applications and external data sources and tools.",
        ["duckduckgo", "brave", "startpage"],
        9.0,
    ),
    _result(
        "https://github.com/modelcontextprotocol/python-sdk",
        "modelcontextprotocol/python-sdk: The official Python SDK for Model Context Protocol servers and clients",
        "The official Python SDK for Model Context Protocol servers and clients.",
        ["duckduckgo", "brave"],
        6.0,
        "2025-11-25T00:00:00",
    ),
    _result(
        "https://en.wikipedia.org/wiki/Model_Context_Protocol",
        "Model Context Protocol - Wikipedia",
        "The Model Context Protocol (MCP) is an open standard and open-source framework introduced by "
        "Anthropic in November 2024 to standardize the way AI systems integrate and share data.",
        ["wikipedia"],
        3.5,
        "2024-11-25T00:00:00",
    ),
]


class ScriptedSearxng:
    """A SearXNG instance whose answers a test sets.

    ``results``: the result entries returned for every query (SearXNG's dict shape; a realistic set
    by default). ``unresponsive_engines``: the ``[engine, reason]`` pairs reported with them.
    ``requests``: the query parameters of every ``/search`` request received, in order.
    ``fail_with(status)`` makes later requests fail, ``slow(seconds)`` delays them, ``recover()`` undoes both.
    """

    def __init__(self, results: list[dict[str, Any]] | None = None, *, json_enabled: bool = True) -> None:
        self.results: list[dict[str, Any]] = copy.deepcopy(DEFAULT_RESULTS) if results is None else results
        self.unresponsive_engines: list[list[str]] = []
        self.json_enabled = json_enabled
        self.requests: list[dict[str, str]] = []
        self._failure: tuple[int, dict[str, str]] | None = None
        self._delay_seconds = 0.0
        self._released: anyio.Event | None = None
        self.app = Starlette(routes=[Route("/search", self._search, methods=["GET"])])

    def fail_with(self, status: int, *, headers: dict[str, str] | None = None) -> None:
        """Answer every later request with ``status`` (and ``headers``, e.g. Retry-After) as SearXNG would."""
        self._failure = (status, headers or {})

    def slow(self, seconds: float) -> None:
        """Wait ``seconds`` before answering each later request (a slow or hung upstream).

        ``recover()`` ends the waits in progress too, so a test need not sit out the delay.
        """
        self._delay_seconds = seconds
        self._released = anyio.Event()

    def recover(self) -> None:
        """Answer normally again, at once (waiting requests included)."""
        self._failure = None
        self._delay_seconds = 0.0
        if self._released is not None:
            self._released.set()

    async def _search(self, request: Request) -> Response:
        params = dict(request.query_params)
        self.requests.append(params)
        if self._delay_seconds and self._released is not None:
            with anyio.move_on_after(self._delay_seconds):
                await self._released.wait()
        if self._failure is not None:
            status, headers = self._failure
            return PlainTextResponse(_REASONS.get(status, "Error"), status_code=status, headers=headers)
        output_format = params.get("format", "html")
        if output_format == "json" and not self.json_enabled:
            return PlainTextResponse(_REASONS[403], status_code=403)  # what SearXNG's flask.abort(403) sends
        if output_format != "json":
            return HTMLResponse("<!DOCTYPE html><html><head><title>SearXNG</title></head><body></body></html>")
        return JSONResponse(
            {
                "query": params.get("q", ""),
                "number_of_results": 0,
                "results": self.results,
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": self.unresponsive_engines,
            }
        )


_REASONS = {
    403: "Forbidden",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
