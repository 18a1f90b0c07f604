"""The error body every service answers with, beside the right HTTP status (docs/architecture.md, "Errors")."""

from __future__ import annotations

from suite_common.wire.base import WireModel

__all__ = ["ErrorDetail", "ErrorResponse"]


class ErrorDetail(WireModel):
    code: str
    """A stable machine code (``invalid_request``, ``tool_not_found``, ...)."""
    message: str
    """What went wrong and what to do, for people."""


class ErrorResponse(WireModel):
    """Every service's error body, with the right HTTP status; some errors add fields beside ``error``."""

    error: ErrorDetail
