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

from mcp_web_search.backends import SearchBackend, configured_backends
from mcp_web_search.results import WebSearchOutput, format_results
from mcp_web_search.search import MAX_QUERY_CHARS, NO_BACKEND_MESSAGE, search_in_order, validate_search_request
from mcp_web_search.settings import WebSearchSettings
from suite_common.mcp_tool import add_health_routes

__all__ = ["WEB_SEARCH_DESCRIPTION", "WebSearchState", "build_server"]

_VERSION = version("loopsuite-mcp-web-search")
# Some instances (and their bot limiters) refuse clients that do not say who they are.
_USER_AGENT = f"loopsuite-mcp-web-search/{_VERSION}"
# The deadline of one search (WEB_SEARCH_TIMEOUT_SECONDS, enforced by search_in_order) is the bound
# that fires; the HTTP client's own timeout is only a backstop, set this much longer so that the two
# never race and a slow backend always gets the same error. (httpx bounds each phase of a request,
# connect, write, read, on its own, so it could not be the whole-search deadline anyway.)
_CLIENT_TIMEOUT_MARGIN_SECONDS = 1.0

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
        client_timeout = settings.timeout_seconds + _CLIENT_TIMEOUT_MARGIN_SECONDS
        async with httpx.AsyncClient(timeout=client_timeout, headers={"User-Agent": _USER_AGENT}) as http:
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

    async def readiness(_: Request) -> dict[str, str]:
        has_backend = bool(backends) if backends is not None else settings.searxng_url is not None
        return {"backends": "ok" if has_backend else NO_BACKEND_MESSAGE}

    add_health_routes(server, readiness)

    return server
