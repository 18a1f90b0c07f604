"""OAuth of the sessions in the tenant sessions' pool: whose token each session carries, how the OAuth API finds a
tenant's server, and what a token's change does to the sessions.

A session's key is its principal: (tenant, server, user), user ``""`` for a machine server (one token for the
tenant) and the end user for a per-user one (``tenants.sessions``) — a tenant's own per-user server, or one of the
servers file, whose principal's tenant is the caller's (``X-Tenant-Id``). A consent completed opens that principal's
session (a per-user server's first consent is what lists its tools); a revocation ends that principal's session
only.
"""

from __future__ import annotations

from collections.abc import Callable

from mcp_client_service.config.options import ConnectionOptions
from mcp_client_service.config.servers_file import HttpServerConfig
from mcp_client_service.connection.server_connection import ServerConnection
from mcp_client_service.oauth import Principal, ProviderContext, SessionOAuth
from mcp_client_service.oauth_api import OAuthLookup, OAuthServer, oauth_http
from mcp_client_service.tenants.servers import TenantServers
from mcp_client_service.tenants.sessions import ConnectionMaker, SessionKey
from suite_common.errors import ApiError

__all__ = ["tenant_connections", "tenant_oauth_servers", "tenant_token_changed"]


def tenant_connections(context: ProviderContext, options: ConnectionOptions) -> ConnectionMaker:
    """How a tenant session's connection is made: an ``auth`` server's with the token of the key's principal."""

    def make(key: SessionKey, config: HttpServerConfig, on_change: Callable[[], None]) -> ServerConnection:
        oauth = SessionOAuth(context, Principal(*key)) if config.auth is not None else None
        return ServerConnection(key[1], config, options, on_change=on_change, oauth=oauth)

    return make


def tenant_oauth_servers(tenants: TenantServers) -> OAuthLookup:
    """The OAuth API's lookup of a tenant's server (``None``: the tenant has none enabled of that name; 400
    ``not_oauth``: it has no ``auth`` block)."""

    def find(principal: Principal) -> OAuthServer | None:
        config = tenants.config_of(principal.tenant, principal.server)
        if config is None:
            return None
        if config.auth is None:
            raise ApiError(400, "not_oauth", f'The MCP server "{principal.server}" has no "auth" block.')
        return OAuthServer(url=config.url, auth=config.auth, http=oauth_http(tenants.options, config.url))

    return find


def tenant_token_changed(tenants: TenantServers) -> Callable[[Principal, bool], None]:
    """What a tenant principal's token change does: its session (that user's only) connects again or ends; a first
    consent opens it, which lists the server's tools."""

    def changed(principal: Principal, authorized: bool) -> None:
        if not principal.user and not principal.tenant:
            return  # a machine server of the servers file: the registry's
        key = (principal.tenant, principal.server, principal.user)
        connection = tenants.sessions.get(key)
        if connection is not None:
            connection.token_changed(authorized)
            if not authorized:
                tenants.sessions.close(key, "its OAuth token was revoked")
        elif authorized:
            tenants.list_in_background(principal.tenant, principal.server, principal.user)

    return changed
