"""The ``auth`` block of an HTTP server: how the gateway authorizes itself to an OAuth-protected MCP server.

::

    "auth": {"type": "oauth",
             "tokens": "machine" | "perUser",                      // default "machine"
             "grant": "authorization_code" | "client_credentials", // default "authorization_code"
             "clientId": "...", "clientSecret": "${env:X}",        // a pre-registered client (optional)
             "tokenEndpointAuthMethod": "client_secret_basic" | "client_secret_post" | "none",
             "scopes": ["..."],                                    // asked instead of the discovered ones
             "clientMetadataUrl": "https://.../client.json"}       // CIMD client id (else the setting's)

``clientId`` and ``clientSecret`` may hold ``${env:}``/``${file:}`` references, resolved like header values; they
are secrets (never shown by ``repr``, masked in errors, never answered).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from mcp_client_service.config.references import check_references

__all__ = ["OAuthConfig", "TokenOwner"]

TokenOwner = Literal["machine", "perUser"]


class OAuthConfig(BaseModel):
    """OAuth 2.1 per the MCP authorization spec, as this server's client."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: Literal["oauth"] = "oauth"
    tokens: TokenOwner = "machine"
    """``machine``: one token for the tenant (or the deployment); ``perUser``: each end user's own."""
    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_id: Annotated[str, AfterValidator(check_references)] | None = Field(
        default=None, alias="clientId", repr=False
    )
    """A client registered beforehand with the authorization server; unset: CIMD or dynamic registration."""
    client_secret: Annotated[str, AfterValidator(check_references)] | None = Field(
        default=None, alias="clientSecret", repr=False
    )
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post", "none"] | None = Field(
        default=None, alias="tokenEndpointAuthMethod"
    )
    """How the pre-registered client authenticates at the token endpoint; unset: basic with a secret, else none."""
    scopes: tuple[str, ...] | None = None
    """Asked instead of the scopes the server's challenge or metadata name."""
    client_metadata_url: str | None = Field(default=None, alias="clientMetadataUrl")
    """This server's client ID metadata document URL (CIMD); unset: ``MCP_CLIENT_OAUTH_CLIENT_METADATA_URL``."""

    @model_validator(mode="after")
    def _check(self) -> OAuthConfig:
        if self.grant == "client_credentials":
            if self.tokens != "machine":
                raise ValueError('"grant": "client_credentials" is a machine\'s grant: "tokens" must be "machine"')
            if not self.client_id or not self.client_secret:
                raise ValueError('"grant": "client_credentials" needs "clientId" and "clientSecret"')
        if self.client_secret and not self.client_id:
            raise ValueError('"clientSecret" without "clientId"')
        return self

    @property
    def scope(self) -> str | None:
        """The configured scopes as OAuth's space-separated ``scope``; ``None``: discovered."""
        return " ".join(self.scopes) if self.scopes else None
