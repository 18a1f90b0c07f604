"""A circuit breaker per server, and the recent call durations its status reports.

The breaker counts failures that say the server itself is unwell: a stdio child that crashed or
could not start, a connection that could not be opened or dropped, a call that failed at the
transport or protocol level. ``failure_threshold`` failures within ``window_seconds`` open it:
calls fail fast with a message saying so and the supervisor stops reconnecting. After
``open_seconds`` it is half-open: the supervisor tries once more and calls are let through; the
next outcome closes it (a success) or opens it again (a failure). A success while closed clears
the count, so only failures in a row trip it.

The policy (``BreakerPolicy``) is part of the connection options (``config.options``).
Time comes from an injected clock (``time.monotonic`` by default), so tests can move it.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from mcp_client_service.config.options import BreakerPolicy

__all__ = ["CallDurations", "CircuitBreaker", "CircuitState"]

CircuitState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(self, policy: BreakerPolicy | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy or BreakerPolicy()
        self._clock = clock
        self._failures: deque[float] = deque()
        self._opened_at: float | None = None
        self._half_open = False
        self.last_failure: str | None = None

    @property
    def state(self) -> CircuitState:
        if self._opened_at is None:
            return "half_open" if self._half_open else "closed"
        if self._clock() - self._opened_at >= self.policy.open_seconds:
            self._opened_at = None
            self._half_open = True
            return "half_open"
        return "open"

    def allows_calls(self) -> bool:
        """``False`` only while open: half-open lets calls through to find out."""
        return self.state != "open"

    def seconds_until_half_open(self) -> float:
        if self.state != "open" or self._opened_at is None:
            return 0.0
        return max(0.0, self._opened_at + self.policy.open_seconds - self._clock())

    def recent_failures(self) -> int:
        self._forget_old_failures()
        return len(self._failures)

    def record_success(self) -> None:
        if self.state == "open":
            return  # a call admitted before it opened; the open period still runs
        self._failures.clear()
        self._half_open = False

    def record_failure(self, reason: str) -> bool:
        """Count one failure; ``True`` when it opened the circuit."""
        self.last_failure = reason
        state = self.state
        if state == "open":
            return False
        now = self._clock()
        self._failures.append(now)
        self._forget_old_failures()
        if state == "half_open" or len(self._failures) >= self.policy.failure_threshold:
            self._opened_at = now
            self._half_open = False
            self._failures.clear()
            return True
        return False

    def describe_open(self, server: str) -> str:
        """Why calls to ``server`` are refused now, for the caller and the status page."""
        return f"{self.open_reason(server)}; it is tried again in {self.seconds_until_half_open():.0f} s"

    def open_reason(self, server: str) -> str:
        """Why the circuit is open, without the countdown (for a listing rendered ahead of time)."""
        return (
            f'the circuit of the MCP server "{server}" is open after {self.policy.failure_threshold} failures '
            f"within {self.policy.window_seconds:g} s (last: {self.last_failure})"
        )

    def _forget_old_failures(self) -> None:
        horizon = self._clock() - self.policy.window_seconds
        while self._failures and self._failures[0] < horizon:
            self._failures.popleft()


class CallDurations:
    """The last ``size`` call durations of one server, for its p50 latency."""

    def __init__(self, size: int = 100) -> None:
        self._seconds: deque[float] = deque(maxlen=size)

    def add(self, seconds: float) -> None:
        self._seconds.append(seconds)

    def p50_ms(self) -> float | None:
        if not self._seconds:
            return None
        return round(statistics.median(self._seconds) * 1000, 3)

    def __len__(self) -> int:
        return len(self._seconds)
