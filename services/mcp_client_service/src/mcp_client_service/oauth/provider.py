"""The httpx2 ``Auth`` of an OAuth server's session, built on the MCP SDK's ``mcp.client.auth`` (mcp ==2.3.0).

The SDK's ``OAuthClientProvider`` does the spec's work and is used as it is: discovery from a 401's
``WWW-Authenticate`` (protected-resource metadata, then authorization-server metadata, with the 2025-03-26
fallbacks), client registration (CIMD, dynamic registration), scope selection and step-up on 403
``insufficient_scope``, PKCE, token endpoint auth methods, refresh; ``ClientCredentialsOAuthProvider`` does the
``client_credentials`` grant. Where it did not fit the gateway, this module overrides it:

- Consent. The SDK's authorization-code leg is interactive: it awaits the callback in-process. The gateway's person
  is elsewhere (a browser, then agent-service's callback, maybe on another replica), so
  ``_perform_authorization_code_grant`` keeps the pending consent (state, PKCE verifier, scope, token endpoint) in
  the vault and raises ``AuthorizationRequired``; ``consents.ConsentFlow`` exchanges the code when the callback
  brings it.
- Ending the flow. An exception out of an auth flow ends the SDK transport's writer, so the whole session, for one
  request's consent. ``_auth_flow`` catches it, sends the request once more as it was (the server refuses it
  again) so the transport sees an HTTP error for that request only, and keeps what happened (``pending``,
  ``failure``) for the connection to read.
- Tokens the vault changed (a consent completed, a revocation): the provider reloads them before the next request,
  and sets their expiry from the vault (the SDK's loaded tokens never expire, so they would never be refreshed
  before a server refuses them). Changed on this replica: seen at once (a generation per principal). Changed on
  another replica (a refresh, a consent, a revocation): seen by reading the row's ``updated_at`` at most every
  ``token_check_seconds`` (one indexed read, cached: not one per request of the hot path), and always before a
  refresh (so a refresh token another replica rotated is not sent again). A token gone from the vault ends the
  session (``on_token_gone``).
- Tokens bound to their server's URL: a session's storage hands out only a token got for its URL (``vault``).
- Pre-registered clients (``clientId``/``clientSecret``) and a step-up limit (consents in a row, the first included).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from urllib.parse import urlencode, urljoin

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, PKCEParameters
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
from pydantic import AnyUrl

from mcp_client_service.config.auth import OAuthConfig
from mcp_client_service.oauth.errors import AuthorizationRequired
from mcp_client_service.oauth.principal import Principal
from mcp_client_service.oauth.vault import OAuthVault, PendingConsent, VaultTokenStorage
from suite_common.logging import get_logger

__all__ = ["GatewayAuth", "ProviderContext", "SessionOAuth", "build_provider"]

_log = get_logger("mcp_client_service.oauth.provider")

TOKEN_CHECK_SECONDS = 2.0
"""How often a session reads its token row's ``updated_at`` to see another replica's refresh or revocation: a
token revoked elsewhere is sent for at most this long. (Measured through the store: about 0.4-1.4 ms on SQLite,
5.5 ms on PostgreSQL; once per request it would add that to every call and probe of every session.)"""


class _ConsentIsNoError(logging.Filter):
    """The SDK logs every exception out of its flow with a traceback ("OAuth flow error"): a consent the gateway
    asks for is the flow working, said once by ``oauth_consent_required``, not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], AuthorizationRequired))


logging.getLogger("mcp.client.auth.oauth2").addFilter(_ConsentIsNoError())


