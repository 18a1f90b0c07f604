"""``RunLimits``: the one question the loop asks before each LLM call."""

from __future__ import annotations

import pytest

from agent_service.core.limits import DEADLINE_SLACK_SECONDS, RunLimits, Stop
from suite_common.deadline import Deadline
from suite_common.wire import Usage

pytestmark = pytest.mark.anyio

NOTHING = Usage()


async def test_the_run_goes_on_while_it_has_rounds_and_time_left() -> None:
    limits = RunLimits(max_iterations=3, deadline=Deadline.after(60))
    assert [limits.stop_before_call(done, NOTHING) for done in range(3)] == [None, None, None]
    assert limits.stop_before_call(3, NOTHING) == Stop("max_iterations")


async def test_a_passed_deadline_stops_the_run_before_its_next_call() -> None:
    limits = RunLimits(max_iterations=3, deadline=Deadline.after(-1))
    assert limits.stop_before_call(0, NOTHING) == Stop("deadline")


async def test_the_last_round_done_ends_the_run_on_max_iterations_even_past_the_deadline() -> None:
    # As the loop always reported it: the rounds ran out first, whatever the clock says afterwards.
    limits = RunLimits(max_iterations=2, deadline=Deadline.after(-1))
    assert limits.stop_before_call(2, NOTHING) == Stop("max_iterations")


async def test_a_failure_within_the_slack_of_the_deadline_is_the_deadlines_doing() -> None:
    assert RunLimits(max_iterations=1, deadline=Deadline.after(DEADLINE_SLACK_SECONDS / 2)).out_of_time()
    assert not RunLimits(max_iterations=1, deadline=Deadline.after(60)).out_of_time()


async def test_the_run_stops_on_its_token_budget_once_its_input_and_output_tokens_reach_it() -> None:
    limits = RunLimits(max_iterations=5, deadline=Deadline.after(60), max_total_tokens=100)
    assert limits.stop_before_call(1, Usage(input_tokens=60, output_tokens=39)) is None
    assert limits.stop_before_call(1, Usage(input_tokens=60, output_tokens=40)) == Stop("budget", "run_tokens")


async def test_the_run_stops_on_its_cost_budget_and_calls_without_a_price_cost_nothing() -> None:
    limits = RunLimits(max_iterations=5, deadline=Deadline.after(60), max_cost_usd=0.01)
    assert limits.stop_before_call(1, Usage(input_tokens=10_000, output_tokens=10_000)) is None  # no price known
    assert limits.stop_before_call(1, Usage(cost_usd=0.0099)) is None
    assert limits.stop_before_call(1, Usage(cost_usd=0.01)) == Stop("budget", "run_cost")


async def test_rounds_and_the_deadline_are_checked_before_the_budgets() -> None:
    spent = Usage(input_tokens=500, cost_usd=5.0)
    limits = RunLimits(max_iterations=2, deadline=Deadline.after(-1), max_total_tokens=10, max_cost_usd=1.0)
    assert limits.stop_before_call(2, spent) == Stop("max_iterations")
    assert limits.stop_before_call(1, spent) == Stop("deadline")
    both = RunLimits(max_iterations=2, deadline=Deadline.after(60), max_total_tokens=10, max_cost_usd=1.0)
    assert both.stop_before_call(1, spent) == Stop("budget", "run_tokens")
