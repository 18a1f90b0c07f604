"""Resources and prompts of every server, for the gateway's MCP face (``/mcp``).

A tool may answer with a ``resource_link``; a client of ``/mcp`` can open it only if the
gateway serves ``resources/read``. So the face aggregates ``resources/list``,
``resources/templates/list``, ``resources/read``, ``prompts/list`` and ``prompts/get`` over
the serving servers that declare the capability, in config (= priority) order, as tools are:

- **Prompts by name**, with the ``tool_name_collision`` policy of tools: under ``first_wins``
  the first server in the config keeps a shared name and the other's prompt is not listed;
  under ``prefix`` the later server's prompt is listed as ``<server>__<name>``.
- **Resources by URI.** A URI is what a server's ``resource_link`` carries and what a client
  reads, so it is never renamed: a URI that two servers list belongs to the first of them in
  the config, whatever the policy (the other's is not listed). The same goes for two identical
  URI templates. ``resources/read`` goes to the server that lists the URI, else to the first
  whose template matches it (RFC 6570); with a single resource server, straight to it.

They are listed when asked, not kept: unlike tools, nothing calls them per request of an agent
run. A server that fails to list within the list timeout is left out of the listing (logged);
the answer of a read or get, its error included, is the server's, its secrets redacted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, TypeVar

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    REQUEST_TIMEOUT,
    GetPromptResult,
    Prompt,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
)

from mcp_client_service.connection.server_connection import ServerConnection
from mcp_client_service.failures import ServerUnavailableError, describe_error
from mcp_client_service.registry.catalog import NameCollision, prefixed_name
from mcp_client_service.registry.server_registry import ServerRegistry
from suite_common.deadline import Deadline
from suite_common.logging import get_logger

__all__ = ["Feature", "FeatureRouter"]

_log = get_logger("mcp_client_service.mcp_face.features")

Feature = Literal["resources", "prompts"]

T = TypeVar("T")

_MAX_PAGES = 100
"""A server's listing is followed to this many pages (and the list timeout), whichever ends first."""


async def _every_page(list_page: Callable[[str | None], Awaitable[tuple[list[T], str | None]]]) -> list[T]:
    items: list[T] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page, cursor = await list_page(cursor)
        items.extend(page)
        if cursor is None:
            break
    return items


async def _resources(client: Client) -> list[Resource]:
    async def page(cursor: str | None) -> tuple[list[Resource], str | None]:
        result = await client.list_resources(cursor=cursor)
        return result.resources, result.next_cursor

    return await _every_page(page)


async def _templates(client: Client) -> list[ResourceTemplate]:
    async def page(cursor: str | None) -> tuple[list[ResourceTemplate], str | None]:
        result = await client.list_resource_templates(cursor=cursor)
        return result.resource_templates, result.next_cursor

    return await _every_page(page)


async def _prompts(client: Client) -> list[Prompt]:
    async def page(cursor: str | None) -> tuple[list[Prompt], str | None]:
        result = await client.list_prompts(cursor=cursor)
        return result.prompts, result.next_cursor

    return await _every_page(page)


def _matches(template: str, uri: str) -> bool:
    try:
        return UriTemplate.parse(template).match(uri) is not None
    except InvalidUriTemplate:
        return False


def _first_by_key(listings: Sequence[tuple[ServerConnection, list[T]]], key: Callable[[T], str]) -> list[T]:
    """Every item once, by ``key``: the first server in the config keeps a key that several list."""
    seen: set[str] = set()
    items: list[T] = []
    for _, listed in listings:
        for item in listed:
            if key(item) not in seen:
                seen.add(key(item))
                items.append(item)
    return items


