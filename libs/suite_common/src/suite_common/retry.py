"""Bounded retries of outbound calls: one ``Retry-After`` reader and one tenacity policy.

An attempt that may be made again raises ``RetryableFailure`` carrying the error the caller gets
if it is not, and the server's ``Retry-After`` if it gave one. ``retry_policy`` retries only
those, at most ``max_retries`` times, waiting exactly the ``Retry-After`` when there is one and
exponential backoff with jitter otherwise; a ``Retry-After`` longer than ``max_retry_after`` is
not waited for (the caller gets the error at once, to come back when it says), nor is a wait
that would end past ``deadline``. When it gives up it re-raises the last ``RetryableFailure``:
the caller unwraps ``.error``. Users: completion-service's provider transport, the RAG tool's
embeddings client.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

import anyio
from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, stop_any, wait_exponential_jitter
from tenacity.retry import retry_base
from tenacity.stop import stop_base

__all__ = ["RetryableFailure", "retry_after_seconds", "retry_policy"]


ErrorT = TypeVar("ErrorT", bound=Exception)


class RetryableFailure(Exception, Generic[ErrorT]):
    """A failed attempt after which the same request may be sent again (never one that may have had effects).

    ``error`` is what the caller raises if no retry follows; ``retry_after`` the server's wait in seconds;
    ``reason`` a short word for the retry's log line (a status, an error code, an exception's name).
    """

    def __init__(self, error: ErrorT, retry_after: float | None = None, *, reason: str = "") -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        self.reason = reason or type(error).__name__


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """How long the server asked us to wait: ``retry-after-ms``, or ``Retry-After`` in seconds or as a date.

    ``headers`` is looked up in lower case (httpx's and aiohttp's headers ignore case anyway).
    """
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _RetryWhenWaitable(retry_base):
    """Retry a ``RetryableFailure`` unless the server asked for a wait longer than we will make."""

    def __init__(self, max_retry_after: float) -> None:
        self.max_retry_after = max_retry_after

    def __call__(self, retry_state: RetryCallState) -> bool:
        failure = retry_state.outcome.exception() if retry_state.outcome else None
        if not isinstance(failure, RetryableFailure):
            return False
        return failure.retry_after is None or failure.retry_after <= self.max_retry_after


class _StopBefore(stop_base):
    """Stop when the next wait would end past the deadline: sleeping only to time out would hide
    the real reason (a 429, a 503) behind a timeout."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        return anyio.current_time() + retry_state.upcoming_sleep >= self.deadline


def retry_policy(
    *,
    max_retries: int,
    max_retry_after: float,
    deadline: float | None = None,
    backoff: float = 0.5,
    max_backoff: float = 4.0,
    jitter: float = 0.5,
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> AsyncRetrying:
    """A tenacity ``AsyncRetrying`` for ``async for attempt in ...: with attempt: ...``.

    ``deadline`` is on ``anyio.current_time()``'s clock. ``before_sleep`` is called before each wait
    (``state.upcoming_sleep`` is the wait; ``state.outcome.exception()`` the ``RetryableFailure``).
    """
    backoff_wait = wait_exponential_jitter(multiplier=backoff, max=max_backoff, jitter=jitter)

    def wait(state: RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome else None
        if isinstance(failure, RetryableFailure) and failure.retry_after is not None:
            return failure.retry_after  # exactly what the server asked for (``_RetryWhenWaitable`` bounds it)
        return float(backoff_wait(state))

    stop: stop_base = stop_after_attempt(max_retries + 1)
    if deadline is not None:
        stop = stop_any(stop, _StopBefore(deadline))
    return AsyncRetrying(
        retry=_RetryWhenWaitable(max_retry_after),
        stop=stop,
        wait=wait,
        sleep=anyio.sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
