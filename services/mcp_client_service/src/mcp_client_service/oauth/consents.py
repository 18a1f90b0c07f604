"""The consent flow the API drives: completing a consent from the authorization server's callback, asking a fresh
one, revoking a token; and telling the sessions of a principal that its token changed.

The code is exchanged here, in the callback's request (not by a session): a per-user principal may have no session
open, and the callback may land on another replica than the one that asked. The exchange is the SDK's request
(``OAuthContext.prepare_token_auth`` applies the client's token endpoint auth method), sent through the same
SSRF-guarded client as the server's session.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime

import anyio
import httpx2
from mcp.client.auth.oauth2 import OAuthContext
from mcp.client.auth.utils import issuers_match
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import ValidationError

from mcp_client_service.config.auth import OAuthConfig
from mcp_client_service.oauth.errors import ConsentError
from mcp_client_service.oauth.principal import Principal
from mcp_client_service.oauth.provider import ProviderContext, build_provider
from mcp_client_service.oauth.vault import OAuthVault, PendingConsent
from suite_common.logging import get_logger

__all__ = ["ConsentFlow", "Consented", "HttpClients", "TokenListener"]

_log = get_logger("mcp_client_service.oauth.consents")

HttpClients = Callable[[Principal, str], AbstractAsyncContextManager[httpx2.AsyncClient]]
"""The guarded HTTP client for a principal's requests to a URL (the server's egress policy, bounded timeouts)."""

TokenListener = Callable[[Principal, bool], None]
"""Told when a principal's token changed: ``True`` a consent completed, ``False`` it was revoked."""

_REVOCATION_SECONDS = 5.0
"""A revocation endpoint that does not answer in this long is given up on (the token is forgotten anyway)."""


@dataclass(frozen=True)
class Consented:
    """A completed consent: whose token is now held, with which scopes (never the token)."""

    principal: Principal
    scopes: tuple[str, ...]


