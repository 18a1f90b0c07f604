"""An OAuth-protected MCP server for tests: the echo server behind a bearer check, and the authorization server that
issues its tokens, in one small real app on a loopback port.

It speaks the specs exactly as far as the gateway uses them: protected-resource metadata (RFC 9728) named by the
401's ``WWW-Authenticate``, authorization-server metadata (RFC 8414), dynamic client registration (RFC 7591), the
authorization endpoint (which "consents" at once: it redirects to the redirect URI with a code, as a person
clicking "allow" would), the token endpoint (``authorization_code`` with PKCE S256, ``refresh_token``; RFC 6749) and
revocation (RFC 7009). What it saw is kept for the test to check (``OAuthWorld``): every bearer token the MCP
endpoint got, every grant, every revocation.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from support.echo_mcp_server import build_echo_server
from support.servers import serve_app

__all__ = ["OAuthWorld", "protected_echo_server"]


@dataclass
class OAuthWorld:
    """What the authorization server issued and the MCP server saw."""

    base_url: str = ""
    expires_in: int = 3600
    deny: bool = False
    """``/authorize`` answers ``error=access_denied`` instead of a code."""
    fail_token_endpoint: bool = False
    call_scope: str | None = None
    """Set: a ``tools/call`` needs this scope too (else 403 ``insufficient_scope``, a step-up)."""
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    access_tokens: dict[str, str] = field(default_factory=dict)
    """Live access token: its scope."""
    refresh_tokens: dict[str, str] = field(default_factory=dict)
    grants: list[str] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    bearers: list[str] = field(default_factory=list)
    """Every bearer token the MCP endpoint accepted, in order."""
    issued: list[str] = field(default_factory=list)
    """Every token and code it issued: none may appear in a log line or an answer of the gateway."""

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    def _issue(self, scope: str) -> dict[str, Any]:
        access, refresh = f"at-{secrets.token_hex(8)}", f"rt-{secrets.token_hex(8)}"
        self.access_tokens[access] = scope
        self.refresh_tokens[refresh] = scope
        self.issued += [access, refresh]
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "refresh_token": refresh,
            "scope": scope,
        }


def _auth_app(world: OAuthWorld) -> Starlette:
    async def resource_metadata(_: Request) -> Response:
        return JSONResponse(
            {"resource": world.mcp_url, "authorization_servers": [world.base_url], "scopes_supported": ["echo"]}
        )

    async def server_metadata(_: Request) -> Response:
        base = world.base_url
        return JSONResponse(
            {
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "registration_endpoint": f"{base}/register",
                "revocation_endpoint": f"{base}/revoke",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none", "client_secret_post"],
            }
        )

    async def register(request: Request) -> Response:
        body = await request.json()
        client = {**body, "client_id": f"client-{secrets.token_hex(4)}", "token_endpoint_auth_method": "none"}
        return JSONResponse(client, status_code=201)

    async def authorize(request: Request) -> Response:
        query = request.query_params
        if world.deny:
            target = {"error": "access_denied", "state": query["state"]}
        else:
            code = f"code-{secrets.token_hex(8)}"
            world.issued.append(code)
            world.codes[code] = {
                "challenge": query["code_challenge"],
                "redirect_uri": query["redirect_uri"],
                "scope": query.get("scope", "echo"),
            }
            target = {"code": code, "state": query["state"]}
        return RedirectResponse(f"{query['redirect_uri']}?{urlencode(target)}", status_code=302)

    async def token(request: Request) -> Response:
        form = await request.form()
        grant = str(form.get("grant_type"))
        world.grants.append(grant)
        if world.fail_token_endpoint:
            return JSONResponse({"error": "server_error"}, status_code=500)
        if grant == "authorization_code":
            pending = world.codes.pop(str(form.get("code")), None)
            verifier = str(form.get("code_verifier", ""))
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
            if (
                pending is None
                or pending["challenge"] != challenge
                or pending["redirect_uri"] != form.get("redirect_uri")
            ):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            return JSONResponse(world._issue(pending["scope"]))
        if grant == "refresh_token":
            scope = world.refresh_tokens.pop(str(form.get("refresh_token")), None)
            if scope is None:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            return JSONResponse(world._issue(scope))
        return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)

    async def revoke(request: Request) -> Response:
        form = await request.form()
        revoked = str(form.get("token"))
        world.revoked.append(revoked)
        world.refresh_tokens.pop(revoked, None)
        world.access_tokens.pop(revoked, None)
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/.well-known/oauth-protected-resource/mcp", resource_metadata),
            Route("/.well-known/oauth-authorization-server", server_metadata),
            Route("/register", register, methods=["POST"]),
            Route("/authorize", authorize),
            Route("/token", token, methods=["POST"]),
            Route("/revoke", revoke, methods=["POST"]),
        ]
    )


class _Protected:
    """``/mcp`` behind the bearer check; everything else is the authorization server's."""

    def __init__(self, world: OAuthWorld, mcp: ASGIApp, auth: ASGIApp) -> None:
        self.world, self.mcp, self.auth = world, mcp, auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.mcp(scope, receive, send)
            return
        if not scope["path"].startswith("/mcp"):
            await self.auth(scope, receive, send)
            return
        headers = dict(scope["headers"])
        bearer = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")
        if bearer not in self.world.access_tokens:
            challenge = f'Bearer resource_metadata="{self.world.base_url}/.well-known/oauth-protected-resource/mcp"'
            response = JSONResponse(
                {"error": "invalid_token"}, status_code=401, headers={"WWW-Authenticate": challenge}
            )
            await response(scope, receive, send)
            return
        body, receive = await _read_body(receive)
        needed = self.world.call_scope
        if needed and b'"tools/call"' in body and needed not in self.world.access_tokens[bearer].split():
            wanted = f"{self.world.access_tokens[bearer]} {needed}"
            challenge = f'Bearer error="insufficient_scope", scope="{wanted}"'
            response = JSONResponse(
                {"error": "insufficient_scope"}, status_code=403, headers={"WWW-Authenticate": challenge}
            )
            await response(scope, receive, send)
            return
        self.world.bearers.append(bearer)
        await self.mcp(scope, receive, send)


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The request's body, and a ``receive`` that hands it on again."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


@asynccontextmanager
async def protected_echo_server(world: OAuthWorld | None = None) -> AsyncIterator[OAuthWorld]:
    """The echo MCP server behind OAuth on a loopback port; yields its world (``mcp_url`` is its endpoint)."""
    world = world or OAuthWorld()
    app = _Protected(world, build_echo_server("echo").streamable_http_app(), _auth_app(world))
    async with serve_app(app) as base_url:
        world.base_url = base_url
        yield world
