"""The failure of a call to one of the suite's services, as the caller is told it.

``UpstreamError`` is an ``ApiError`` (``suite_common.errors``): raised out of a handler, it answers with its status,
its ``{"error": {"code", "message"}}`` body and its headers (a ``Retry-After`` passed through) like any refusal.
Inside a run it ends the run instead (the loop reports ``code`` and ``message`` in the run's ``error`` event).
"""

from __future__ import annotations

from suite_common.errors import ApiError

__all__ = ["UpstreamError"]


class UpstreamError(ApiError):
    """A call to one of the suite's services failed; ``code`` and ``message`` go to the caller (HTTP ``status``, 502
    unless the peer's status tells the caller something, and ``headers``)."""

    def __init__(self, code: str, message: str, *, status: int = 502, headers: dict[str, str] | None = None) -> None:
        super().__init__(status, code, message, headers=headers)
