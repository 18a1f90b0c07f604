"""The ``auth`` block of a remote MCP server behind OAuth, as the tenant API and agent-service's admin API speak it
(docs/tenants.md "The auth block"); the OAuth endpoints' bodies are in ``gateway``.

A token belongs to a principal (tenant, server, user): tenant ``""`` is a server of the deployment's servers file,
user ``""`` a *machine* server's one token. No model here ever carries a token, a client secret in an answer, an
authorization code or a PKCE verifier: a client secret is write-only (a request may carry it, no answer does).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from suite_common.wire.base import WireModel

__all__ = [
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
    """Where a server behind OAuth stands (a deployment server's status, a tenant server's view): ``required`` (no
    usable token: nobody consented, or for a per-user server nobody yet; waiting for a person to open
    ``authorizationUrl`` and consent), ``authorized`` (a token is held). ``authorizationUrl``: where a machine
    server's consent is given; a per-user server's state is no one's in particular (each user consents)."""

    tokens: OAuthTokens
    state: Literal["required", "authorized"]
    authorization_url: str | None = None
