"""The tenant API: ``/mcp/v1/tenants/{tenant}/servers[/{name}]``, behind the shared secret.

agent-service's admin API forwards to it (it decides who may act for which tenant; the gateway trusts the tenant in
the path). Header values are write-only: no answer and no log line holds one (``headerNames`` says which are set).
Registering a server, or changing its URL, checks the URL against the outbound policy first: a blocked one is 422
``url_not_allowed`` saying why. A server is never connected to by the request itself: registering or enabling one
connects and lists its tools in the background, and the answer shows its state.
"""

from __future__ import annotations

import re
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from mcp_client_service.store import UNCHANGED, SecretsKeyMissing, ServerExists, StoreError, TooManyServers
from mcp_client_service.tenants.configs import checked_tenant, registration_problem, server_config
from mcp_client_service.tenants.servers import TenantServers
from mcp_client_service.tenants.store_api import ServerRow
from mcp_client_service.transport.ssrf_guard import EgressError, check_endpoint
from suite_common.errors import ApiError
from suite_common.http import ModelResponse, read_model
from suite_common.logging import get_logger
from suite_common.openapi import ApiRoute, Operation
from suite_common.wire import (
    DEFAULT_MAX_TENANT_SERVERS,
    TENANT_NAME_RULE,
    ServerAuth,
    TenantServer,
    TenantServerCreate,
    TenantServerList,
    TenantServerPatch,
)

__all__ = ["MAX_SERVERS_LIMIT", "tenant_routes"]

_log = get_logger("mcp_client_service.tenants.routes")


MAX_SERVERS_LIMIT = 10_000
"""The largest ``maxServers`` taken: a cap above it is a mistake, not a policy."""
_MAX_SERVERS_FORM = re.compile(r"[0-9]{1,9}")  # bounded: int() refuses over 4300 digits

_NOT_FOUND = "The tenant has no server of this name (another tenant's servers are not seen)."
_EVERY_OPERATION = {
    400: f"invalid_tenant: the tenant is not a tenant's name ({TENANT_NAME_RULE}).",
    503: "store_unavailable: the gateway's store of tenant servers cannot be reached now.",
}
_CHECK_SECONDS = 10.0
"""Longest resolving a registered URL's host for the outbound policy may take."""
_INVALID = "The body is not valid: an unknown field, a name that is not like a tool name, a URL that is not http(s)."

_LIST = Operation(
    "The tenant's own MCP servers, their state and tools",
    answer=TenantServerList,
    errors={
        **_EVERY_OPERATION,
        400: f"{_EVERY_OPERATION[400]} Or maxServers is not a whole number from 0 to {MAX_SERVERS_LIMIT}.",
    },
)
_CREATE = Operation(
    "Register an MCP server of the tenant's own (streamable HTTP or SSE)",
    body=TenantServerCreate,
    answer=TenantServer,
    status=201,
    errors={
        **_EVERY_OPERATION,
        400: f"{_INVALID} secrets_key_missing: headers given and the gateway has no MCP_CLIENT_SECRETS_KEY. "
        f"{_EVERY_OPERATION[400]}",
        409: "server_exists: the tenant has a server of this name, or a shared server has it; too_many_servers: "
        "the tenant has maxServers servers already.",
        422: "url_not_allowed: the URL resolves to an address the outbound policy blocks (the message says why).",
    },
    example={"name": "time", "url": "https://tools.example.com/mcp", "headers": {"Authorization": "Bearer ..."}},
)
_GET = Operation(
    "One of the tenant's own MCP servers", answer=TenantServer, errors={**_EVERY_OPERATION, 404: _NOT_FOUND}
)
_PATCH = Operation(
    "Change one of the tenant's servers (enabled: false is its switch)",
    body=TenantServerPatch,
    answer=TenantServer,
    errors={
        **_EVERY_OPERATION,
        400: f"{_INVALID} {_EVERY_OPERATION[400]}",
        404: _NOT_FOUND,
        422: "url_not_allowed: the new URL resolves to an address the outbound policy blocks.",
    },
    example={"enabled": False},
)
_DELETE = Operation("Remove one of the tenant's servers", status=204, errors={**_EVERY_OPERATION, 404: _NOT_FOUND})


def _path_tenant(request: Request) -> str:
    return checked_tenant(request.path_params["tenant"], "The tenant in the path")