class ProviderContext:
    """What every provider of the gateway shares: the vault, the settings of the gateway as an OAuth client, and
    per principal a generation (bumped when its token changed outside the provider) and its consents in a row."""

    def __init__(
        self,
        vault: Callable[[], OAuthVault],
        *,
        redirect_url: str,
        client_name: str,
        client_metadata_url: str,
        step_up_limit: int,
        token_check_seconds: float = TOKEN_CHECK_SECONDS,
    ) -> None:
        self._vault = vault
        self.redirect_url = redirect_url
        self.client_name = client_name
        self.client_metadata_url = client_metadata_url
        self.step_up_limit = step_up_limit
        self.token_check_seconds = token_check_seconds
        self._generations: dict[Principal, int] = {}
        self._in_a_row: dict[Principal, int] = {}
        self._open: dict[Principal, int] = {}

    @property
    def vault(self) -> OAuthVault:
        return self._vault()

    def generation(self, principal: Principal) -> int:
        return self._generations.get(principal, 0)

    def token_changed(self, principal: Principal) -> None:
        """The principal's token changed outside its providers: they reload it before their next request."""
        self._generations[principal] = self.generation(principal) + 1

    def consent_asked(self, principal: Principal) -> int:
        """One more consent asked for ``principal`` without a request served in between; how many now."""
        count = self._in_a_row.get(principal, 0) + 1
        self._in_a_row[principal] = count
        return count

    def consent_expired(self, principal: Principal) -> None:
        """The consent asked for ``principal`` expired unanswered: the fresh one asked next is not a step-up."""
        self._in_a_row.pop(principal, None)

    def session_opened(self, principal: Principal) -> None:
        """A connection of ``principal`` started (its session loop): what is kept for it stays while one runs."""
        self._open[principal] = self._open.get(principal, 0) + 1

    def session_closed(self, principal: Principal) -> None:
        """A connection of ``principal`` ended: when it was the last, what is kept for it goes (else the dicts
        would grow with every user for the life of the process)."""
        left = self._open.get(principal, 0) - 1
        if left > 0:
            self._open[principal] = left
            return
        self._open.pop(principal, None)
        self._generations.pop(principal, None)
        self._in_a_row.pop(principal, None)

    def kept(self) -> int:
        """How many principals something is kept for (bounded by the connections running)."""
        return len(self._open.keys() | self._generations.keys() | self._in_a_row.keys())

    def served(self, principal: Principal) -> None:
        """A listing or a call of ``principal``'s session succeeded: its consents in a row start again. (Not any
        request: a server may take ``initialize`` without a token, and a step-up loop reconnects through it.)"""
        self._in_a_row.pop(principal, None)


class _KeptFlow(OAuthClientProvider):
    """The SDK's flow, its failures kept instead of raised, its tokens reloaded when the vault's changed (see the
    module's docstring). Subclasses call ``_keep`` from their ``__init__``."""

    principal: Principal
    shared: ProviderContext
    pending: AuthorizationRequired | None
    """The consent its last refused request needs (a person must open its URL); ``None`` once one is served."""
    failure: str | None
    """Why its last refused request could not be authorized (no secret in it); ``None`` once one is served."""
    binding: str | None
    """Set by ``ConsentFlow.authorize`` for a consent a browser asked for: its callback must bring it."""
    least_scope: str | None
    """Set by ``ConsentFlow.authorize``: scopes its consent asks on top of its own choice (a pending step-up's)."""
    requested: bool
    """Set by ``ConsentFlow.authorize``: a person asked for this consent (Connect), no server refused a token, so
    it does not count toward the step-up limit (a person may ask again as often as they close the window)."""
    on_token_gone: Callable[[], None] | None
    """Called when the token its session was opened with is gone from the vault (revoked, maybe elsewhere)."""

    def _keep(self, context: ProviderContext, principal: Principal) -> None:
        self.principal = principal
        self.shared = context
        self.pending = None
        self.failure = None
        self.binding = None
        self.least_scope = None
        self.requested = False
        self.on_token_gone = None
        self._generation = context.generation(principal)
        self._checked_at = -math.inf

    @property
    def _storage(self) -> VaultTokenStorage:
        storage = self.context.storage
        assert isinstance(storage, VaultTokenStorage)
        return storage

    async def _vault_changed(self) -> bool:
        """Whether the vault's row of the principal changed since the tokens were loaded (read at most every
        ``token_check_seconds``; a store that cannot answer now: not changed, the next check asks again)."""
        now = time.monotonic()
        if now - self._checked_at < self.shared.token_check_seconds:
            return False
        self._checked_at = now
        try:
            stamp = await self.shared.vault.token_stamp(self.principal)
        except Exception as error:
            _log.warning("oauth_token_check_failed", principal=self.principal.describe(), error=type(error).__name__)
            return False
        return stamp != self._storage.loaded_at

    async def _initialize(self) -> None:
        self._checked_at = time.monotonic()
        await super()._initialize()
        if self.context.current_tokens is not None:
            # The vault hands out expires_in as what remains (less a margin): an expired token is refreshed first.
            self.context.update_token_expiry(self.context.current_tokens)
        self._generation = self.shared.generation(self.principal)

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        held = self._initialized and self.context.current_tokens is not None
        if self._initialized and (
            self._generation != self.shared.generation(self.principal)  # a consent or revocation here
            or await self._vault_changed()  # a refresh, consent or revocation on another replica
            # About to refresh: another replica may have refreshed first (and the server rotated the refresh token).
            or (held and not self.context.is_token_valid())
        ):
            self._initialized = False
        if not self._initialized:
            await self._initialize()
            if held and self.context.current_tokens is None and self.on_token_gone is not None:
                _log.info("oauth_token_gone", principal=self.principal.describe())
                self.on_token_gone()
        inner = super()._auth_flow(request)
        response: httpx2.Response | None = None
        try:
            outgoing = await inner.__anext__()
            while True:
                response = yield outgoing
                outgoing = await inner.asend(response)
        except StopAsyncIteration:
            if response is not None and response.status_code < 400:
                self.pending = None
                self.failure = None
            return
        except AuthorizationRequired as required:
            self.pending = required
            self.failure = None
        except Exception as error:  # an OAuth failure of this request: never the whole session's
            self.pending = None
            self.failure = _describe(error)
            _log.warning("oauth_flow_failed", principal=self.principal.describe(), error=self.failure)
        finally:
            await inner.aclose()
        # The request once more, as the server refused it: the transport sees this request fail, nothing else.
        request.headers.pop("Authorization", None)
        yield request