class ConsentFlow:
    """Completes, asks and revokes consents over the vault."""

    def __init__(self, context: ProviderContext, clients: HttpClients) -> None:
        self.context = context
        self._clients = clients
        self._listeners: list[TokenListener] = []

    @property
    def vault(self) -> OAuthVault:
        return self.context.vault

    def listen(self, listener: TokenListener) -> Callable[[], None]:
        """Call ``listener`` whenever a token changes; the answer stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _changed(self, principal: Principal, authorized: bool) -> None:
        self.context.token_changed(principal)
        for listener in list(self._listeners):
            listener(principal, authorized)

    async def complete(
        self,
        state: str,
        code: str | None,
        *,
        error: str | None = None,
        iss: str | None = None,
        binding: str | None = None,
    ) -> Consented:
        """The callback of the consent ``state``: its code exchanged and the token stored. ``ConsentError``:
        ``invalid_oauth_state`` (unknown, expired or used), ``oauth_binding_mismatch`` (a bound consent completed
        in another browser than the one that asked), ``oauth_denied`` (the authorization server's ``error``),
        ``oauth_token_exchange_failed`` (502)."""
        # Used once whatever the outcome: a denied consent's state cannot be replayed with a code either.
        taken = await self.vault.complete_consent(state, code or "")
        if taken is None:
            raise ConsentError(
                "invalid_oauth_state", "This authorization is unknown, expired or already used; ask a new one."
            )
        principal, pending = taken
        if pending.binding is not None and not hmac.compare_digest(pending.binding, binding or ""):
            # Whoever holds a state must not make someone else's account the asker's token (a link sent to a
            # victim): the consent completes only in the browser that asked for it. Used now, it cannot be retried.
            _log.warning("oauth_consent_unbound_browser", principal=principal.describe())
            raise ConsentError(
                "oauth_binding_mismatch",
                "This authorization was asked for in another browser: open the Connect link in the browser where "
                "you asked for it, and ask a new one there.",
            )
        if error is not None:
            _log.info("oauth_consent_denied", principal=principal.describe(), error=error[:100])
            raise ConsentError("oauth_denied", f"The authorization server refused the consent: {error[:100]}.")
        if not code:
            raise ConsentError("oauth_denied", "The authorization server's answer carried no code.")
        _check_issuer(iss, pending)
        client = await self.vault.client_info(principal.tenant, principal.server)
        if client is None:
            raise ConsentError("invalid_oauth_state", "The server's client registration is gone; ask a new consent.")
        token = await self._exchange(principal, pending, client, code)
        if token.scope is None:
            token.scope = pending.scope  # RFC 6749 5.1: omitted means what was asked
        await self.vault.store_token(
            principal, token, revocation_endpoint=pending.revocation_endpoint, resource_url=pending.server_url
        )
        _log.info("oauth_consent_completed", principal=principal.describe(), scopes=token.scope)
        self._changed(principal, True)
        return Consented(principal, tuple((token.scope or "").split()))

    async def _exchange(
        self, principal: Principal, pending: PendingConsent, client: OAuthClientInformationFull, code: str
    ) -> OAuthToken:
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": pending.redirect_uri,
            "client_id": client.client_id,
            "code_verifier": pending.code_verifier,
        }
        if pending.resource is not None:
            data["resource"] = pending.resource
        context = OAuthContext(
            server_url=pending.token_endpoint,
            client_metadata=OAuthClientMetadata(redirect_uris=None),
            storage=self.vault.storage(principal),
            redirect_handler=None,
            callback_handler=None,
            client_info=client,
        )
        data, headers = context.prepare_token_auth(data, {"Content-Type": "application/x-www-form-urlencoded"})
        failed = "The authorization server did not issue a token"
        try:
            async with self._clients(principal, pending.token_endpoint) as http:
                response = await http.post(pending.token_endpoint, data=data, headers=headers)
                body = await response.aread()
        except (httpx2.HTTPError, OSError) as error:
            raise ConsentError(
                "oauth_token_exchange_failed", f"{failed}: {type(error).__name__}.", status=502
            ) from None
        if response.status_code not in (200, 201):
            why = _oauth_error(body)
            raise ConsentError(
                "oauth_token_exchange_failed", f"{failed} (HTTP {response.status_code}{why}).", status=502
            )
        try:
            return OAuthToken.model_validate_json(body)
        except ValidationError:
            # Never the validation's text: it quotes the body, which holds the token.
            raise ConsentError(
                "oauth_token_exchange_failed", f"{failed}: its answer is not a token.", status=502
            ) from None

    async def authorize(
        self, principal: Principal, server_url: str, config: OAuthConfig, *, binding: str | None = None
    ) -> str | None:
        """A fresh authorization URL for ``principal``; ``None`` when a usable token is held (or client
        credentials got one). Drives the server's provider as if the server had refused the request (401): the
        discovery, registration and consent are the session's own. ``binding``: the asking browser's (see
        ``OAuthAuthorizeRequest.binding``). ``ConsentError`` 502 when it cannot.

        A step-up (the server refused the token: ``insufficient_scope``) left a pending consent with a wider scope
        than the token's: the token held is then not enough, and the fresh consent asks at least that scope."""
        stored = await self.vault.token(principal, resource_url=server_url)
        waiting = await self.vault.latest_pending(principal)
        wider = waiting.scope if waiting is not None else None
        usable = stored is not None and (stored.token.refresh_token or not _expired(stored.expires_at, self.vault))
        if stored is not None and usable and _covers(stored.token.scope, wider):
            return None
        provider = build_provider(self.context, principal, server_url, config)
        provider.binding = binding
        provider.least_scope = wider
        provider.requested = True
        request = httpx2.Request("POST", server_url)
        flow = provider.async_auth_flow(request)
        async with self._clients(principal, server_url) as http:
            try:
                outgoing = await flow.__anext__()
                while True:
                    if outgoing is request:
                        response = httpx2.Response(401, request=request)
                    else:
                        response = await http.send(outgoing)
                        await response.aread()
                    outgoing = await flow.asend(response)
            except StopAsyncIteration:
                pass
            finally:
                await flow.aclose()
        if provider.pending is not None:
            return provider.pending.authorization_url
        if provider.failure is not None:
            raise ConsentError("oauth_discovery_failed", provider.failure, status=502)
        return None

    async def revoke(self, principal: Principal) -> bool:
        """Forget ``principal``'s token, after asking its authorization server to take it back (RFC 7009) when
        it has a revocation endpoint (best effort, bounded); its sessions are told. ``False``: none was held."""
        stored = await self.vault.token(principal)
        if stored is not None and stored.revocation_endpoint:
            await self._revoke_remotely(principal, stored.revocation_endpoint, stored.token)
        forgotten = await self.vault.revoke(principal.tenant, principal.server, principal.user)
        if forgotten:
            self._changed(principal, False)
        return forgotten

    async def _revoke_remotely(self, principal: Principal, endpoint: str, token: OAuthToken) -> None:
        client = await self.vault.client_info(principal.tenant, principal.server)
        data = {"token": token.refresh_token or token.access_token}
        if token.refresh_token:
            data["token_type_hint"] = "refresh_token"
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if client is not None:
            data["client_id"] = client.client_id
            context = OAuthContext(
                server_url=endpoint,
                client_metadata=OAuthClientMetadata(redirect_uris=None),
                storage=self.vault.storage(principal),
                redirect_handler=None,
                callback_handler=None,
                client_info=client,
            )
            data, headers = context.prepare_token_auth(data, headers)
        try:
            with anyio.fail_after(_REVOCATION_SECONDS):
                async with self._clients(principal, endpoint) as http:
                    response = await http.post(endpoint, data=data, headers=headers)
            _log.info("oauth_token_revoked_remotely", principal=principal.describe(), status=response.status_code)
        except (httpx2.HTTPError, OSError, TimeoutError) as error:
            _log.warning("oauth_revocation_failed", principal=principal.describe(), error=type(error).__name__)


def _check_issuer(iss: str | None, pending: PendingConsent) -> None:
    """RFC 9207: the callback's ``iss`` must name the authorization server asked (and be there when it says it
    sends one)."""
    if pending.issuer is None:
        return
    if (iss is None and pending.iss_required) or (iss is not None and not issuers_match(iss, pending.issuer)):
        raise ConsentError(
            "invalid_oauth_state", "The callback's issuer is not the authorization server the consent was asked of."
        )


def _oauth_error(body: bytes) -> str:
    """``: invalid_grant`` from an OAuth error body (RFC 6749 5.2), nothing else of it."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return ""
    return f": {error[:60]}" if isinstance(error, str) else ""


def _covers(granted: str | None, wanted: str | None) -> bool:
    """Whether the scopes ``granted`` include every one ``wanted`` asks."""
    return set((wanted or "").split()) <= set((granted or "").split())


def _expired(expires_at: datetime | None, vault: OAuthVault) -> bool:
    return expires_at is not None and expires_at <= vault.now()
