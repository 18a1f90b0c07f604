"""The MCP server: ``web_search`` over the configured backends, and ``fetch_url`` through the SSRF guard.

Each tool's body is a function of its own (``web_search_tool(searcher, settings, ...)``, ``fetch_url_tool(client,
settings, ...)``), callable without an MCP session; ``build_server`` only registers them, with the parameters
the SDK publishes, and ``open_state`` is the lifespan that holds what they use.

No ``from __future__ import annotations`` here: the SDK reads the tools' annotations at run time
to build their schemas, and string annotations inside ``build_server`` could not be resolved.
"""

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from importlib.metadata import version
from typing import Annotated, Any

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field
from starlette.requests import Request

from mcp_web_search.backends import SearchBackend, configured_backends, missing_configuration
from mcp_web_search.backends.ddgs import DdgsClient
from mcp_web_search.cache import TtlCache
from mcp_web_search.fetch import FetchLimits, FetchUrlOutput, fetch_page, format_page
from mcp_web_search.results import WebSearchOutput, format_results
from mcp_web_search.search import (
    MAX_QUERY_CHARS,
    NO_BACKEND_MESSAGE,
    WebSearcher,
    validate_search_request,
)
from mcp_web_search.settings import WebSearchSettings
from suite_common.mcp_tool import add_health_routes
from suite_common.ssrf import Resolver
from suite_common.ssrf_httpx import guarded_client

__all__ = [
    "FETCH_URL_DESCRIPTION",
    "WEB_SEARCH_DESCRIPTION",
    "WebSearchState",
    "build_server",
    "fetch_url_tool",
    "open_state",
    "web_search_tool",
]

_VERSION = version("loopsuite-mcp-web-search")
# Some instances (and their bot limiters) refuse clients that do not say who they are.
_USER_AGENT = f"loopsuite-mcp-web-search/{_VERSION}"
# The deadline of one search (WEB_SEARCH_TIMEOUT_SECONDS, enforced by search_in_order) is the bound
# that fires; the HTTP client's own timeout is only a backstop, set this much longer so that the two
# never race and a slow backend always gets the same error. (httpx bounds each phase of a request,
# connect, write, read, on its own, so it could not be the whole-search deadline anyway.)
_CLIENT_TIMEOUT_MARGIN_SECONDS = 1.0
_DEFAULT_MAX_CHARS = 20_000
_MIN_MAX_CHARS = 100

WEB_SEARCH_DESCRIPTION = (
    "Search the web and return the top results, best first: title, URL, a short snippet and, when known, "
    "the publication date. Use it for recent events, facts that may have changed, or to find sources to cite. "
    "Write the query as you would type it into a search engine (a few specific keywords, in the language of "
    "the pages you want). Snippets are extracts, not whole pages: read a page with fetch_url, and cite the URL "
    "when you rely on a result."
)
FETCH_URL_DESCRIPTION = (
    "Fetch one public web page (HTML, plain text, Markdown or JSON) and return its main text as Markdown, "
    "with its title and final URL after redirects. Use it to read a result of web_search or a URL the user gave. "
    "Long pages are cut at max_chars. Private and local network addresses are refused."
)


@dataclass(frozen=True)
class WebSearchState:
    """What the lifespan owns for the tool calls of every session."""

    searcher: WebSearcher
    fetch_client: httpx.AsyncClient


_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=True)
_INSTRUCTIONS = (
    "web_search finds current information on the web; fetch_url reads one page. Cite the URLs of the results you use."
)
_SITE_DESCRIPTION = "Only return pages of this domain and its subdomains, e.g. `docs.python.org`."


