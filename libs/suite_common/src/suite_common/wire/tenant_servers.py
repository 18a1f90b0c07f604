"""The MCP servers a tenant registers at runtime, and who a tool call acts for (docs/tenants.md).

agent-service's admin API (``/api/v1/admin/mcp-servers``) and mcp-client-service's tenant API
(``/mcp/v1/tenants/{tenant}/servers``) speak the same models: agent-service checks who may change what, the gateway
keeps the servers (its own store), checks their URLs against the outbound policy and connects to them.

Header values are write-only: a request may carry them, no answer ever does (``headerNames`` says which are set).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from suite_common.wire.base import WireModel
from suite_common.wire.gateway import ToolInfo
from suite_common.wire.oauth import ServerAuth, ServerAuthorization, ServerAuthView

__all__ = [
    "DEFAULT_MAX_TENANT_SERVERS",
    "TENANT_NAME_RULE",
    "TenantServer",
    "TenantServerCreate",
    "TenantServerList",
    "TenantServerPatch",
    "TenantServerTransport",
    "is_tenant_name",
]

_TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TENANT_NAME_RULE = "letters, digits, '.', '_' or '-', at most 64, not starting with a punctuation mark"
"""A tenant's name, as agent-service's callers file, its admin API and the gateway (``X-Tenant-Id``, the tenant
API's path) all take it."""

DEFAULT_MAX_TENANT_SERVERS = 20
"""How many MCP servers of its own a tenant may register when nothing says otherwise (agent-service's
``max_mcp_servers``, the gateway's ``maxServers``)."""


def is_tenant_name(text: str) -> bool:
    """Whether ``text`` is a tenant's name (``TENANT_NAME_RULE``)."""
    return _TENANT_NAME.fullmatch(text) is not None


TenantServerTransport = Literal["streamable-http", "sse"]


class _Strict(WireModel):
    """A request body of the admin API: an unknown field is a mistake (400), not something to ignore."""

    model_config = ConfigDict(**{**WireModel.model_config, "extra": "forbid"})


class TenantServerCreate(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    """Like a tool name: letters, digits, ``_`` and ``-``; unique among the tenant's servers and the shared ones."""
    url: str = Field(min_length=1, max_length=2048)
    """``http(s)://``: checked against the outbound policy on registration and on every connection."""
    transport: TenantServerTransport = "streamable-http"
    headers: dict[str, str] | None = None
    """Sent on every request to the server (an ``Authorization``, an API key); write-only, encrypted at rest."""
    enabled: bool = True
    allowed_tools: list[str] | None = None
    """Only these of its tools are offered (its own names); ``None``: every tool it lists."""
    auth: ServerAuth | None = None
    """The server is behind OAuth (docs/tenants.md, "The auth block"); its client secret is write-only, encrypted at
    rest like header values."""


class TenantServerPatch(_Strict):
    """What ``PATCH`` changes; a field left out stays as it is. ``{"enabled": false}`` is the card's switch.
    ``headers`` replaces every header (``{}`` removes them); ``allowedTools: null`` offers every tool again."""

    url: str | None = Field(default=None, min_length=1, max_length=2048)
    transport: TenantServerTransport | None = None
    headers: dict[str, str] | None = None
    enabled: bool | None = None
    allowed_tools: list[str] | None = None
    auth: ServerAuth | None = None
    """Replaces the whole block (``null``: the server is no longer behind OAuth)."""


class TenantServer(WireModel):
    """A tenant's server as answered: its settings (header values never), its state and its tools."""

    name: str
    url: str
    transport: TenantServerTransport
    enabled: bool
    allowed_tools: list[str] | None = None
    header_names: list[str] = Field(default_factory=list)
    """The headers it is sent with, by name: their values are never answered."""
    state: str
    """``ready`` (a session is open), ``idle`` (no session open now: one opens on its next call), ``connecting``,
    ``degraded``, ``failed``, ``disabled``."""
    last_error: str | None = None
    tool_count: int = 0
    tools: list[ToolInfo] = Field(default_factory=list)
    auth: ServerAuthView | None = None
    """Its ``auth`` block (``hasClientSecret``, never the secret); ``None``: not behind OAuth."""
    authorization: ServerAuthorization | None = None
    """With ``auth``: whether a token is held (for a per-user server: ``authorized`` once any user consented)."""
    created_at: datetime | None = None
    updated_at: datetime | None = None


class TenantServerList(WireModel):
    servers: list[TenantServer]
    max_servers: int | None = None
    """How many servers of its own the tenant may have (the operator's ``max_mcp_servers``)."""
