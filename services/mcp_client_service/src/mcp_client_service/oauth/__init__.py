"""OAuth 2.1 as an MCP client (the MCP authorization spec): the vault of tokens, client registrations and pending
consents (``vault``), the httpx2 ``Auth`` of an oauth server's session built on the SDK's ``mcp.client.auth``
(``provider``), and the consent flow the API drives (``consents``)."""

from mcp_client_service.oauth.errors import AuthorizationRequired, ConsentError
from mcp_client_service.oauth.principal import Principal
from mcp_client_service.oauth.provider import GatewayAuth, ProviderContext, SessionOAuth
from mcp_client_service.oauth.vault import OAuthConnection, OAuthVault, PendingConsent, VaultTokenStorage

__all__ = [
    "AuthorizationRequired",
    "ConsentError",
    "GatewayAuth",
    "OAuthConnection",
    "OAuthVault",
    "PendingConsent",
    "Principal",
    "ProviderContext",
    "SessionOAuth",
    "VaultTokenStorage",
]
