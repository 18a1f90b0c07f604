"""An OAuth 2.1 authorization server and an MCP server it protects, both small real starlette apps, for tests of
the gateway's OAuth: the outside party faked, speaking the RFCs exactly.

The authorization server speaks RFC 8414 (metadata at ``/.well-known/oauth-authorization-server``), RFC 7591
(dynamic client registration, ``/register``), RFC 6749 with PKCE (RFC 7636, S256 only): ``/authorize`` answers a
logged-in browser (the cookie ``as_user=<user>``, how a test plays the person) with a redirect carrying ``code``,
``state`` and ``iss`` (RFC 9207), or ``error=access_denied`` for the cookie ``as_user=-deny``; ``/token`` takes the
``authorization_code`` and ``refresh_token`` grants, clients authenticating with ``client_secret_basic``,
``client_secret_post`` or ``none``; ``/revoke`` is RFC 7009. Tokens are opaque and random; the server remembers
whose each is.

The protected MCP server (``/mcp``, streamable HTTP) answers a request without a valid bearer token 401 with
``WWW-Authenticate: Bearer resource_metadata=..., scope=...`` (RFC 9728 section 5.1) and serves its protected-resource
metadata at ``/.well-known/oauth-protected-resource/mcp``. Its tool ``whoami`` answers the user whose token the call
carried; every call's bearer token is recorded (``calls``), so a test can say which token each call used.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from mcp.server.mcpserver import Context, MCPServer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from support.servers import serve_app

__all__ = ["AuthorizationServer", "ProtectedCall", "oauth_protected_server"]

SCOPE = "crm.read"


@dataclass(frozen=True)
class _Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    scope: str
    user: str


@dataclass(frozen=True)
class _Token:
    user: str
    client_id: str
    scope: str
    expires_at: float


@dataclass(frozen=True)
class ProtectedCall:
    """One call of the protected MCP server's tool: the bearer token it carried and whose that token is."""

    token: str
    user: str


@dataclass
class AuthorizationServer:
    """The authorization server's state: clients, codes, tokens (by value), refresh tokens, and what it was asked."""

    issuer: str = ""
    token_seconds: int = 3600
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    codes: dict[str, _Grant] = field(default_factory=dict)
    tokens: dict[str, _Token] = field(default_factory=dict)
    refresh_tokens: dict[str, _Token] = field(default_factory=dict)
    revoked: list[str] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)
    """Every code, access token and refresh token it ever issued (for a test to look for in logs and answers)."""

    def user_of(self, token: str) -> str | None:
        grant = self.tokens.get(token)
        return grant.user if grant is not None and grant.expires_at > time.time() else None

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "registration_endpoint": f"{self.issuer}/register",
            "revocation_endpoint": f"{self.issuer}/revoke",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
            "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
            "scopes_supported": [SCOPE],
            "authorization_response_iss_parameter_supported": True,
        }

    # --- endpoints -----------------------------------------------------------------------------------

    async def _metadata(self, _: Request) -> Response:
        return JSONResponse(self.metadata())

    async def _register(self, request: Request) -> Response:
        body = await request.json()
        redirect_uris = body.get("redirect_uris")
        if not isinstance(redirect_uris, list) or not redirect_uris:
            return _oauth_error("invalid_redirect_uri", "redirect_uris is required")
        method = body.get("token_endpoint_auth_method", "client_secret_basic")
        client = {**body, "client_id": "client-" + secrets.token_hex(8), "token_endpoint_auth_method": method}
        if method != "none":
            client["client_secret"] = "secret-" + secrets.token_hex(16)
        client["client_id_issued_at"] = int(time.time())
        self.clients[client["client_id"]] = client
        return JSONResponse(client, status_code=201)

    async def _authorize(self, request: Request) -> Response:
        query = request.query_params
        client = self.clients.get(query.get("client_id", ""))
        redirect_uri = query.get("redirect_uri", "")
        if client is None or redirect_uri not in client["redirect_uris"]:
            return PlainTextResponse("unknown client or redirect URI", status_code=400)  # never redirect then
        back: dict[str, str] = {"state": query.get("state", ""), "iss": self.issuer}
        user = request.cookies.get("as_user")
        if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
            back["error"] = "invalid_request"
        elif user is None:
            return PlainTextResponse("log in first", status_code=401)
        elif user == "-deny":
            back |= {"error": "access_denied", "error_description": "The user said no."}
        else:
            code = "code-" + secrets.token_urlsafe(16)
            challenge = query.get("code_challenge", "")
            self.codes[code] = _Grant(client["client_id"], redirect_uri, challenge, query.get("scope") or SCOPE, user)
            self.issued.append(code)
            back["code"] = code
        return RedirectResponse(f"{redirect_uri}?{urlencode(back)}", status_code=302)

    async def _token(self, request: Request) -> Response:
        form = await request.form()
        client_id = _authenticated_client(request, dict(form), self.clients)
        if client_id is None:
            return _oauth_error("invalid_client", "client authentication failed", status=401)
        grant_type = form.get("grant_type")
        if grant_type == "authorization_code":
            grant = self.codes.pop(str(form.get("code", "")), None)  # a code is used once
            verifier = str(form.get("code_verifier", ""))
            if grant is None or grant.client_id != client_id or grant.redirect_uri != form.get("redirect_uri"):
                return _oauth_error("invalid_grant", "unknown, used or mismatched code")
            if _s256(verifier) != grant.challenge:
                return _oauth_error("invalid_grant", "PKCE verification failed")
            return self._issue(grant.user, client_id, grant.scope)
        if grant_type == "refresh_token":
            held = self.refresh_tokens.pop(str(form.get("refresh_token", "")), None)
            if held is None or held.client_id != client_id:
                return _oauth_error("invalid_grant", "unknown refresh token")
            return self._issue(held.user, client_id, held.scope)
        return _oauth_error("unsupported_grant_type", f"grant_type {grant_type!r}")

    def _issue(self, user: str, client_id: str, scope: str) -> Response:
        access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
        self.tokens[access] = _Token(user, client_id, scope, time.time() + self.token_seconds)
        self.refresh_tokens[refresh] = _Token(user, client_id, scope, time.time() + 30 * 86400)
        self.issued += [access, refresh]
        answer = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.token_seconds,
            "refresh_token": refresh,
            "scope": scope,
        }
        return JSONResponse(answer, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})

    async def _revoke(self, request: Request) -> Response:
        form = await request.form()
        if _authenticated_client(request, dict(form), self.clients) is None:
            return _oauth_error("invalid_client", "client authentication failed", status=401)
        token = str(form.get("token", ""))
        self.revoked.append(token)
        self.tokens.pop(token, None)
        self.refresh_tokens.pop(token, None)
        return Response(status_code=200)  # RFC 7009 2.2: 200 whether or not the token was known

    @property
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", self._metadata, methods=["GET"]),
                Route("/register", self._register, methods=["POST"]),
                Route("/authorize", self._authorize, methods=["GET"]),
                Route("/token", self._token, methods=["POST"]),
                Route("/revoke", self._revoke, methods=["POST"]),
            ]
        )


