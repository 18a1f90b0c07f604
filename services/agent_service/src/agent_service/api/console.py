"""What the web console needs from agent-service: the tools and personas a run may use, its suggestion cards, and
the console's own files.

The console is plain HTML, CSS and JavaScript in the package folder ``agent_service/console`` (no build step),
served at ``/console`` with a strict Content-Security-Policy: everything from this origin, nothing inline.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agent_service.admission.planning import allowed_tools
from agent_service.api.auth import caller_of
from agent_service.api.services import services_of
from suite_common.deadline import Deadline
from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.http import ModelResponse
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import PersonaList, PersonaSummary, SuggestionList, ToolInfo, ToolList, ToolSummary

__all__ = ["CONSOLE_DIR", "CONSOLE_HEADERS", "console_routes"]

CONSOLE_DIR = Path(__file__).parent.parent / "console"
"""The console's files; shipped inside the package (the wheel takes everything under ``agent_service``)."""

# img-src: an attached image is shown from its data: URL, a stored one (fetched with the key) from a blob: URL.
CONSOLE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Always revalidated: a console changed by a deploy is never run from a stale cache.
    "Cache-Control": "no-cache",
}
"""Sent with every console file (the policy only matters on the HTML, but costs nothing on the others)."""

_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}
"""The only kinds of file served: anything else in the folder (a ``.py``, an editor's backup) is not."""

_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
"""A plain file name of the folder: no ``/``, no leading dot (so neither ``..`` nor hidden files)."""

_LIST_TOOLS_SECONDS = 10.0
"""How long listing the tools may wait for mcp-client-service."""


def _summary(tool: ToolInfo) -> ToolSummary:
    return ToolSummary(
        name=tool.name, description=tool.description, server=tool.server, title=tool.title, unavailable=tool.unavailable
    )


async def list_tools(request: Request) -> Response:
    """The gateway's tool list as the caller's runs see it (cached for ``AGENT_CATALOG_CACHE_SECONDS``): only the
    tools its tenant and its end user's role (``X-User-Role``) may use, sorted by server, then name; a tool whose
    server cannot take calls now is listed with ``unavailable``. None while the tenant's runtime has ``agentEnabled``
    false: its runs get none (and the gateway is not asked)."""
    caller = caller_of(request)
    services = services_of(request)
    if not (await services.runtimes.of(caller.tenant, caller.rules)).agent_enabled:
        return ModelResponse(ToolList(tools=[]))
    # A peer's UpstreamError is an ApiError.
    tools = await services.catalog.tools(Deadline.after(_LIST_TOOLS_SECONDS), tenant=caller.tenant)
    ordered = sorted(allowed_tools(tools, caller.rules, caller.role), key=lambda tool: (tool.server, tool.name))
    return ModelResponse(ToolList(tools=[_summary(tool) for tool in ordered]))


async def list_personas(request: Request) -> Response:
    """The personas the caller's tenant may name: the callers file's global ones and its own, sorted by name."""
    rules = caller_of(request).rules
    return ModelResponse(
        PersonaList(
            personas=[
                PersonaSummary(
                    name=name, description=persona.description, model=persona.model, system_prompt=persona.system_prompt
                )
                for name, persona in sorted(rules.personas.items())
            ],
            system_prompt=rules.system_prompt,
        )
    )


def _suggestions(cards: SuggestionList) -> Callable[[Request], Awaitable[Response]]:
    async def list_suggestions(request: Request) -> Response:
        """The console's suggestion cards (``AGENT_CONSOLE_SUGGESTIONS_FILE``, read at start), in the file's order."""
        return ModelResponse(cards)

    return list_suggestions


def _not_found(name: str) -> ApiError:
    return ApiError(404, "not_found", f"The console has no file {clip(name)!r}.")


async def console_file(request: Request) -> Response:
    name: str = request.path_params.get("file", "") or "index.html"
    content_type = _CONTENT_TYPES.get(Path(name).suffix.lower())
    if content_type is None or not _FILE_NAME.fullmatch(name):
        raise _not_found(name)
    path = anyio.Path(CONSOLE_DIR / name)
    try:
        body = await path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise _not_found(name) from None
    return Response(body, headers={**CONSOLE_HEADERS, "Content-Type": content_type})


_LIST_TOOLS = Operation(
    "The tools the caller's runs may use (the gateway's list less what its tenant, or its end user's role "
    "(X-User-Role), may not use; no input schemas), sorted by server then name",
    answer=ToolList,
    errors={
        502: "mcp-client-service answered with an error, or something that is not a tool list.",
        503: "mcp-client-service is unreachable or unavailable (Retry-After when it says).",
        504: "mcp-client-service did not answer in time.",
    },
)


_LIST_PERSONAS = Operation(
    "The personas the caller's runs may name (persona on a run request): the callers file's global ones and its "
    "tenant's own, sorted by name",
    answer=PersonaList,
)


_LIST_SUGGESTIONS = Operation(
    "The console's suggestion cards: questions an empty conversation offers (AGENT_CONSOLE_SUGGESTIONS_FILE, else "
    "a set for the demo corpus), in the file's order",
    answer=SuggestionList,
)


def console_routes(suggestions: SuggestionList) -> list[BaseRoute]:
    """``suggestions``: the cards, loaded at start (``agent_service.api.suggestions``)."""
    # The console's files are not part of the JSON API: left out of /openapi.json.
    return [
        ApiRoute("/api/v1/agent/tools", list_tools, method="GET", operation=_LIST_TOOLS),
        ApiRoute("/api/v1/agent/personas", list_personas, method="GET", operation=_LIST_PERSONAS),
        ApiRoute(
            "/api/v1/agent/console/suggestions",
            _suggestions(suggestions),
            method="GET",
            operation=_LIST_SUGGESTIONS,
        ),
        Route("/console", console_file, methods=["GET"], include_in_schema=False),
        Route("/console/", console_file, methods=["GET"], include_in_schema=False),
        Route("/console/{file:path}", console_file, methods=["GET"], include_in_schema=False),
    ]