def _max_servers(request: Request) -> int | None:
    raw = request.query_params.get("maxServers")
    if raw is None:
        return None
    # ASCII digits only: str.isdigit() also takes superscripts ("²"), which int() then refuses (a 500).
    if _MAX_SERVERS_FORM.fullmatch(raw) is None or int(raw) > MAX_SERVERS_LIMIT:
        raise ApiError(400, "invalid_request", f"maxServers must be a whole number from 0 to {MAX_SERVERS_LIMIT}.")
    return int(raw)


def _auth_json(auth: ServerAuth | None) -> dict[str, Any] | None:
    """The ``auth`` block as stored and as the connection config reads it (camelCase, fields left out unset)."""
    return None if auth is None else auth.model_dump(by_alias=True, exclude_none=True)


def _not_found(name: str) -> ApiError:
    return ApiError(404, "server_not_found", f'The tenant has no MCP server named "{name[:64]}".')


def _store_failed(error: StoreError) -> ApiError:
    """A store failure of another kind than those the API names: the store is away, say so (never a 500)."""
    _log.warning("mcp_tenant_store_failed", error=str(error))
    return ApiError(503, "store_unavailable", "The gateway's store of tenant servers cannot be reached now.")


def tenant_routes(prefix: str, servers: TenantServers) -> list[BaseRoute]:
    """The tenant API's routes under ``prefix`` (``/mcp/v1``)."""

    async def _checked_url(
        url: str, headers: dict[str, str] | None, auth: dict[str, Any] | None, *, outbound: bool = True
    ) -> None:
        problem = registration_problem(url, headers, auth)
        if problem is not None:
            raise ApiError(400, "invalid_server", f"The server was not registered: {problem}.")
        if not outbound:
            return
        try:
            with anyio.fail_after(_CHECK_SECONDS):
                await check_endpoint(url, servers.options.egress, resolver=servers.options.resolver)
        except EgressError as refused:
            raise ApiError(422, "url_not_allowed", f"The server's URL is not allowed: {refused.message}") from None
        except TimeoutError:
            why = f"its host name was not resolved within {_CHECK_SECONDS:g} s"
            raise ApiError(422, "url_not_allowed", f"The server's URL is not allowed: {why}.") from None

    def _check_config(
        row_url: str, transport: Any, headers: dict[str, str], allowed: list[str] | None, auth: dict[str, Any] | None
    ) -> None:
        try:
            server_config(row_url, transport, headers, allowed, auth)
        except ValueError as invalid:
            raise ApiError(400, "invalid_server", f"The server was not registered: {invalid}.") from None

    async def list_tenant_servers(request: Request) -> Response:
        """The tenant's servers in creation order; ``?maxServers=`` (the operator's cap) is answered back."""
        tenant = _path_tenant(request)
        try:
            rows = await servers.store.list(tenant)
        except StoreError as error:
            raise _store_failed(error) from None
        answer = TenantServerList(servers=[servers.describe(row) for row in rows], max_servers=_max_servers(request))
        return ModelResponse(answer)

    async def create_tenant_server(request: Request) -> Response:
        """``?maxServers=`` caps the tenant's servers (default ``DEFAULT_MAX_TENANT_SERVERS``, 20). Connecting and
        listing its tools happen in the background: the answer's state is ``idle`` or ``connecting``, then
        ``ready`` (or ``failed``, with why)."""
        tenant = _path_tenant(request)
        limit = _max_servers(request)
        body = await read_model(request, TenantServerCreate)
        if servers.is_shared(body.name):
            raise ApiError(409, "server_exists", f'"{body.name}" is the name of a shared server: choose another.')
        auth = _auth_json(body.auth)
        _check_config(body.url, body.transport, body.headers or {}, body.allowed_tools, auth)
        await _checked_url(body.url, body.headers, auth)
        try:
            row = await servers.store.create(
                tenant,
                body.name,
                body.url,
                body.transport,
                body.headers or {},
                body.enabled,
                body.allowed_tools,
                max_servers=DEFAULT_MAX_TENANT_SERVERS if limit is None else limit,
                auth=auth,
            )
        except ServerExists:
            raise ApiError(409, "server_exists", f'The tenant has a server named "{body.name}" already.') from None
        except TooManyServers as full:
            raise ApiError(409, "too_many_servers", str(full)) from None
        except SecretsKeyMissing:
            raise ApiError(
                400,
                "secrets_key_missing",
                "Header values and OAuth settings cannot be stored: the gateway has no MCP_CLIENT_SECRETS_KEY. "
                "Register the server without headers or auth, or ask the operator to set the key.",
            ) from None
        except StoreError as error:
            raise _store_failed(error) from None
        _log.info(
            "mcp_tenant_server_registered",
            tenant=tenant,
            server=row.name,
            transport=row.transport,
            header_names=sorted(row.headers),
            oauth=None if auth is None else auth.get("tokens", "machine"),
            enabled=row.enabled,
        )
        servers.adopt(row)
        if row.enabled:
            servers.list_in_background(tenant, row.name)
        return ModelResponse(servers.describe(row), status_code=201)

    async def _row(tenant: str, name: str) -> ServerRow:
        try:
            row = await servers.store.get(tenant, name)
        except StoreError as error:
            raise _store_failed(error) from None
        if row is None:
            raise _not_found(name)
        return row

    async def get_tenant_server(request: Request) -> Response:
        tenant, name = _path_tenant(request), request.path_params["name"]
        return ModelResponse(servers.describe(await _row(tenant, name)))

    async def patch_tenant_server(request: Request) -> Response:
        """Only the fields given change; ``headers`` replaces them all, ``allowedTools: null`` offers every tool.
        Enabling a server, or changing how it is reached, connects and lists its tools in the background."""
        tenant, name = _path_tenant(request), request.path_params["name"]
        patch = await read_model(request, TenantServerPatch)
        before = await _row(tenant, name)
        given = patch.model_fields_set
        url = patch.url if patch.url is not None else before.url
        transport = patch.transport if patch.transport is not None else before.transport
        headers = (patch.headers or {}) if "headers" in given else dict(before.headers)
        allowed = patch.allowed_tools if "allowed_tools" in given else before.allowed_tools
        auth = _auth_json(patch.auth) if "auth" in given else (dict(before.auth) if before.auth else None)
        _check_config(url, transport, headers, None if allowed is None else list(allowed), auth)
        if given & {"url", "headers", "auth"}:
            await _checked_url(url, headers, auth, outbound="url" in given)
        try:
            row = await servers.store.update(
                tenant,
                name,
                url=patch.url if patch.url is not None else UNCHANGED,
                transport=patch.transport if patch.transport is not None else UNCHANGED,
                headers=headers if "headers" in given else UNCHANGED,
                enabled=patch.enabled if patch.enabled is not None else UNCHANGED,
                allowed_tools=patch.allowed_tools if "allowed_tools" in given else UNCHANGED,
                auth=auth if "auth" in given else UNCHANGED,
            )
        except SecretsKeyMissing:
            message = "Header values and OAuth settings cannot be stored without a key."
            raise ApiError(400, "secrets_key_missing", message) from None
        except StoreError as error:
            raise _store_failed(error) from None
        if row is None:
            raise _not_found(name)
        _log.info("mcp_tenant_server_changed", tenant=tenant, server=name, fields=sorted(given))
        servers.adopt(row)
        reached_differently = (
            row.url != before.url or row.transport != before.transport or bool(given & {"headers", "auth"})
        )
        if row.enabled and (not before.enabled or reached_differently):
            servers.list_in_background(tenant, name)
        return ModelResponse(servers.describe(row))

    async def delete_tenant_server(request: Request) -> Response:
        tenant, name = _path_tenant(request), request.path_params["name"]
        try:
            removed = await servers.store.delete(tenant, name)
        except StoreError as error:
            raise _store_failed(error) from None
        if not removed:
            raise _not_found(name)
        _log.info("mcp_tenant_server_deleted", tenant=tenant, server=name)
        servers.forget(tenant, name)
        return Response(status_code=204)

    collection, item = f"{prefix}/tenants/{{tenant}}/servers", f"{prefix}/tenants/{{tenant}}/servers/{{name}}"
    return [
        ApiRoute(collection, list_tenant_servers, method="GET", operation=_LIST),
        ApiRoute(collection, create_tenant_server, method="POST", operation=_CREATE),
        ApiRoute(item, get_tenant_server, method="GET", operation=_GET),
        ApiRoute(item, patch_tenant_server, method="PATCH", operation=_PATCH),
        ApiRoute(item, delete_tenant_server, method="DELETE", operation=_DELETE),
    ]
