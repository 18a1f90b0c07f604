"""Anthropic's error bodies (``{"type": "error", "error": {...}}``) as the caller's errors, over HTTP or as an
``error`` event in the middle of a stream; the mapping by status is ``_errors.provider_error``'s."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from completion_service.providers._errors import MAX_MESSAGE_CHARS, provider_error
from suite_common.errors import ApiError

__all__ = ["stream_error", "translate_error"]

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def _error_detail(payload: Any) -> tuple[str | None, str | None, str | None]:
    """``(message, type, details.error_code)`` of ``{"type": "error", "error": {...}}``."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        return None, None, None
    message, kind, details = error.get("message"), error.get("type"), error.get("details")
    code = details.get("error_code") if isinstance(details, dict) else None
    return (
        message[:MAX_MESSAGE_CHARS] if isinstance(message, str) else None,
        kind if isinstance(kind, str) else None,
        code if isinstance(code, str) else None,
    )


def _context_overflow(message: str | None) -> bool:
    text = (message or "").lower()
    return "prompt is too long" in text or "exceed context limit" in text


def _error(status: int, payload: Any, headers: Mapping[str, str], *, upstream_model: str, provider: str) -> ApiError:
    message, kind, code = _error_detail(payload)
    if status == 404 and message is None:
        message = "is COMPLETION_ANTHROPIC_BASE_URL right (the service calls <url>/v1/messages)?"
    return provider_error(
        status,
        provider=provider,
        message=message,
        headers=headers,
        upstream_model=upstream_model,
        credentials_hint="COMPLETION_ANTHROPIC_API_KEY",
        context_length_exceeded=status in (400, 413) and _context_overflow(message),
        # A spent monthly budget is a 429 too, but waiting minutes does not bring it back.
        quota_exhausted=code == "enforced_spend_limit_reached" or kind == "billing_error",
    )


def translate_error(
    status: int, content: bytes, headers: Mapping[str, str], *, upstream_model: str, provider: str = "Anthropic"
) -> ApiError:
    """The caller's view of an HTTP error of the Messages API (``status`` >= 400)."""
    try:
        payload = json.loads(content)
    except ValueError:
        payload = None
    return _error(status, payload, headers, upstream_model=upstream_model, provider=provider)


def stream_error(event: Mapping[str, Any], *, upstream_model: str = "") -> ApiError:
    """An ``error`` event inside a stream (the HTTP status was already 200) as the error its type stands for:
    ``overloaded_error`` is a retryable 503 ``overloaded``, as a 529 would have been."""
    _, kind, _ = _error_detail(event)
    error = _error(_ERROR_STATUS.get(kind or "", 500), event, {}, upstream_model=upstream_model, provider="Anthropic")
    error.message = f"{error.message} (an error event in the middle of the stream)"
    return error
