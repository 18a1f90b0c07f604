"""Who is calling each HTTP request: ``CallerMiddleware`` identifies the caller by its key (``Authorization:
Bearer``), its tenant, and the end user a trusted caller names (``X-User-Id``) with that user's role
(``X-User-Role``: guest, user, admin or owner; default user); handlers read it with ``caller_of``.

A presented key is looked up in the callers file first (``agent_service.access.callers_file``, in memory, in
constant time), then, with ``AGENT_CALLER_KEYS_IN_STORE``, in the run store by its hash when no key of the file
matched (``agent_service.access.stored_keys``); such a key's tenant has the rules of its ``[tenants.<name>]`` table
in the file, if there is one, else none. Without a callers file and store keys the API is open, as on a laptop:
every request is the caller ``anonymous`` of the tenant ``default``, which may name a user.

``CallerMiddleware`` is the one place that checks: ``/api/v1/agent/*``, ``/api/v1/admin/*`` and ``/v1/*`` need a
key (but the OAuth callback a browser comes back to, ``PUBLIC_PATHS``); the health, metrics, OpenAPI and console page
routes stay open. The store unreachable when a key has to be
looked up there: 503 ``store_unavailable``. With keys, the lines logged while serving a request carry ``caller``,
``tenant``, ``user`` and ``user_role`` (when named). Handlers (and the limiter) read the caller with ``caller_of``.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agent_service.access.callers_file import Callers, hash_key
from agent_service.access.stored_keys import StoredKeys
from agent_service.api.openai_wire import error_body
from agent_service.core.names import USER_ID_RULE, is_user_id
from agent_service.core.tenancy import ANONYMOUS, NO_RULES, USER_ROLES, Caller, UserRole
from agent_service.store import StoreError
from suite_common.echo import clip
from suite_common.errors import error_response
from suite_common.logging import get_logger, logged_with

__all__ = ["CALLER_ERRORS", "PROTECTED_PREFIXES", "PUBLIC_PATHS", "CallerMiddleware", "caller_of", "is_protected"]

_log = get_logger("agent_service.callers")

PROTECTED_PREFIXES = ("/api/v1/agent/", "/api/v1/admin/", "/v1/")
"""The paths that need a caller key (when the service has keys): the one list, which /openapi.json documents too."""
PUBLIC_PATHS = ("/api/v1/agent/oauth/callback",)
"""Paths under ``PROTECTED_PREFIXES`` that need no key: a person's browser comes back there from an OAuth
authorization server, with nothing but the redirect's query (whose ``state`` the gateway checks)."""


def is_protected(path: str) -> bool:
    """Whether ``path`` needs a caller key (when the service has keys)."""
    return path.startswith(PROTECTED_PREFIXES) and path not in PUBLIC_PATHS


CALLER_ERRORS = {
    400: "X-User-Id is not 1 to 128 printable ASCII characters without spaces (invalid_request), or X-User-Role is "
    "not one of guest, user, admin, owner (invalid_user_role).",
    401: "No caller key (Authorization: Bearer), or an unknown or revoked one (unauthorized, WWW-Authenticate).",
    403: "X-User-Id or X-User-Role from a caller whose key is not trusted (user_not_allowed).",
    503: "The run store, which holds caller keys (AGENT_CALLER_KEYS_IN_STORE), is unavailable (store_unavailable).",
}
"""What ``CallerMiddleware`` answers on a protected path, by status, for /openapi.json (with the operation's own)."""
_OPENAI_PREFIX = "/v1/"
_USER_HEADER = b"x-user-id"
_ROLE_HEADER = b"x-user-role"
_ROLES_SHOWN = ", ".join(USER_ROLES)


def caller_of(request: Request) -> Caller:
    """The request's caller, as ``CallerMiddleware`` identified it."""
    caller = request.scope.get("state", {}).get("caller")
    if not isinstance(caller, Caller):
        raise RuntimeError("no caller on the request: CallerMiddleware is not installed")
    return caller


def _header(scope: Scope, name: bytes) -> str | None:
    return next((value.decode("latin-1") for key, value in scope["headers"] if key == name), None)


