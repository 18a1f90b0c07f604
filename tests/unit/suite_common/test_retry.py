"""The one retry policy of outbound calls and the one ``Retry-After`` reader."""

from __future__ import annotations

import anyio
import httpx
import pytest
from tenacity import RetryCallState

from suite_common.retry import RetryableFailure, retry_after_seconds, retry_policy

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_in_its_three_forms(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(headers) == expected


def test_retry_after_is_read_from_headers_in_any_case() -> None:
    assert retry_after_seconds(httpx.Headers({"Retry-After": "3"})) == 3.0


class _Attempts:
    """An operation that fails with the scripted failures, then answers ``"ok"``; records the waits."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0
        self.waits: list[float] = []

    def before_sleep(self, state: RetryCallState) -> None:
        self.waits.append(state.upcoming_sleep)

    async def run(self, **policy: float) -> str:
        async for attempt in retry_policy(before_sleep=self.before_sleep, **policy):  # type: ignore[arg-type]
            with attempt:
                self.calls += 1
                if self.failures:
                    raise self.failures.pop(0)
                return "ok"
        raise AssertionError("tenacity returns or raises")


def _failure(retry_after: float | None = None) -> RetryableFailure[ValueError]:
    return RetryableFailure(ValueError("busy"), retry_after)


async def test_a_retryable_failure_is_retried_waiting_exactly_its_retry_after() -> None:
    attempts = _Attempts(_failure(0.01), _failure(0.02))
    with anyio.fail_after(5):
        assert await attempts.run(max_retries=2, max_retry_after=1.0) == "ok"
    assert (attempts.calls, attempts.waits) == (3, [0.01, 0.02])


async def test_retries_are_bounded_and_the_last_failure_is_raised() -> None:
    last = _failure(0)
    attempts = _Attempts(_failure(0), _failure(0), last)
    with anyio.fail_after(5), pytest.raises(RetryableFailure) as raised:
        await attempts.run(max_retries=2, max_retry_after=1.0)
    assert raised.value is last
    assert attempts.calls == 3


async def test_without_retry_after_the_wait_is_exponential_backoff() -> None:
    attempts = _Attempts(_failure(), _failure(), _failure())
    with anyio.fail_after(5):
        await attempts.run(max_retries=3, max_retry_after=1.0, backoff=0.001, jitter=0, max_backoff=0.003)
    assert attempts.waits == [0.001, 0.002, 0.003]


async def test_a_retry_after_longer_than_the_policy_waits_is_given_up_at_once() -> None:
    attempts = _Attempts(_failure(30.0))
    with anyio.fail_after(5), pytest.raises(RetryableFailure):
        await attempts.run(max_retries=2, max_retry_after=4.0)
    assert (attempts.calls, attempts.waits) == (1, [])


async def test_a_wait_that_would_end_past_the_deadline_is_not_made() -> None:
    attempts = _Attempts(_failure(2.0))
    with anyio.fail_after(5), pytest.raises(RetryableFailure):
        await attempts.run(max_retries=2, max_retry_after=4.0, deadline=anyio.current_time() + 1.0)
    assert (attempts.calls, attempts.waits) == (1, [])


async def test_any_other_exception_is_not_retried() -> None:
    attempts = _Attempts(PermissionError("401"))
    with anyio.fail_after(5), pytest.raises(PermissionError):
        await attempts.run(max_retries=2, max_retry_after=4.0)
    assert attempts.calls == 1