def _oauth_error(code: str, description: str, *, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": code, "error_description": description}, status_code=status)


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def _authenticated_client(request: Request, form: dict[str, Any], clients: dict[str, dict[str, Any]]) -> str | None:
    """The client a token or revocation request authenticates as (RFC 6749 2.3.1), by its registered method."""
    header = request.headers.get("authorization", "")
    secret: str | None
    if header.lower().startswith("basic "):
        client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        method = "client_secret_basic"
    else:
        client_id = str(form.get("client_id", ""))
        secret = form.get("client_secret")
        secret = None if secret is None else str(secret)
        method = "client_secret_post" if secret is not None else "none"
    client = clients.get(client_id)
    if client is None or client["token_endpoint_auth_method"] != method:
        return None
    return client_id if method == "none" or secrets.compare_digest(str(secret), client["client_secret"]) else None


class _BearerGuard:
    """Lets through to ``/mcp`` only a request with a live bearer token of the authorization server (RFC 6750)."""

    def __init__(self, app: ASGIApp, server: AuthorizationServer, base: list[str]) -> None:
        self.app, self.server, self.base = app, server, base

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            header = dict(scope["headers"]).get(b"authorization", b"").decode()
            token = header[7:] if header.lower().startswith("bearer ") else ""
            if self.server.user_of(token) is None:
                challenge = (
                    f'Bearer resource_metadata="{self.base[0]}/.well-known/oauth-protected-resource/mcp", '
                    f'scope="{SCOPE}"' + (', error="invalid_token"' if token else "")
                )
                refusal = JSONResponse(
                    {"error": "invalid_token"}, status_code=401, headers={"WWW-Authenticate": challenge}
                )
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


@asynccontextmanager
async def oauth_protected_server() -> AsyncIterator[tuple[AuthorizationServer, str, list[ProtectedCall]]]:
    """The authorization server and the MCP server it protects, each on a loopback port: yields the authorization
    server's state, the MCP endpoint's URL, and the calls of ``whoami`` as they come."""
    authority = AuthorizationServer()
    calls: list[ProtectedCall] = []
    base: list[str] = []
    mcp = MCPServer("crm")

    @mcp.tool()
    def whoami(ctx: Context) -> str:
        """The user whose token this call carried."""
        request = ctx.request_context.request
        token = request.headers["authorization"][7:] if request is not None else ""
        user = authority.user_of(token) or "-"
        calls.append(ProtectedCall(token=token, user=user))
        return f"you are {user}"

    inner = mcp.streamable_http_app()

    async def resource_metadata(_: Request) -> Response:
        return JSONResponse(
            {
                "resource": f"{base[0]}/mcp",
                "authorization_servers": [authority.issuer],
                "scopes_supported": [SCOPE],
                "bearer_methods_supported": ["header"],
            }
        )

    inner.router.routes.insert(
        0, Route("/.well-known/oauth-protected-resource/mcp", resource_metadata, methods=["GET"])
    )
    async with serve_app(authority.app) as issuer, serve_app(_BearerGuard(inner, authority, base)) as url:
        authority.issuer = issuer
        base.append(url)
        yield authority, url + "/mcp", calls