class _GatewayFlow(_KeptFlow):
    """The authorization-code flow, its consent asked through the vault."""

    def __init__(
        self,
        context: ProviderContext,
        principal: Principal,
        server_url: str,
        config: OAuthConfig,
        client_metadata: OAuthClientMetadata,
        client_metadata_url: str | None,
    ) -> None:
        super().__init__(
            server_url,
            client_metadata,
            context.vault.storage(principal, server_url),
            client_metadata_url=client_metadata_url,
        )
        self._keep(context, principal)
        self.config = config

    async def _initialize(self) -> None:
        await super()._initialize()
        fixed = _pre_registered(self.config, self.shared.redirect_url)
        if fixed is not None:
            self.context.client_info = fixed

    # --- consent ------------------------------------------------------------------------------------------------

    async def _perform_authorization_code_grant(self) -> tuple[str, str]:
        """Overridden (mcp ==2.3.0): keep the consent in the vault and raise ``AuthorizationRequired`` instead of
        awaiting a callback in-process."""
        context = self.context
        if context.client_info is None:
            raise OAuthFlowError("no client registration to ask a consent with")
        if self.config.tokens == "perUser" and not self.principal.user:
            # Never one person's consent for everyone: a per-user server's sessions are each user's own.
            raise OAuthFlowError("a per-user server is authorized by each user (caller.user), not for the deployment")
        asked = 0 if self.requested else self.shared.consent_asked(self.principal)
        if asked > self.shared.step_up_limit:
            raise OAuthFlowError(
                f"the server still refuses the token after {self.shared.step_up_limit} consents in a row "
                "(insufficient_scope); the gateway stops asking (MCP_CLIENT_OAUTH_STEP_UP_LIMIT)"
            )
        metadata = context.oauth_metadata
        if metadata is not None and metadata.authorization_endpoint:
            endpoint = str(metadata.authorization_endpoint)
        else:
            endpoint = urljoin(context.get_authorization_base_url(context.server_url), "/authorize")
        pkce = PKCEParameters.generate()
        include_resource = context.should_include_resource_param(context.protocol_version)
        scope = _union(context.client_metadata.scope, self.least_scope)
        pending = PendingConsent(
            code_verifier=pkce.code_verifier,
            redirect_uri=self.shared.redirect_url,
            token_endpoint=self._get_token_endpoint(),
            scope=scope,
            resource=context.get_resource_url() if include_resource else None,
            issuer=str(metadata.issuer) if metadata is not None else None,
            iss_required=bool(metadata and getattr(metadata, "authorization_response_iss_parameter_supported", False)),
            revocation_endpoint=str(metadata.revocation_endpoint)
            if metadata and metadata.revocation_endpoint
            else None,
            binding=self.binding,
            server_url=context.server_url,
        )
        vault = self.shared.vault
        # The callback exchanges the code with the client as registered now (a pre-registered one included).
        await vault.store_client_info(self.principal.tenant, self.principal.server, context.client_info)
        state = await vault.start_consent(self.principal, pending)
        params = {
            "response_type": "code",
            "client_id": context.client_info.client_id,
            "redirect_uri": self.shared.redirect_url,
            "state": state,
            "code_challenge": pkce.code_challenge,
            "code_challenge_method": "S256",
        }
        if pending.resource is not None:
            params["resource"] = pending.resource  # RFC 8707
        if scope:
            params["scope"] = scope
            if "offline_access" in scope.split():
                params["prompt"] = "consent"  # OIDC wants it with offline_access
        url = f"{endpoint}?{urlencode(params)}"
        _log.info("oauth_consent_required", principal=self.principal.describe(), scope=scope, attempt=asked)
        raise AuthorizationRequired(self.principal, url)