class FeatureRouter:
    """Resources and prompts of the registry's serving servers, aggregated and routed."""

    def __init__(
        self,
        registry: ServerRegistry,
        *,
        collision: NameCollision,
        list_timeout: float,
        time_limit: Callable[[str, Deadline], float],
    ) -> None:
        """``time_limit(server, deadline)``: the limit of one read or get (the router's, as for calls)."""
        self._registry = registry
        self._collision: NameCollision = collision
        self._list_timeout = list_timeout
        self._time_limit = time_limit

    def servers(self, feature: Feature) -> list[ServerConnection]:
        """Serving servers that declared ``feature`` when their session opened, in config order."""
        serving = []
        for connection in self._registry.connections.values():
            capabilities = connection.capabilities
            if capabilities is not None and getattr(capabilities, feature) is not None:
                serving.append(connection)
        return serving

    def offers(self, feature: Feature) -> bool:
        return bool(self.servers(feature))

    async def _gather(
        self, servers: Sequence[ServerConnection], fetch: Callable[[Client], Awaitable[list[T]]], what: str
    ) -> list[tuple[ServerConnection, list[T]]]:
        """Each server's listing, fetched in parallel; a server that fails is left out (logged)."""
        listings: list[list[T] | None] = [None] * len(servers)

        async def one(position: int, connection: ServerConnection) -> None:
            try:
                listings[position] = await connection.request(fetch, self._list_timeout)
            except Exception as error:
                _log.warning(
                    "mcp_server_listing_failed",
                    server=connection.name,
                    listing=what,
                    error=connection.redact(describe_error(error)),
                )

        if len(servers) == 1:
            await one(0, servers[0])
        else:
            async with anyio.create_task_group() as tg:
                for position, connection in enumerate(servers):
                    tg.start_soon(one, position, connection)
        return [(server, listed) for server, listed in zip(servers, listings, strict=True) if listed is not None]

    # --- resources -----------------------------------------------------------------------------

    async def list_resources(self) -> list[Resource]:
        listings = await self._gather(self.servers("resources"), _resources, "resources/list")
        return _first_by_key(listings, lambda resource: resource.uri)

    async def list_resource_templates(self) -> list[ResourceTemplate]:
        listings = await self._gather(self.servers("resources"), _templates, "resources/templates/list")
        return _first_by_key(listings, lambda template: template.uri_template)

    async def _resource_server(self, uri: str) -> ServerConnection:
        servers = self.servers("resources")
        if len(servers) == 1:
            return servers[0]  # nothing to choose from: the server itself says whether it has the URI
        resources, templates = [], []
        async with anyio.create_task_group() as tg:

            async def listed() -> None:
                resources.extend(await self._gather(servers, _resources, "resources/list"))

            async def templated() -> None:
                templates.extend(await self._gather(servers, _templates, "resources/templates/list"))

            tg.start_soon(listed)
            tg.start_soon(templated)
        for connection, listed_resources in resources:
            if any(resource.uri == uri for resource in listed_resources):
                return connection
        for connection, listed_templates in templates:
            if any(_matches(template.uri_template, uri) for template in listed_templates):
                return connection
        raise MCPError(
            INVALID_PARAMS,
            f'No MCP server lists the resource "{uri}" or a template it matches. '
            "resources/list and resources/templates/list list them.",
            data={"uri": uri},
        )

    async def read_resource(self, uri: str, *, deadline: Deadline) -> ReadResourceResult:
        connection = await self._resource_server(uri)

        async def read(client: Client) -> ReadResourceResult:
            return await client.read_resource(uri)

        return await self._forward(connection, read, deadline, f'reading "{uri}"')

    # --- prompts -------------------------------------------------------------------------------

    async def _prompt_routes(self) -> dict[str, tuple[ServerConnection, Prompt]]:
        """Each listed prompt by its name at the gateway: its server and the prompt as that server names it."""
        listings = await self._gather(self.servers("prompts"), _prompts, "prompts/list")
        routes: dict[str, tuple[ServerConnection, Prompt]] = {}
        for connection, prompts in listings:
            for prompt in prompts:
                name = prompt.name
                if name in routes and self._collision == "prefix":
                    name = prefixed_name(connection.name, name)
                routes.setdefault(name, (connection, prompt))
        return routes

    async def list_prompts(self) -> list[Prompt]:
        return [
            prompt if prompt.name == name else prompt.model_copy(update={"name": name})
            for name, (_, prompt) in (await self._prompt_routes()).items()
        ]

    async def get_prompt(self, name: str, arguments: dict[str, str] | None, *, deadline: Deadline) -> GetPromptResult:
        route = (await self._prompt_routes()).get(name)
        if route is None:
            raise MCPError(INVALID_PARAMS, f'No MCP server offers a prompt named "{name}". prompts/list lists them.')
        connection, prompt = route

        async def get(client: Client) -> GetPromptResult:
            return await client.get_prompt(prompt.name, arguments)

        return await self._forward(connection, get, deadline, f'getting the prompt "{name}"')

    # --- one request ---------------------------------------------------------------------------

    async def _forward(
        self,
        connection: ServerConnection,
        send: Callable[[Client], Awaitable[T]],
        deadline: Deadline,
        what: str,
    ) -> T:
        """The server's answer, or its error as the client's JSON-RPC error (redacted)."""
        time_limit = self._time_limit(connection.name, deadline)
        try:
            return await connection.request(send, time_limit)
        except MCPError as error:
            # Its ``data`` stays behind: free-form, it could carry what redaction does not know of.
            raise MCPError(error.code, connection.redact(error.message)) from None
        except TimeoutError:
            raise MCPError(
                REQUEST_TIMEOUT, f'The MCP server "{connection.name}" did not finish {what} within {time_limit:g} s.'
            ) from None
        except ServerUnavailableError as error:
            raise MCPError(INTERNAL_ERROR, connection.redact(f"{what} failed: {error}")) from None
