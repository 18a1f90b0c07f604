"""Google's error bodies (``{"error": {code, message, status, details}}``) as the caller's errors.

What is Gemini's own is read here: a key refused with a 400, the wait in ``RetryInfo``, a daily quota
spent, a context overflow said in words; the mapping by status is ``_errors.provider_error``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from completion_service.providers._errors import MAX_MESSAGE_CHARS, provider_error
from completion_service.providers.gemini.endpoints import VERTEX_PROVIDER_NAME
from suite_common.errors import ApiError

__all__ = ["stream_error", "translate_error"]

_RETRY_DELAY = re.compile(r"(\d+(?:\.\d+)?)s")


def _error_object(payload: Any) -> dict[str, Any]:
    """Google's ``{"error": {code, message, status, details}}``, also when wrapped in a list."""
    if isinstance(payload, list) and payload:
        payload = payload[0]
    error = payload.get("error") if isinstance(payload, dict) else None
    return error if isinstance(error, dict) else {}


def _details(error: Mapping[str, Any], kind: str) -> list[dict[str, Any]]:
    details = error.get("details")
    if not isinstance(details, list):
        return []
    return [d for d in details if isinstance(d, dict) and str(d.get("@type", "")).endswith(f"google.rpc.{kind}")]


def _retry_delay(error: Mapping[str, Any]) -> str | None:
    """``RetryInfo.retryDelay`` (``"27s"``) in whole seconds, or ``None``."""
    for info in _details(error, "RetryInfo"):
        delay = info.get("retryDelay")
        matched = _RETRY_DELAY.fullmatch(delay) if isinstance(delay, str) else None
        if matched:
            return matched.group(1)
    return None


def _key_rejected(error: Mapping[str, Any], message: str) -> bool:
    """The Gemini API answers a bad or expired key with a 400 INVALID_ARGUMENT, not a 401."""
    reasons = {info.get("reason") for info in _details(error, "ErrorInfo")}
    return bool(reasons & {"API_KEY_INVALID", "API_KEY_EXPIRED"}) or "API key not valid" in message


def _quota_spent(error: Mapping[str, Any], message: str) -> bool:
    """A daily quota, or a model without any quota on this plan (``limit: 0``): waiting minutes won't help."""
    for failure in _details(error, "QuotaFailure"):
        for violation in failure.get("violations") or []:
            if isinstance(violation, dict) and "PerDay" in str(violation.get("quotaId", "")):
                return True
    return "limit: 0," in message or message.rstrip().endswith("limit: 0")


def _too_long(status: int, message: str) -> bool:
    lowered = message.lower()
    return (
        status == 400
        and "token count" in lowered
        and any(word in lowered for word in ("exceed", "only supports up to", "maximum number of tokens"))
    )


def translate_error(
    status: int,
    content: bytes,
    headers: Mapping[str, str],
    *,
    upstream_model: str,
    provider_label: str = "Gemini",
    credentials_hint: str = "COMPLETION_GEMINI_API_KEY",
) -> ApiError:
    """The caller's view of a Gemini or Vertex AI HTTP error (``status`` >= 400)."""
    try:
        error = _error_object(json.loads(content))
    except ValueError:
        error = {}
    return _error(status, error, headers, upstream_model, provider_label, credentials_hint)


def _error(
    status: int,
    error: Mapping[str, Any],
    headers: Mapping[str, str],
    upstream_model: str,
    provider_label: str,
    credentials_hint: str,
) -> ApiError:
    raw_message = error.get("message")
    message = raw_message[:MAX_MESSAGE_CHARS] if isinstance(raw_message, str) else ""
    if status == 400 and _key_rejected(error, message):
        return ApiError(
            502, "auth_failed", f"{provider_label} refused the credentials (HTTP 400): check {credentials_hint}."
        )
    waits = {key.lower(): value for key, value in headers.items()}
    delay = _retry_delay(error)
    if delay is not None and "retry-after" not in waits and "retry-after-ms" not in waits:
        waits["retry-after"] = delay  # Google says how long to wait in the body, not in a header
    return provider_error(
        status,
        provider=provider_label,
        message=message or None,
        headers=waits,
        upstream_model=upstream_model,
        credentials_hint=credentials_hint,
        context_length_exceeded=_too_long(status, message),
        quota_exhausted=status == 429 and _quota_spent(error, message),
    )


def stream_error(chunk: Mapping[str, Any], provider: str) -> ApiError:
    """An error object in the middle of a stream, as the error its HTTP code would have been."""
    error = _error_object(chunk)
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code <= 599 else 500
    label = "Vertex AI" if provider == VERTEX_PROVIDER_NAME else "Gemini"
    return _error(status, error, {}, "", label, "the provider's credentials")
