"""Binds an OAuth consent to the browser that asked for it (docs/agent-api.md, "Connections").

The callback (``GET /api/v1/agent/oauth/callback``) is public, and a consent URL's ``state`` is all it carries: a
person who asked for their own consent URL could send it to someone else, whose consent would then make that
person's account the asker's token. So the endpoints that start a consent (a person's ``POST
/api/v1/agent/connections/{server}/authorize``, an admin's ``POST /api/v1/admin/mcp-servers/{name}/authorize``)
set a random nonce in an HttpOnly, SameSite=Lax cookie of the callback's path in the asking browser, and give the
gateway its hash (``OAuthAuthorizeRequest.binding``), which the gateway keeps with the consent; the callback passes
on the hash of the cookie the browser brought back (``OAuthCallback.binding``), and the gateway refuses a bound
consent completed without the same one (400 ``oauth_binding_mismatch``).

SameSite=Lax: the authorization server's redirect back is a top-level GET navigation, which carries it. The
cookie's name is derived from the consent's state, so a browser may have several consents under way at once (two
servers); the state itself is never in it (a hash). Only the hash ever leaves agent-service.
"""

from __future__ import annotations

import hashlib
import secrets
from urllib.parse import parse_qs, urlparse

from starlette.requests import Request
from starlette.responses import Response

from suite_common.http import ModelResponse
from suite_common.wire import OAuthAuthorizeResult

__all__ = ["CALLBACK_PATH", "binding_of", "bound_answer", "forget_binding", "new_nonce", "nonce_hash"]

CALLBACK_PATH = "/api/v1/agent/oauth/callback"
"""The public callback the authorization server sends the browser back to: the only path the cookie goes to."""

_COOKIE_SECONDS = 1800
"""How long the browser keeps a consent's cookie: longer than the gateway keeps a pending consent (600 s by
default, ``MCP_CLIENT_OAUTH_CONSENT_SECONDS``), bounded so that unfinished consents leave nothing for long."""


def new_nonce() -> str:
    """A random nonce for one consent, kept in the asking browser only."""
    return secrets.token_urlsafe(32)


def nonce_hash(nonce: str) -> str:
    """What the gateway keeps and compares: the nonce's SHA-256 (hex)."""
    return hashlib.sha256(nonce.encode()).hexdigest()


def _cookie_name(state: str) -> str:
    return "consent_" + hashlib.sha256(state.encode()).hexdigest()[:24]


def _state_of(url: str) -> str | None:
    states = parse_qs(urlparse(url).query).get("state")
    return states[0] if states else None


def bound_answer(request: Request, answer: OAuthAuthorizeResult, nonce: str) -> Response:
    """``answer`` for the asking browser, with the consent's cookie holding ``nonce`` when it is a consent URL."""
    response = ModelResponse(answer)
    state = _state_of(answer.authorization_url) if answer.authorization_url else None
    if state is not None:
        response.set_cookie(
            _cookie_name(state),
            nonce,
            max_age=_COOKIE_SECONDS,
            path=CALLBACK_PATH,
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="lax",
        )
    return response


def binding_of(request: Request, state: str) -> str | None:
    """The hash of the nonce the browser brought back for the consent ``state``; ``None``: it brought none."""
    nonce = request.cookies.get(_cookie_name(state))
    return nonce_hash(nonce) if nonce else None


def forget_binding(request: Request, response: Response, state: str) -> None:
    """The consent ``state`` is used (whatever came of it): its cookie goes."""
    if _cookie_name(state) in request.cookies:
        secure = request.url.scheme == "https"
        response.delete_cookie(_cookie_name(state), path=CALLBACK_PATH, secure=secure, httponly=True, samesite="lax")
