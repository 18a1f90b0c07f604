"""What the OAuth flow tells its callers: a consent is needed, or the flow failed (never quoting a secret)."""

from __future__ import annotations

from mcp_client_service.oauth.principal import Principal

__all__ = ["AuthorizationRequired", "ConsentError"]


class AuthorizationRequired(Exception):
    """The principal holds no usable token and the server's authorization server wants a person's consent.

    ``authorization_url`` is the URL to open (its ``state`` names the pending consent in the vault). The
    connection waits for the consent instead of reconnecting in a loop; a call answers 401
    ``authorization_required`` with it.
    """

    def __init__(self, principal: Principal, authorization_url: str) -> None:
        super().__init__(f"{principal.describe()} needs a consent: open its authorization URL.")
        self.principal = principal
        self.server = principal.server
        self.authorization_url = authorization_url


class ConsentError(Exception):
    """A callback that cannot complete a consent. ``code`` is the API's error code (``invalid_oauth_state``,
    ``oauth_denied``, ``oauth_token_exchange_failed``); the message never holds a token, code or verifier."""

    def __init__(self, code: str, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
