"""Bedrock's error answers and ConverseStream's exception frames as the caller's errors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from completion_service.providers._errors import MAX_MESSAGE_CHARS, provider_error
from suite_common.errors import ApiError

__all__ = ["translate_error", "translate_stream_exception"]


def _error_type(headers: Mapping[str, str], payload: Any) -> str:
    """``ThrottlingException`` from ``x-amzn-ErrorType: ThrottlingException:http://...`` or the body's ``__type``."""
    raw = headers.get("x-amzn-errortype") or (payload.get("__type") if isinstance(payload, dict) else None) or ""
    return str(raw).split(":", 1)[0].rsplit("#", 1)[-1]


def _is_context_overflow(message: str | None) -> bool:
    text = (message or "").lower()
    return any(marker in text for marker in ("too long", "too many input tokens", "context window", "input length"))


def translate_error(status: int, content: bytes, headers: Mapping[str, str], *, upstream_model: str) -> ApiError:
    """The caller's view of a Bedrock HTTP error (``status`` >= 400)."""
    try:
        payload = json.loads(content)
    except ValueError:
        payload = None
    message = payload.get("message") or payload.get("Message") if isinstance(payload, dict) else None
    message = message[:MAX_MESSAGE_CHARS] if isinstance(message, str) else None
    kind = _error_type(headers, payload)
    if kind in ("UnrecognizedClientException", "AccessDeniedException", "ExpiredTokenException"):
        status = 403
    elif kind == "ModelNotReadyException":
        status = 503
    elif kind == "ModelTimeoutException":
        status = 408
    return provider_error(
        status,
        provider="Bedrock",
        message=f"{kind}: {message}" if kind and message else message or kind or None,
        headers=headers,
        upstream_model=upstream_model,
        credentials_hint="the AWS credentials (COMPLETION_AWS_ACCESS_KEY_ID or the role) and their Bedrock permissions",
        context_length_exceeded=kind == "ValidationException" and _is_context_overflow(message),
    )


_STREAM_EXCEPTION_STATUS = {
    "throttlingException": 429,
    "serviceUnavailableException": 503,
    "internalServerException": 500,
    "modelStreamErrorException": 500,
    "validationException": 400,
}


def translate_stream_exception(kind: str, payload: bytes) -> ApiError:
    """An ``exception`` frame in the middle of a ConverseStream response."""
    try:
        message = json.loads(payload).get("message")
    except (ValueError, AttributeError):
        message = None
    status = _STREAM_EXCEPTION_STATUS.get(kind, 500)
    return provider_error(
        status,
        provider="Bedrock",
        message=f"{kind}: {message}" if isinstance(message, str) else kind,
        headers={},
        upstream_model="",
        credentials_hint="the AWS credentials",
        context_length_exceeded=status == 400 and _is_context_overflow(message if isinstance(message, str) else None),
    )
