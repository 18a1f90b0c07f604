"""The circuit breaker of a server, and the call durations behind its p50, on a clock the test moves."""

from __future__ import annotations

from mcp_client_service.config.options import BreakerPolicy
from mcp_client_service.connection.breaker import CallDurations, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _state(breaker: CircuitBreaker) -> str:
    return breaker.state  # read afresh: the state moves with the clock and with outcomes


def _breaker(clock: Clock) -> CircuitBreaker:
    return CircuitBreaker(BreakerPolicy(failure_threshold=3, window_seconds=10, open_seconds=30), clock=clock)


def test_failures_in_a_row_within_the_window_open_the_circuit() -> None:
    clock = Clock()
    breaker = _breaker(clock)

    opened = [breaker.record_failure(f"crash {n}") for n in range(3)]

    assert opened == [False, False, True]
    assert _state(breaker) == "open"
    assert not breaker.allows_calls()
    assert breaker.seconds_until_half_open() == 30
    message = breaker.describe_open("rag")
    assert message.startswith('the circuit of the MCP server "rag" is open after 3 failures within 10 s')
    assert "(last: crash 2)" in message
    assert message.endswith("it is tried again in 30 s")


def test_failures_older_than_the_window_do_not_count() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    breaker.record_failure("a")
    breaker.record_failure("b")
    clock.now += 11

    assert breaker.record_failure("c") is False
    assert _state(breaker) == "closed"
    assert breaker.recent_failures() == 1


def test_a_success_clears_the_count() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    breaker.record_failure("a")
    breaker.record_failure("b")
    breaker.record_success()

    assert breaker.record_failure("c") is False
    assert _state(breaker) == "closed"


def test_after_the_open_period_it_half_opens_and_the_next_outcome_decides() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    for _ in range(3):
        breaker.record_failure("down")
    clock.now += 30

    assert _state(breaker) == "half_open"
    assert breaker.allows_calls()
    assert breaker.record_failure("still down") is True  # one failure is enough when half-open
    assert _state(breaker) == "open"

    clock.now += 30
    breaker.record_success()
    assert _state(breaker) == "closed"
    assert breaker.record_failure("once") is False


def test_a_late_success_does_not_close_an_open_circuit() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    for _ in range(3):
        breaker.record_failure("down")

    breaker.record_success()  # a call admitted before it opened

    assert _state(breaker) == "open"


def test_the_p50_is_the_median_of_the_last_calls_only() -> None:
    durations = CallDurations(size=3)
    assert durations.p50_ms() is None

    for seconds in (10.0, 0.010, 0.030, 0.020):
        durations.add(seconds)

    assert durations.p50_ms() == 20.0
    assert len(durations) == 3