class _ClientCredentialsFlow(_KeptFlow, ClientCredentialsOAuthProvider):
    """``client_credentials`` (machine to machine): the SDK's provider over the vault."""

    def __init__(self, context: ProviderContext, principal: Principal, server_url: str, config: OAuthConfig) -> None:
        method = config.token_endpoint_auth_method
        with warnings.catch_warnings():
            # The issuer is whichever the server's metadata names (the SDK warns that 3.0 will want it given).
            warnings.simplefilter("ignore")
            super().__init__(
                server_url,
                context.vault.storage(principal, server_url),
                client_id=config.client_id or "",
                client_secret=config.client_secret or "",
                token_endpoint_auth_method="client_secret_post"
                if method == "client_secret_post"
                else "client_secret_basic",
                scope=config.scope,
            )
        self._keep(context, principal)


GatewayAuth = _GatewayFlow | _ClientCredentialsFlow


def build_provider(context: ProviderContext, principal: Principal, server_url: str, config: OAuthConfig) -> GatewayAuth:
    """The ``Auth`` of one session of ``principal`` to the server at ``server_url`` (``config`` resolved)."""
    if config.grant == "client_credentials":
        return _ClientCredentialsFlow(context, principal, server_url, config)
    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl(context.redirect_url)],
        client_name=context.client_name,
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
        scope=config.scope,
    )
    cimd = config.client_metadata_url or context.client_metadata_url or None
    return _GatewayFlow(context, principal, server_url, config, metadata, cimd)


@dataclass(frozen=True)
class SessionOAuth:
    """How the sessions of one principal to one server authorize themselves: a new provider per session."""

    context: ProviderContext
    principal: Principal

    def provider(self, server_url: str, config: OAuthConfig) -> GatewayAuth:
        return build_provider(self.context, self.principal, server_url, config)


def _pre_registered(config: OAuthConfig, redirect_url: str) -> OAuthClientInformationFull | None:
    if not config.client_id:
        return None
    method = config.token_endpoint_auth_method or ("client_secret_basic" if config.client_secret else "none")
    return OAuthClientInformationFull(
        client_id=config.client_id,
        client_secret=config.client_secret,
        redirect_uris=[AnyUrl(redirect_url)],
        grant_types=["authorization_code", "refresh_token"],
        token_endpoint_auth_method=method,
        scope=config.scope,
    )


def _union(scope: str | None, more: str | None) -> str | None:
    """``scope`` with the scopes of ``more`` it lacks added (in order; ``None`` when both are empty)."""
    words = list(dict.fromkeys([*(scope or "").split(), *(more or "").split()]))
    return " ".join(words) or None


def _describe(error: Exception) -> str:
    """An OAuth failure in words without a secret: the SDK's messages name endpoints and statuses, but a token
    endpoint's error body may echo what was sent, so only its first line, cut short."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"OAuth: {text[:300]}"
