"""The failure of a call to one of the suite's services, as the caller is told it.

``UpstreamError`` is an ``ApiError`` (``suite_common.errors``): raised out of a handler, it answers with its status,
its ``{"error": {"code", "message"}}`` body and its headers (a ``Retry-After`` passed through) like any refusal.
Inside a run it ends the run instead (the loop reports ``code`` and ``message`` in the run's ``error`` event).
"""

from __future__ import annotations

from suite_common.errors import ApiError
from suite_common.wire import AuthorizationRequiredError

__all__ = ["AUTHORIZATION_REQUIRED", "OUTBOUND_BLOCKED", "AuthorizationNeeded", "UpstreamError", "outbound_blocked"]

AUTHORIZATION_REQUIRED = "authorization_required"
"""The gateway did not make a tool call: its server is behind OAuth and holds no token for whom the call acts."""

OUTBOUND_BLOCKED = "outbound_ssrf_blocked"
"""The gateway refused a tool call because its server's address is one the outbound policy blocks (403). The run
ends at once with it, never fed back to the model: whoever controls a server's DNS must not probe the internal
network one tool call at a time."""


class UpstreamError(ApiError):
    """A call to one of the suite's services failed; ``code`` and ``message`` go to the caller (HTTP ``status``, 502
    unless the peer's status tells the caller something, and ``headers``)."""

    def __init__(self, code: str, message: str, *, status: int = 502, headers: dict[str, str] | None = None) -> None:
        super().__init__(status, code, message, headers=headers)


def outbound_blocked() -> UpstreamError:
    """The run's error when a tool call was refused by the outbound policy: 403, in words of our own (the gateway's
    may name the address the server resolved to, which is none of the run's caller's business)."""
    return UpstreamError(
        OUTBOUND_BLOCKED,
        "A tool call was refused: its server's address is one the outbound policy blocks. The run was stopped.",
        status=403,
    )


class AuthorizationNeeded(Exception):
    """The gateway's ``authorization_required`` answer to a tool call (HTTP 401, or an SSE ``error`` event): nothing
    was called; ``detail.tokens`` says who consents (the run's user, or an admin for a machine server). The
    gateway's ``detail.authorization_url`` is never handed on (``engine.tool_calls``). Not a failure of the run."""

    def __init__(self, detail: AuthorizationRequiredError) -> None:
        super().__init__(f"the MCP server {detail.server!r} needs authorization")
        self.detail = detail
