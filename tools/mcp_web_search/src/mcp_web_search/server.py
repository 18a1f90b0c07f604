"""The MCP server: one ``web_search`` tool over the configured backends.

No ``from __future__ import annotations`` here: the SDK reads the tool's annotations at run time
to build its schemas, and string annotations inside ``build_server`` could not be resolved.
"""

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.metadata import version
from typing import Annotated, Any

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp_web_search.backends import SearchBackend, configured_backends
from mcp_web_search.results import WebSearchOutput, format_results
from mcp_web_search.search import MAX_QUERY_CHARS, NO_BACKEND_MESSAGE, search_in_order, validate_search_request
from mcp_web_search.settings import WebSearchSettings

__all__ = ["WEB_SEARCH_DESCRIPTION", "WebSearchState", "build_server"]

_VERSION = version("loopsuite-mcp-web-search")
# Some instances (and their bot limiters) refuse clients that do not say who they are.
_USER_AGENT = f"loopsuite-mcp-web-search/{_VERSION}"

WEB_SEARCH_DESCRIPTION = (
    "Search the web and return the top results, best first: title, URL, a short snippet and, when known, "
    "the publication date. Use it for recent events, facts that may have changed, or to find sources to cite. "
    "Write the query as you would type it into a search engine (a few specific keywords, in the language of "
    "the pages you want). Snippets are extracts, not whole pages: cite the URL when you rely on a result."
)


@dataclass(frozen=True)
class WebSearchState:
    """What the lifespan owns for the tool calls of every session."""

    backends: Sequence[SearchBackend]


def build_server(
    settings: WebSearchSettings, backends: Sequence[SearchBackend] | None = None
) -> MCPServer[WebSearchState]:
    """The web search MCP server. ``backends`` replaces the ones the settings configure (tests, embedding)."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[WebSearchState]) -> AsyncIterator[WebSearchState]:
        # One client for every call: connection pooling, and a timeout on every request it makes.
        async with httpx.AsyncClient(timeout=settings.timeout_seconds, headers={"User-Agent": _USER_AGENT}) as http:
            chosen = list(backends) if backends is not None else configured_backends(settings, http)
            yield WebSearchState(backends=chosen)

    server: MCPServer[WebSearchState] = MCPServer(
        "web-search",
        version=_VERSION,
        instructions="web_search finds current information on the web; cite the URLs of the results you use.",
        lifespan=lifespan,
    )

    @server.tool(
        name="web_search",
        title="Web search",
        description=WEB_SEARCH_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
    )
    async def web_search(
        ctx: Context[WebSearchState, Any],
        query: Annotated[
            str, Field(description=f"What to search for: a few keywords, at most {MAX_QUERY_CHARS} characters.")
        ],
        max_results: Annotated[
            int, Field(description=f"How many results to return, from 1 to {settings.max_results_cap}.")
        ] = 5,
    ) -> Annotated[CallToolResult, WebSearchOutput]:
        query = validate_search_request(query, max_results, settings.max_results_cap)
        state = ctx.request_context.lifespan_context
        backend, results = await search_in_order(state.backends, query, max_results, settings.timeout_seconds)
        output = WebSearchOutput(query=query, backend=backend, results=results)
        return CallToolResult(
            content=[TextContent(type="text", text=format_results(query, results))],
            structured_content=output.model_dump(mode="json"),
        )

    # custom_route carries no type annotations in mcp 2.3.0; the handlers below are typed.
    @server.custom_route("/healthz", methods=["GET"])  # type: ignore[untyped-decorator]
    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @server.custom_route("/readyz", methods=["GET"])  # type: ignore[untyped-decorator]
    async def readyz(_: Request) -> Response:
        has_backend = bool(backends) if backends is not None else settings.searxng_url is not None
        check = "ok" if has_backend else NO_BACKEND_MESSAGE
        return JSONResponse(
            {"status": "ready" if has_backend else "not_ready", "checks": {"backends": check}},
            status_code=200 if has_backend else 503,
        )

    return server
