"""Shared-secret checks between the suite's services."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from suite_common.errors import error_response

__all__ = ["SharedSecretMiddleware", "secrets_match"]


def secrets_match(given: str | None, expected: str) -> bool:
    """Constant-time comparison, so response timing says nothing about the secret."""
    if given is None or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


class SharedSecretMiddleware:
    """Requires the secret header on every path under one of ``protected_prefixes``.

    Health routes stay open for probes. The header is only read, never logged or forwarded.
    """

    def __init__(self, app: ASGIApp, *, header: str, secret: str, protected_prefixes: Sequence[str]) -> None:
        if not secret:
            raise ValueError("a shared secret is required")
        self.app = app
        self.header = header.lower().encode("latin-1")
        self.secret = secret
        self.prefixes = tuple(protected_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefixes):
            given = next((v.decode("latin-1") for k, v in scope["headers"] if k == self.header), None)
            if not secrets_match(given, self.secret):
                response = error_response(
                    401, "unauthorized", "Missing or wrong shared secret in the service-secret header."
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
