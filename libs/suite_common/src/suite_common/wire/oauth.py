"""OAuth to protected MCP servers, as the gateway's endpoints and agent-service's faces of consent speak it
(docs/gateway.md "Authorization", docs/agent-api.md "Connections", docs/tenants.md "The auth block").

A token belongs to a principal (tenant, server, user): tenant ``""`` is a server of the deployment's servers file,
user ``""`` a *machine* server's one token. No model here ever carries a token, a client secret in an answer, an
authorization code or a PKCE verifier: a client secret is write-only (a request may carry it, no answer does).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from suite_common.wire.base import WireModel

__all__ = [
    "OAuthAuthorization",
    "OAuthAuthorizeRequest",
    "OAuthConnection",
    "OAuthConnectionList",
    "OAuthTokens",
    "ServerAuth",
    "ServerAuthView",
    "ServerAuthorization",
]

OAuthTokens = Literal["machine", "perUser"]
"""Whose token a call uses: the tenant's one (``machine``) or the end user's own (``perUser``, ``X-User-Id``)."""


class ServerAuth(WireModel):
    """A remote server's ``auth`` block (a servers-file entry, a tenant server's registration): OAuth 2.1 as the MCP
    authorization spec defines it. Everything but ``type`` may be left out: discovery finds the rest."""

    model_config = ConfigDict(**{**WireModel.model_config, "extra": "forbid"})

    type: Literal["oauth"] = "oauth"
    tokens: OAuthTokens = "machine"
    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_id: str | None = Field(default=None, min_length=1, max_length=512)
    """A client registered with the authorization server beforehand (else CIMD or dynamic registration)."""
    client_secret: str | None = Field(default=None, min_length=1, max_length=4096, repr=False)
    """Write-only: encrypted at rest, never answered nor logged."""
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post", "none"] | None = None
    scopes: list[str] | None = Field(default=None, max_length=64)
    """Asked for instead of the scopes discovery finds."""
    client_metadata_url: str | None = Field(default=None, min_length=1, max_length=2048)
    """An https URL of a client ID metadata document to use as the client id (else the gateway's setting)."""


class ServerAuthView(WireModel):
    """A server's ``auth`` block as answered: its settings, whether a client secret is set, never the secret."""

    type: Literal["oauth"] = "oauth"
    tokens: OAuthTokens = "machine"
    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_id: str | None = None
    has_client_secret: bool = False
    token_endpoint_auth_method: str | None = None
    scopes: list[str] | None = None
    client_metadata_url: str | None = None

    @classmethod
    def of(cls, auth: ServerAuth) -> ServerAuthView:
        """``auth`` without its secret."""
        fields = auth.model_dump(exclude={"client_secret"})
        return cls(**fields, has_client_secret=auth.client_secret is not None)


class ServerAuthorization(WireModel):
    """Where a server behind OAuth stands: ``required`` (no usable token: nobody consented, or for a per-user server
    nobody yet), ``authorized`` (a token is held). ``authorizationUrl``: where a machine server's consent is given."""

    tokens: OAuthTokens
    state: Literal["required", "authorized"]
    authorization_url: str | None = None


class OAuthAuthorizeRequest(WireModel):
    """``POST /mcp/v1/oauth/authorize``: a fresh consent for a principal (``user``: a per-user server's end user)."""

    server: str = Field(min_length=1, max_length=256)
    tenant: str | None = Field(default=None, max_length=64)
    user: str | None = Field(default=None, max_length=128)


class OAuthAuthorization(WireModel):
    """The answer to a consent asked for: the URL a person opens, or ``authorized`` when a usable token is held."""

    authorization_url: str | None = None
    authorized: bool = False


class OAuthConnection(WireModel):
    """A token held for a principal, as listed: never the token."""

    server: str
    tenant: str | None = None
    """``None`` (or ``""``): a server of the deployment's servers file."""
    user: str | None = None
    """``None`` (or ``""``): a machine server's token; else the end user who consented."""
    scopes: list[str] = Field(default_factory=list)
    expires_at: datetime | None = None
    updated_at: datetime | None = None


class OAuthConnectionList(WireModel):
    connections: list[OAuthConnection]