def build_server(
    settings: WebSearchSettings,
    backends: Sequence[SearchBackend] | None = None,
    *,
    ddgs_client_factory: Callable[[], DdgsClient] | None = None,
    resolver: Resolver | None = None,
) -> MCPServer[WebSearchState]:
    """The web search MCP server.

    ``backends`` replaces the ones the settings configure, ``ddgs_client_factory`` the ``ddgs.DDGS``
    client, ``resolver`` the system DNS resolver of fetch_url (tests, embedding).
    """

    def lifespan(_: MCPServer[WebSearchState]) -> AbstractAsyncContextManager[WebSearchState]:
        return open_state(settings, backends, ddgs_client_factory, resolver)

    server: MCPServer[WebSearchState] = MCPServer(
        "web-search", version=_VERSION, instructions=_INSTRUCTIONS, lifespan=lifespan
    )
    cap, chars_cap = settings.max_results_cap, settings.fetch_max_chars_cap

    # The parameters' annotations are the published schema.
    @server.tool(name="web_search", title="Web search", description=WEB_SEARCH_DESCRIPTION, annotations=_READ_ONLY)
    async def web_search(
        ctx: Context[WebSearchState, Any],
        query: Annotated[
            str, Field(description=f"What to search for: a few keywords, at most {MAX_QUERY_CHARS} characters.")
        ],
        max_results: Annotated[int, Field(description=f"How many results to return, from 1 to {cap}.")] = 5,
        site: Annotated[str | None, Field(description=_SITE_DESCRIPTION)] = None,
    ) -> Annotated[CallToolResult, WebSearchOutput]:
        return await web_search_tool(ctx.request_context.lifespan_context.searcher, settings, query, max_results, site)

    @server.tool(name="fetch_url", title="Fetch a web page", description=FETCH_URL_DESCRIPTION, annotations=_READ_ONLY)
    async def fetch_url(
        ctx: Context[WebSearchState, Any],
        url: Annotated[str, Field(description="The http:// or https:// URL of the page.")],
        max_chars: Annotated[
            int,
            Field(description=f"Return at most this many characters of text, from {_MIN_MAX_CHARS} to {chars_cap}."),
        ] = min(_DEFAULT_MAX_CHARS, chars_cap),
    ) -> Annotated[CallToolResult, FetchUrlOutput]:
        return await fetch_url_tool(ctx.request_context.lifespan_context.fetch_client, settings, url, max_chars)

    async def readiness(_: Request) -> dict[str, str]:
        return {"backends": "ok" if _has_backend(settings, backends) else NO_BACKEND_MESSAGE}

    add_health_routes(server, readiness)
    return server


@asynccontextmanager
async def open_state(
    settings: WebSearchSettings,
    backends: Sequence[SearchBackend] | None = None,
    ddgs_client_factory: Callable[[], DdgsClient] | None = None,
    resolver: Resolver | None = None,
) -> AsyncIterator[WebSearchState]:
    """What every tool call uses while the server runs (its lifespan): the searcher and fetch_url's client.

    One client per purpose for every call: connection pooling, and a timeout on every request.
    Search APIs are the operator's choice (a SearXNG on loopback is normal): a plain client.
    fetch_url goes where a model says: the guarded client, which checks every address it connects to.
    """
    search_timeout = settings.timeout_seconds + _CLIENT_TIMEOUT_MARGIN_SECONDS
    headers = {"User-Agent": _USER_AGENT}
    async with (
        httpx.AsyncClient(timeout=search_timeout, headers=headers) as search_http,
        guarded_client(
            settings.egress_policy(),
            timeout=settings.fetch_timeout_seconds + _CLIENT_TIMEOUT_MARGIN_SECONDS,
            headers=headers,
            resolver=resolver or settings.egress_resolver(),
        ) as fetch_http,
    ):
        if backends is not None:
            chosen, unconfigured = list(backends), []
        else:
            choice = configured_backends(settings, search_http, ddgs_client_factory)
            chosen, unconfigured = choice.backends, choice.unconfigured
        searcher = WebSearcher(
            chosen,
            deadline_seconds=settings.timeout_seconds,
            cache=TtlCache(settings.cache_seconds, settings.cache_max_entries),
            unconfigured=unconfigured,
        )
        yield WebSearchState(searcher=searcher, fetch_client=fetch_http)


async def web_search_tool(
    searcher: WebSearcher, settings: WebSearchSettings, query: str, max_results: int, site: str | None
) -> CallToolResult:
    """The ``web_search`` tool: the results of the first backend that answers, as text and structured content."""
    request = validate_search_request(query, max_results, settings.max_results_cap, site)
    answer = await searcher.search(request)
    output = WebSearchOutput(query=request.query, site=request.site, backend=answer.backend, results=answer.results)
    return CallToolResult(
        content=[TextContent(type="text", text=format_results(request.query, answer.results, request.site))],
        structured_content=output.model_dump(mode="json"),
    )


async def fetch_url_tool(
    client: httpx.AsyncClient, settings: WebSearchSettings, url: str, max_chars: int
) -> CallToolResult:
    """The ``fetch_url`` tool: the page at ``url`` through ``client`` (the guarded one), cut at ``max_chars``."""
    if not _MIN_MAX_CHARS <= max_chars <= settings.fetch_max_chars_cap:
        raise ToolError(
            f"max_chars must be between {_MIN_MAX_CHARS} and {settings.fetch_max_chars_cap}, got {max_chars}."
        )
    limits = FetchLimits(
        timeout_seconds=settings.fetch_timeout_seconds,
        max_bytes=settings.fetch_max_bytes,
        max_redirects=settings.fetch_max_redirects,
    )
    page = await fetch_page(client, url, max_chars, limits)
    text = format_page(page, max_chars, settings.fetch_max_chars_cap, settings.fetch_max_bytes)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=page.model_dump(mode="json")
    )


def _has_backend(settings: WebSearchSettings, backends: Sequence[SearchBackend] | None) -> bool:
    if backends is not None:
        return bool(backends)
    return len(missing_configuration(settings)) < len(settings.backends)