def _bearer(scope: Scope) -> str | None:
    value = _header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _end_user_refusal(caller: Caller, trusted: bool, user: str | None, role: str | None) -> tuple[int, str, str] | None:
    """Why the end user a request names (``X-User-Id``, ``X-User-Role``) is refused: status, code and message; or
    None when it is not."""
    if not trusted:
        named = " and ".join(
            header for header, value in (("X-User-Id", user), ("X-User-Role", role)) if value is not None
        )
        return (
            403,
            "user_not_allowed",
            f"The caller {caller.name} may not name the end user ({named}): its key is not trusted.",
        )
    if user is not None and not is_user_id(user):
        return 400, "invalid_request", f"X-User-Id must be {USER_ID_RULE}."
    if role is not None and role not in USER_ROLES:
        return 400, "invalid_user_role", f"X-User-Role must be one of {_ROLES_SHOWN} (got {clip(role)!r})."
    return None


def _user_role(role: str | None) -> UserRole:
    """The end user's role as ``X-User-Role`` names it (checked already); ``user`` when it names none."""
    return next((known for known in USER_ROLES if known == role), "user")


class CallerMiddleware:
    """Identifies the caller of every HTTP request (``scope["state"]["caller"]``); refuses a protected path without
    a known key (401), and ``X-User-Id`` or ``X-User-Role`` from a key that may not name users (403).

    The keys: the callers file's (``callers``), checked first, in memory; then, when ``stored`` is given, the run
    store's, only for a protected path that no file key matched. Neither: an open API."""

    def __init__(self, app: ASGIApp, *, callers: Callers | None, stored: StoredKeys | None = None) -> None:
        self.app = app
        self.callers = callers
        self.stored = stored
        self.open = callers is None and stored is None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        protected = is_protected(path)
        user = _header(scope, _USER_HEADER)
        role = _header(scope, _ROLE_HEADER)
        if self.open:
            caller, trusted = ANONYMOUS, True  # an open API: whoever can reach it is trusted, as on a laptop
        else:
            presented = _bearer(scope)
            try:
                identified = await self._identify(presented, protected)
            except StoreError as error:
                _log.warning("caller_keys_unavailable", path=path, error=str(error))
                message = "The run store, which holds the caller keys, is unavailable; try again shortly."
                refusal = self._refuse(path, 503, "store_unavailable", message, {"Retry-After": "1"})
                await refusal(scope, receive, send)
                return
            if identified is None:
                if protected:
                    reason = "Missing" if presented is None else "Unknown"
                    message = f"{reason} caller key: send Authorization: Bearer <key>."
                    await self._refuse(path, 401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})(
                        scope, receive, send
                    )
                    return
                caller, trusted = ANONYMOUS, False
            else:
                caller, trusted = identified
        if protected and (user is not None or role is not None):
            problem = _end_user_refusal(caller, trusted, user, role)
            if problem is not None:
                await self._refuse(path, *problem)(scope, receive, send)
                return
            caller = replace(caller, user=user, role=_user_role(role))
        scope.setdefault("state", {})["caller"] = caller
        if self.open or caller is ANONYMOUS:
            await self.app(scope, receive, send)
            return
        # Every line logged while serving the request says whose it is (names only, never the key).
        context = {"caller": caller.name, "tenant": caller.tenant} | ({"user": caller.user} if caller.user else {})
        if role is not None:
            context["user_role"] = caller.role
        with logged_with(**context):
            await self.app(scope, receive, send)

    async def _identify(self, presented: str | None, protected: bool) -> tuple[Caller, bool] | None:
        """The caller whose key is ``presented`` and whether it is trusted, or None for no key or an unknown one.
        The store is asked only for a protected path (an open one serves anybody the same)."""
        if presented is None:
            return None
        if self.callers is not None:
            key = self.callers.identify(presented)
            if key is not None:
                caller = Caller(key.name, key.tenant, rules=self.callers.rules[key.tenant], key_role=key.role)
                return caller, key.trusted
        if self.stored is None or not protected:
            return None
        stored = await self.stored.find(hash_key(presented))
        if stored is None:
            return None
        rules = self.callers.rules_of(stored.tenant) if self.callers is not None else NO_RULES
        return Caller(stored.name, stored.tenant, rules=rules, key_role=stored.role), stored.trusted

    @staticmethod
    def _refuse(path: str, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        _log.info("caller_refused", path=path, status=status, code=code)
        if path.startswith(_OPENAI_PREFIX):  # the OpenAI SDK reads its own error shape
            return JSONResponse(error_body(status, code, message), status_code=status, headers=headers)
        return error_response(status, code, message, headers)
