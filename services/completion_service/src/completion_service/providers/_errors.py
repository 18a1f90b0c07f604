"""Provider failures as the neutral errors callers see, decided by HTTP status once for every provider.

Each adapter parses its own error body (message, code) and says what it recognised (a context
overflow, a spent quota); the status mapping, the ``Retry-After`` passed on and the ``retryable``
flag the transport retries on are the same for all of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from suite_common.echo import clip
from suite_common.errors import ApiError
from suite_common.retry import retry_after_seconds

__all__ = ["MAX_MESSAGE_CHARS", "bad_response", "provider_error", "retry_after_header"]

MAX_MESSAGE_CHARS = 1000


def bad_response(detail: str) -> ApiError:
    """The provider answered 2xx with something that is not what its API documents."""
    return ApiError(502, "bad_upstream_response", f"The provider sent something the service cannot read: {detail}.")


def provider_error(
    status: int,
    *,
    provider: str,
    message: str | None,
    headers: Mapping[str, str],
    upstream_model: str,
    credentials_hint: str,
    context_length_exceeded: bool = False,
    quota_exhausted: bool = False,
) -> ApiError:
    """The caller's view of a provider's HTTP error (``status`` >= 400).

    ``credentials_hint`` names what to check on a 401/403 (a setting, never the key itself: the
    provider's own message may quote part of it, so it is not passed on).
    """
    reason = (message or "no reason given")[:MAX_MESSAGE_CHARS]
    retry_after = retry_after_header(headers)
    if status in (401, 403):
        return ApiError(
            502, "auth_failed", f"{provider} refused the credentials (HTTP {status}): check {credentials_hint}."
        )
    if context_length_exceeded:
        return ApiError(400, "context_length_exceeded", f"The conversation is too long for the model: {reason}")
    if status == 404:
        return ApiError(
            400,
            "model_not_found",
            f"{provider} has no model {clip(upstream_model)!r} or no such endpoint (HTTP 404): {reason}",
        )
    if status == 402:
        # Payment required (Anthropic's billing_error, OpenRouter's credits): no retry brings money back.
        return ApiError(429, "quota_exhausted", f"{provider} says the account cannot pay for this: {reason}")
    if status == 408:
        return ApiError(504, "upstream_timeout", f"{provider} timed out (HTTP 408): {reason}", retryable=True)
    if status == 429:
        return _too_many_requests(provider, reason, retry_after, quota_exhausted=quota_exhausted)
    if status >= 500:
        return _server_failure(status, provider, reason, retry_after)
    if status == 413:
        return ApiError(400, "invalid_request", f"{provider} refused the request as too large (HTTP 413): {reason}")
    return ApiError(400, "invalid_request", f"{provider} rejected the request (HTTP {status}): {reason}")


def _too_many_requests(
    provider: str, reason: str, retry_after: dict[str, str] | None, *, quota_exhausted: bool
) -> ApiError:
    """A 429: a rate limit, retried after the wait the provider gave, or a spent quota, which is not."""
    if quota_exhausted:
        # Waiting does not bring a spent budget back: retrying would only delay the same answer.
        return ApiError(429, "quota_exhausted", f"{provider} says the account's quota is used up: {reason}")
    return ApiError(
        429, "rate_limited", f"{provider} is rate limiting requests: {reason}", headers=retry_after, retryable=True
    )


def _server_failure(status: int, provider: str, reason: str, retry_after: dict[str, str] | None) -> ApiError:
    """A 5xx (and Anthropic's 529): overloaded, timed out or failed; all of them retryable."""
    if status in (503, 529):
        return ApiError(
            503,
            "overloaded",
            f"{provider} is overloaded (HTTP {status}): {reason}",
            headers=retry_after,
            retryable=True,
        )
    if status == 504:
        return ApiError(504, "upstream_timeout", f"{provider} timed out (HTTP 504): {reason}", retryable=True)
    return ApiError(
        503,
        "upstream_unavailable",
        f"{provider} failed (HTTP {status}): {reason}",
        headers=retry_after,
        retryable=True,
    )


def retry_after_header(headers: Mapping[str, str]) -> dict[str, str] | None:
    """The provider's wait as the caller's ``Retry-After``: whole seconds, rounded up, whatever form it came in."""
    seconds = retry_after_seconds(headers)
    return None if seconds is None else {"Retry-After": str(math.ceil(seconds))}
